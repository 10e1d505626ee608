"""Based as its README runs it: tiny random checkpoints of the three released models (Based, Attention, Mamba;
config.json from the tree's train/configs/experiment/reference/*-360m.yaml model configs with sizes shrunk, the
state dict built by the tree's own model class and saved as on a CUDA machine with the Lightning task's `model.`
prefix and a metrics counter, which the loaders strip) in an offline Hugging Face cache beside a tiny byte-level BPE
tokenizer as `gpt2`; notebooks/03-24-quick-start.ipynb run as a script (its code cells, IPython magics and shell
lines left out: the notebook is the tree's, so it is ported like the rest); the README's loading snippets with a
generate call each; two configurations of based/tests/test_generation.py; and the README's training command,
`cd train/ && python run.py experiment=example/based-360m trainer.devices=N`, with N=1 and sizes / data / checkpoint
directory scaled down by Hydra overrides (a local text dataset in place of wikitext-103), then resumed (the example
config has resume: True) from its last.ckpt re-saved as on CUDA.

The wandb logger's config says mode: online; the recipe sets logger.wandb.mode=disabled (no network, no key).
The README snippets are the recipe's files, not the tree's, so porter does not see them: their `.to("cuda")` is left
out (they run where the tree's code puts the model). The configs' accelerator (gpu), precision (bf16), optimizer
(apex FusedAdam), loss (flash-attn's) and nvidia-smi resolver are kept as the tree says.
"""

from pathlib import Path

from _recipe import Step, fake_hub_model, synthetic_text

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}", "HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": "{tree}/_gauntlet/hf/datasets",
       "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "WANDB_SILENT": "true",
       "DATA_DIR": "{tree}/_gauntlet/data"}
VOCAB = 512

# train/configs/experiment/reference/based-360m.yaml's model.config, resolved, sizes shrunk (27 layers -> 3, the
# alternating mixers at layers 1 and 2, n_embd 1024 -> 64, 16 heads -> 4, window 256 -> 32, l_max 2048 -> 128).
BASED = {
    "alt_mixer_layers": [1], "alt_mixer_2_layers": [2],
    "mixer": {"_target_": "based.models.mixers.convolution.BaseConv", "l_max": 128, "use_bias": True,
              "expand_proj": 4, "kernel_sizes": 3},
    "alt_mixer": {"_target_": "based.models.mixers.linear_attention.LinearAttention", "l_max": 128,
                  "feature_map": {"_target_": "based.models.mixers.linear_attention.TaylorExp", "input_dim": 16},
                  "feature_dim": 16, "num_heads": 4, "parallel_implementation": "fla_parallel"},
    "alt_mixer_2": {"_target_": "based.models.mixers.slide_attention.SlidingAttention", "window_size": 32,
                    "num_heads": 4, "causal": True},
    "n_embd": 64, "special_initializer": True, "n_head": 4, "n_layer": 3, "rms_norm": True, "fused_mlp": False,
    "attn_pdrop": 0, "embd_pdrop": 0, "n_positions": 2048, "resid_pdrop": 0, "mlp_fc1_bias": False,
    "mlp_fc2_bias": False, "fused_bias_fc": True, "out_proj_bias": False, "qkv_proj_bias": False,
    "use_flash_attn": True, "residual_in_fp32": True, "activation_function": "swiglu", "rotary_emb_fraction": 1,
    "fused_dropout_add_ln": True, "max_position_embeddings": 0, "pad_vocab_size_multiple": 8,
    "reorder_and_upcast_attn": False, "scale_attn_by_inverse_layer_idx": False, "n_inner": 128,
    "vocab_size": VOCAB,
}
# reference/attn-360m.yaml (24 layers -> 2, n_embd 1024 -> 64, 16 heads -> 4).
ATTN = {
    "n_embd": 64, "n_head": 4, "n_layer": 2, "rms_norm": True, "fused_mlp": False, "attn_pdrop": 0,
    "embd_pdrop": 0, "n_positions": 2048, "resid_pdrop": 0, "mlp_fc1_bias": False, "mlp_fc2_bias": False,
    "fused_bias_fc": True, "out_proj_bias": False, "qkv_proj_bias": False, "use_flash_attn": True,
    "residual_in_fp32": True, "activation_function": "swiglu", "rotary_emb_fraction": 0.5,
    "fused_dropout_add_ln": True, "max_position_embeddings": 0, "pad_vocab_size_multiple": 16,
    "reorder_and_upcast_attn": False, "scale_attn_by_inverse_layer_idx": False, "ff_mult": 4,
    "vocab_size": VOCAB,
}
# reference/mamba-360m.yaml (46 layers -> 2, d_model 1024 -> 64) as based.models.mamba.MambaConfig's fields.
MAMBA = {"d_model": 64, "n_layer": 2, "vocab_size": VOCAB, "ssm_cfg": {}, "rms_norm": True,
         "residual_in_fp32": True, "fused_add_norm": True, "pad_vocab_size_multiple": 16}

MAKE_CHECKPOINT = '''\
# A tiny random checkpoint for `hazyresearch/<kind>-360m`, built by the tree's own model class and saved as the
# released ones were: a Lightning task's state dict (`model.` prefix, metrics counters), written on a CUDA machine.
import json
import sys
from pathlib import Path

import torch
from torch import serialization

kind, snapshot = sys.argv[1], Path(sys.argv[2])
cfg = json.loads((snapshot / "config.json").read_text())
torch.manual_seed(0)
if kind == "based":
    from transformers import GPT2Config
    from based.models.gpt import GPTLMHeadModel
    model = GPTLMHeadModel(GPT2Config(**cfg))
elif kind == "attn":
    from transformers import GPT2Config
    from based.models.transformer.gpt import GPTLMHeadModel
    model = GPTLMHeadModel(GPT2Config(**cfg))
else:
    from based.models.mamba import MambaConfig, MambaLMHeadModel
    model = MambaLMHeadModel(MambaConfig(**cfg))
state = {"model." + k: v.detach().cpu().float().clone() for k, v in model.state_dict().items()}
state["train_metrics.num-tokens.count"] = torch.tensor(0)
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
try:
    torch.save(state, str(snapshot / "pytorch_model.bin"))
finally:
    serialization.location_tag = original
print(kind, "checkpoint:", sum(v.numel() for v in state.values()), "values")
'''

CUDA_CHECKPOINT = '''\
# Re-save a Lightning checkpoint as a CUDA machine writes it (every storage tagged cuda:0).
import sys

import torch
from torch import serialization

path = sys.argv[1]
checkpoint = torch.load(path, map_location="cpu", weights_only=False)
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
try:
    torch.save(checkpoint, path)
finally:
    serialization.location_tag = original
print("re-saved as on CUDA:", path, "global_step", checkpoint.get("global_step"))
'''

NOTEBOOK_TO_SCRIPT = '''\
# The code cells of a notebook as one script: IPython magics (%) and shell lines (!) left out.
import json
import sys

notebook = json.load(open(sys.argv[1]))
lines = []
for cell in notebook["cells"]:
    if cell["cell_type"] != "code":
        continue
    for line in "".join(cell["source"]).splitlines():
        if line.lstrip().startswith(("%", "!")):
            continue
        lines.append(line)
    lines.append("")
open(sys.argv[2], "w").write("\\n".join(lines) + "\\n")
'''

README_BASED = '''\
# README "Pretrained Checkpoints": load Based and generate (the input's `.to("cuda")` left out).
import torch
from transformers import AutoTokenizer
from based.models.gpt import GPTLMHeadModel

tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = GPTLMHeadModel.from_pretrained_hf("hazyresearch/based-360m")

input = tokenizer.encode("If I take one more step, it will be", return_tensors="pt")
output = model.generate(input, max_length=20)
print(tokenizer.decode(output[0]))
assert output.shape[-1] == 20, output.shape
'''

README_ATTN = '''\
# README: load the Attention model (its `.to("cuda")` left out), then generate as the Based snippet does.
import torch
from transformers import AutoTokenizer
from based.models.transformer.gpt import GPTLMHeadModel

tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = GPTLMHeadModel.from_pretrained_hf("hazyresearch/attn-360m")

device = next(model.parameters()).device
input = tokenizer.encode("If I take one more step, it will be", return_tensors="pt").to(device)
output = model.generate(input, max_length=20)
print(tokenizer.decode(output[0]))
assert output.shape[-1] == 20, output.shape
'''

README_MAMBA = '''\
# README: load the Mamba model (its `.to("cuda")` left out), then generate as the Based snippet does.
import torch
from transformers import AutoTokenizer
from based.models.mamba import MambaLMHeadModel

tokenizer = AutoTokenizer.from_pretrained("gpt2")
model = MambaLMHeadModel.from_pretrained_hf("hazyresearch/mamba-360m")

device = next(model.parameters()).device
input = tokenizer.encode("If I take one more step, it will be", return_tensors="pt").to(device)
output = model.generate(input, max_length=20)
print(tokenizer.decode(output[0]))
assert output.shape[-1] == 20, output.shape
'''


def _tokenizer(folder: Path) -> None:
    """A tiny byte-level BPE tokenizer, GPT-2's kind, saved as transformers does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    text = synthetic_text(3000) + ("If I take one more step, it will be\nStanford university is in the state of\n"
                                   "The capital of California is Sacramento. The capital of Italy is Rome.\n")
    tok.train_from_iterator(text.splitlines(), trainer=trainer)
    fast = GPT2TokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                             unk_token="<|endoftext|>")
    assert len(fast) <= VOCAB
    fast.save_pretrained(folder)


def prepare(tree: Path) -> None:
    import json

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("make_checkpoint.py", MAKE_CHECKPOINT), ("cuda_checkpoint.py", CUDA_CHECKPOINT),
                       ("nb2py.py", NOTEBOOK_TO_SCRIPT), ("readme_based.py", README_BASED),
                       ("readme_attn.py", README_ATTN), ("readme_mamba.py", README_MAMBA)):
        (root / name).write_text(text)
    hf = root / "hf"
    fake_hub_model(hf, "gpt2", _tokenizer)
    for repo, config in (("hazyresearch/based-360m", BASED), ("hazyresearch/attn-360m", ATTN),
                         ("hazyresearch/mamba-360m", MAMBA)):
        snapshot = fake_hub_model(hf, repo, lambda folder: None)
        (snapshot / "config.json").write_text(json.dumps(config, indent=2))
    # A local text dataset in wikitext's place (train / validation / test splits by file name).
    data = root / "wikitext"
    data.mkdir(exist_ok=True)
    for i, split in enumerate(("train", "validation", "test")):
        (data / f"{split}.txt").write_text(synthetic_text(6000 if split == "train" else 2000, seed=i))


def _snapshot(repo: str) -> str:
    return f"{G}/hf/hub/models--{repo.replace('/', '--')}/snapshots/{'0' * 40}"


CKPT = f"{{tree}}/{G}/checkpoints/based-tiny"
TRAIN = ("cd train && python run.py experiment=example/based-360m trainer.devices=1 "
         "trainer.val_check_interval=2 ++trainer.limit_val_batches=2 ++trainer.limit_test_batches=2 "
         f"datamodule.dataset_name={{tree}}/{G}/wikitext datamodule.dataset_config_name=null "
         "datamodule.tokenizer_name=gpt2 datamodule.max_length=128 datamodule.batch_size=2 "
         "datamodule.batch_size_eval=2 datamodule.num_workers=1 train.global_batch_size=2 "
         "model.config.n_embd=64 model.config.n_head=4 model.config.n_layer=3 "
         "'model.config.alt_mixer_layers=[1]' 'model.config.alt_mixer_2_layers=[2]' "
         "model.config.alt_mixer.num_heads=4 model.config.alt_mixer_2.window_size=32 "
         "model.config.alt_mixer_2.num_heads=4 "
         f"callbacks.model_checkpoint.dirpath={CKPT} callbacks.model_checkpoint.every_n_train_steps=2 "
         "logger.wandb.mode=disabled ")
PYTEST = "python -m pytest -q -p no:cacheprovider -rs"

STEPS = [
    Step("checkpoint-based", f"python {G}/make_checkpoint.py based {_snapshot('hazyresearch/based-360m')}",
         outputs=[f"{_snapshot('hazyresearch/based-360m')}/pytorch_model.bin"], env=ENV, timeout=240),
    # notebooks/03-24-quick-start.ipynb: load, inspect, next-token predictions, generate under autocast.
    Step("quick-start-notebook", f"python {G}/nb2py.py notebooks/03-24-quick-start.ipynb {G}/quick_start.py && "
                                 f"python {G}/quick_start.py", env=ENV, timeout=240),
    Step("readme-based", f"python {G}/readme_based.py", env=ENV, timeout=240),
    Step("checkpoint-attn", f"python {G}/make_checkpoint.py attn {_snapshot('hazyresearch/attn-360m')}",
         outputs=[f"{_snapshot('hazyresearch/attn-360m')}/pytorch_model.bin"], env=ENV, timeout=240),
    Step("readme-attn", f"python {G}/readme_attn.py", env=ENV, timeout=240),
    Step("checkpoint-mamba", f"python {G}/make_checkpoint.py mamba {_snapshot('hazyresearch/mamba-360m')}",
         outputs=[f"{_snapshot('hazyresearch/mamba-360m')}/pytorch_model.bin"], env=ENV, timeout=240),
    Step("readme-mamba", f"python {G}/readme_mamba.py", env=ENV, timeout=240),
    # based/tests/test_generation.py: the mha config (the only one enabled), every parametrization.
    Step("test-generation", f"{PYTEST} based/tests/test_generation.py", env=ENV, timeout=300),
    # train/README: `cd train/ && python run.py experiment=example/based-360m trainer.devices=8`, scaled down.
    Step("train", TRAIN + "trainer.max_steps=2", outputs=[f"{G}/checkpoints/based-tiny/last.ckpt"], env=ENV,
         timeout=300),
    # The example config sets resume: True: the same command picks up last.ckpt, here as written on CUDA.
    # PyTorch Lightning 1.8's resume loads the whole checkpoint (callbacks' states too) with torch.load's default,
    # weights_only since torch 2.6: torch's own switch restores the old default (not about CUDA).
    Step("resume", f"python {G}/cuda_checkpoint.py {CKPT}/last.ckpt && " + TRAIN + "trainer.max_steps=4",
         env={**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}, timeout=300),
]
