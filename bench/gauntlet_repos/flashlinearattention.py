"""flash-linear-attention (fla) as its README runs it: the "Token Mixing" snippet (MultiScaleRetention on
bfloat16 tensors), the GLAConfig + AutoModelForCausalLM.from_config snippet (plus a loss and a backward, as
any training does), the "Hybrid Models" SambaConfig snippet (one Mamba layer, one sliding-window attention
layer); benchmarks/benchmark_training_throughput.py (the README's training-speed script: GLA from fla's
default config, sized down by its own --num_heads/--head_dim/--num_hidden_layers/--seq_len/--steps flags,
bf16 through accelerate, fused AdamW); benchmarks/benchmark_generation.py (the README's Generation section)
and evals/ppl.py (the repository's perplexity evaluation) on a tiny random GLA laid out in an offline
Hugging Face cache as `fla-hub/gla-1.3B-100B` (config.json + pytorch_model.bin written as on a GPU box, a
tiny byte-level BPE tokenizer) and a tiny local text dataset in pg19's layout (one `text` column) passed by
the scripts' own --data flag; and two of the test suite's reference-vs-kernel tests (fused RMSNorm against
Llama's, GLA model forward/backward with fixed and variable lengths).

The tree runs from the tree (PYTHONPATH=.), as the README's benchmark commands do ("python -m
benchmarks...."). Nothing sets a device: the scripts hard-code "cuda" (benchmark_generation,
benchmark_training_throughput) or take fla.utils.device (evals/ppl.py, the tests), which fla sets to
"cuda" even where Triton finds no GPU backend.
"""

from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
ENV = {"PYTHONPATH": ".", "HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": "{tree}/_gauntlet/hf/datasets",
       "TOKENIZERS_PARALLELISM": "false", "WANDB_DISABLED": "true"}
HUB_MODEL = "fla-hub/gla-1.3B-100B"
VOCAB = 512

# fla-hub/gla-1.3B-100B's architecture (GLAConfig defaults), sizes shrunk: hidden 64, 4 heads, 2 layers.
GLA = {"model_type": "gla", "architectures": ["GLAForCausalLM"], "hidden_size": 64, "num_heads": 4,
       "num_hidden_layers": 2, "expand_k": 0.5, "expand_v": 1, "hidden_ratio": 4, "attn_mode": "chunk",
       "use_short_conv": False, "use_output_gate": True, "use_gk": True, "use_gv": False, "fuse_norm": True,
       "fuse_swiglu": True, "fuse_cross_entropy": True, "vocab_size": VOCAB, "bos_token_id": 1, "eos_token_id": 2,
       "tie_word_embeddings": False, "max_position_embeddings": 2048, "norm_eps": 1e-6, "initializer_range": 0.02,
       "torch_dtype": "bfloat16"}

USAGE_TOKEN_MIXING = '''\
# README "Token Mixing": a MultiScaleRetention layer on bfloat16 tensors (README sizes shrunk; the
# README's device line left out, the snippet runs where the tensors are).
import torch
from fla.layers import MultiScaleRetention
batch_size, num_heads, seq_len, hidden_size = 2, 4, 64, 64
dtype = torch.bfloat16
retnet = MultiScaleRetention(hidden_size=hidden_size, num_heads=num_heads).to(dtype=dtype)
x = torch.randn(batch_size, seq_len, hidden_size).to(dtype=dtype).requires_grad_(True)
y, *_ = retnet(x)
assert y.shape == torch.Size([batch_size, seq_len, hidden_size]), y.shape
y.float().square().mean().backward()
assert x.grad is not None
print("MultiScaleRetention ok", y.float().abs().mean().item())
'''

USAGE_GLA = '''\
# README: "initialize a GLA model from the default configs in fla" (sizes shrunk), then a loss and a backward.
import torch
from fla.models import GLAConfig
from transformers import AutoModelForCausalLM
torch.manual_seed(0)
config = GLAConfig(hidden_size=64, num_heads=4, num_hidden_layers=2, vocab_size=512)
model = AutoModelForCausalLM.from_config(config)
print(model)
input_ids = torch.randint(0, config.vocab_size, (2, 64))
out = model(input_ids, labels=input_ids)
print("loss", out.loss.item())
assert torch.isfinite(out.loss)
out.loss.backward()
assert model.model.embeddings.weight.grad is not None
print("GLA ok")
'''

USAGE_SAMBA = '''\
# README "Hybrid Models": a 2-layer Samba (a Mamba layer, then a local attention layer, window 2048), sizes
# shrunk (hidden 64, 4 heads), then a forward with a loss and a backward.
import torch
from fla.models import SambaConfig
from transformers import AutoModelForCausalLM
torch.manual_seed(0)
config = SambaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, vocab_size=512, state_size=16)
config.attn = {
  'layers': [1],
  'num_heads': 4,
  'num_kv_heads': 4,
  'qkv_bias': False,
  'rope_theta': 10000.,
  'window_size': 2048
}
model = AutoModelForCausalLM.from_config(config)
print(model)
input_ids = torch.randint(0, config.vocab_size, (2, 32))
out = model(input_ids, labels=input_ids)
print("loss", out.loss.item())
out.loss.backward()
print("Samba ok")
'''


def _gla_state_dict(seed: int = 0) -> dict:
    """GLAForCausalLM's state dict for GLA above, by hand: prepare() runs before fla can be imported
    (fla imports Triton at its top)."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    d, heads = GLA["hidden_size"], GLA["num_heads"]
    key_dim, value_dim = int(d * GLA["expand_k"]), int(d * GLA["expand_v"])
    head_v_dim = value_dim // heads
    low_rank = 16  # GatedLinearAttention's gate_low_rank_dim default
    inter = int(d * GLA["hidden_ratio"] * 2 / 3)
    inter = 256 * ((inter + 255) // 256)  # GatedMLP's rounding
    sd = {"model.embeddings.weight": rand(VOCAB, d)}
    for i in range(GLA["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sd[p + "attn_norm.weight"] = torch.ones(d)
        sd[p + "attn.q_proj.weight"] = rand(key_dim, d)
        sd[p + "attn.k_proj.weight"] = rand(key_dim, d)
        sd[p + "attn.v_proj.weight"] = rand(value_dim, d)
        sd[p + "attn.g_proj.weight"] = rand(value_dim, d)
        sd[p + "attn.gk_proj.0.weight"] = rand(low_rank, d)
        sd[p + "attn.gk_proj.1.weight"] = rand(key_dim, low_rank)
        sd[p + "attn.gk_proj.1.bias"] = torch.zeros(key_dim)
        sd[p + "attn.o_proj.weight"] = rand(d, value_dim)
        sd[p + "attn.g_norm_swish_gate.weight"] = torch.ones(head_v_dim)
        sd[p + "mlp_norm.weight"] = torch.ones(d)
        sd[p + "mlp.gate_proj.weight"] = rand(inter, d)
        sd[p + "mlp.up_proj.weight"] = rand(inter, d)
        sd[p + "mlp.down_proj.weight"] = rand(d, inter)
    sd["model.norm.weight"] = torch.ones(d)
    sd["lm_head.weight"] = rand(VOCAB, d)
    return {k: v.to(torch.bfloat16) for k, v in sd.items()}


def _tokenizer(folder: Path) -> None:
    """A tiny byte-level BPE tokenizer with Llama's special tokens (<unk>=0, <s>=1, </s>=2), saved as
    transformers does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(synthetic_text(3000).splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    assert len(fast) <= VOCAB
    fast.save_pretrained(folder)


def prepare(tree: Path) -> None:
    import json

    root = Path(tree) / G
    root.mkdir(parents=True, exist_ok=True)

    def save(folder):
        (folder / "config.json").write_text(json.dumps(GLA, indent=2))
        save_cuda_checkpoint(_gla_state_dict(), folder / "pytorch_model.bin")
        _tokenizer(folder)

    fake_hub_model(root / "hf", HUB_MODEL, save)
    # pg19's layout: one long book per row in a `text` column.
    data = root / "pg19"
    data.mkdir(exist_ok=True)
    with (data / "train.jsonl").open("w") as out:
        for i in range(4):
            out.write(json.dumps({"text": synthetic_text(600, seed=i).replace("\n", " ")}) + "\n")
    (root / "usage_token_mixing.py").write_text(USAGE_TOKEN_MIXING)
    (root / "usage_gla.py").write_text(USAGE_GLA)
    (root / "usage_samba.py").write_text(USAGE_SAMBA)


PYTEST = "python -m pytest -x -q -p no:cacheprovider"

STEPS = [
    Step("usage-token-mixing", f"python {G}/usage_token_mixing.py", env=ENV, timeout=240),
    Step("usage-gla-config", f"python {G}/usage_gla.py", env=ENV, timeout=240),
    Step("usage-hybrid-samba", f"python {G}/usage_samba.py", env=ENV, timeout=240),
    # README: the training-throughput benchmark (GLA), shrunk by its own flags.
    Step("train-throughput", "python -m benchmarks.benchmark_training_throughput --name gla --batch_size 2"
                             " --seq_len 64 --num_heads 2 --head_dim 32 --num_hidden_layers 2 --warmup_steps 1"
                             " --steps 2", env=ENV, timeout=300),
    # README "Generation": benchmark_generation.py with the README's repetition penalty (its README line also
    # passes --prompt, which the script does not define), a local pg19-like dataset, short lengths.
    Step("generate", f"python -m benchmarks.benchmark_generation --path '{HUB_MODEL}' --data {G}/pg19"
                     " --repetition_penalty 2. --length 16 --maxlen 8 --output-generation", env=ENV, timeout=300),
    # evals/ppl.py: perplexity over the local dataset, block and bucket sizes shrunk by its own flags.
    Step("eval-ppl", f"python -m evals.ppl --path '{HUB_MODEL}' --data {G}/pg19 --block_size 64 --bucket_size 32",
         env=ENV, timeout=300),
    # The test suite: fused RMSNorm against transformers' LlamaRMSNorm, and the GLA model's forward/backward
    # (fixed vs variable length) -- one parametrization each, at the tests' own sizes.
    Step("test-rmsnorm-gla",
         f"{PYTEST} 'tests/modules/test_layernorm.py::test_rmsnorm[64-512-2-2]'"
         " 'tests/models/test_modeling_gla.py::test_modeling[L4-B4-T1024-H4-D64-l2False-bsNone-torch.bfloat16]'",
         env=ENV, timeout=300),
]
