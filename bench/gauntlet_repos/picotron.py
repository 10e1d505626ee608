"""picotron's README commands, tiny, with its own flags:

- ``config-dp2`` / ``train-dp2``: the README's GPU quick start, ``python create_config.py --out_dir tmp --exp_name ...
  --dp N --model_name M --num_hidden_layers L --grad_acc_steps G --mbs B --seq_len S --hf_token T`` then
  ``torchrun --nproc_per_node N train.py --config tmp/EXP/config.json``, with dp 2 (2 processes), 2 layers, 2
  micro-batches of 2 sequences of 32 tokens. The model is a tiny random Llama laid out in a Hugging Face cache
  (``gauntlet/tiny-llama`` under ``HF_HOME``, offline), and its safetensors sit in ``hf_model_safetensors/`` where
  ``picotron.utils.download_model``'s ``snapshot_download(local_dir=...)`` puts them (offline it returns that folder,
  as after a first download). create_config.py has no flag for the dataset, the number of steps or the checkpoint
  interval, so ``_gauntlet/edit_config.py`` sets those keys of the generated config.json as a user edits it
  (dataset.name: a local folder of synthetic text in TinyStories' one ``text`` column; total_train_steps 2;
  save_frequency 2); the device keys (distributed.backend "nccl", use_cpu false, environment.FLASH_ATTEN "1",
  model.use_fused_adam) stay as create_config.py writes them.
- ``as-cuda``: the dp-2 run's checkpoint (``tmp/EXP/2/weights_*.pth``) re-saved as a CUDA machine writes it
  (storages cuda:0).
- ``config-resume`` / ``resume``: the same command with checkpoint.load_path pointing at it (train.py's own resume:
  ``CheckpointManager.load_checkpoint``, a bare ``torch.load``), trained to step 4.
- ``config-tp2`` / ``train-tp2``: tensor parallel, ``--tp 2``.
- ``config-pp2`` / ``train-pp2``: the README's 3D command's pipeline engine, ``--pp 2 --pp_engine 1f1b``.
- ``config-cpu`` / ``train-cpu``: an extra step, the README's CPU command (``--use_cpu``: backend gloo, FLASH_ATTEN 0)
  with dp 2: what the repository's own CPU switch does.

``--standalone`` keeps torchrun's rendezvous off the fixed port 29500 (other jobs share the machine).
``pip install -e .`` is replaced by ``PYTHONPATH={tree}``.
"""

import json
from pathlib import Path

from _recipe import Step, fake_hub_model, synthetic_text

G = "_gauntlet"
MODEL = "gauntlet/tiny-llama"

ENV = {
    "PYTHONPATH": "{tree}",
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
}

EDIT_CONFIG = '''"""gauntlet: set keys of a picotron config.json that create_config.py has no flag for (as a user edits it)."""
import json
import sys

path = sys.argv[1]
config = json.load(open(path))
for item in sys.argv[2:]:
    key, value = item.split("=", 1)
    section, name = key.split(".")
    config[section][name] = json.loads(value)
json.dump(config, open(path, "w"), indent=4)
print("edited", path, sys.argv[2:])
'''

AS_CUDA = '''"""gauntlet: re-save picotron checkpoints as a CUDA machine writes them (every storage tagged cuda:0)."""
import sys
from pathlib import Path

import torch
from torch import serialization

original = serialization.location_tag


def cuda_tag(storage):
    tag = original(storage)
    return "cuda:0" if tag == "cpu" else tag


files = sorted(Path(sys.argv[1]).glob("*.pth"))
assert files, f"no checkpoint under {sys.argv[1]}"
for path in files:
    obj = torch.load(path, map_location="cpu", weights_only=False)
    serialization.location_tag = cuda_tag
    try:
        torch.save(obj, path)
    finally:
        serialization.location_tag = original
    print("re-saved as on CUDA:", path)
'''


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w.strip(".").lower() for w in synthetic_text(words=600).split()})
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for word in words:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def prepare(tree: Path) -> None:
    import torch
    import transformers

    tree = Path(tree)
    g = tree / G
    g.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    assert len(tokenizer) <= 64
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, eos_token_id=2, rope_theta=10000.0)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)

    def save(folder):
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)

    fake_hub_model(g / "hf", MODEL, save)
    # where download_model's snapshot_download(local_dir="hf_model_safetensors") leaves a model it has fetched
    model.save_pretrained(tree / "hf_model_safetensors", safe_serialization=True)

    data = g / "tinystories"  # TinyStories' layout: one "text" column, a train split
    data.mkdir(parents=True, exist_ok=True)
    rows = [{"text": synthetic_text(words=120, seed=i).replace("\n", " ")} for i in range(48)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (g / "edit_config.py").write_text(EDIT_CONFIG)
    (g / "as_cuda.py").write_text(AS_CUDA)


def _config(exp: str, flags: str, *, steps: int = 2, load: str = "") -> str:
    create = (f"python create_config.py --out_dir {G}/tmp --exp_name {exp} {flags} --model_name {MODEL} "
              "--num_hidden_layers 2 --grad_acc_steps 2 --mbs 2 --seq_len 32 --hf_token hf_gauntlet_offline")
    edits = [f"dataset.name='\"{G}/tinystories\"'", f"training.total_train_steps={steps}",
             "checkpoint.save_frequency=2"]
    if load:
        edits.append(f"checkpoint.load_path='\"{load}\"'")
    return f"{create} && python {G}/edit_config.py {G}/tmp/{exp}/config.json {' '.join(edits)}"


def _train(exp: str) -> str:
    return f"torchrun --standalone --nproc_per_node 2 train.py --config {G}/tmp/{exp}/config.json"


def _ckpt(exp: str, step: int) -> str:
    return f"{G}/tmp/{exp}/{step}/weights_tp_rank_world_size=*.pth"


STEPS = [
    Step("config-dp2", _config("tiny-dp2", "--dp 2"), outputs=[f"{G}/tmp/tiny-dp2/config.json"], env=ENV,
         timeout=180),
    Step("train-dp2", _train("tiny-dp2"), outputs=[_ckpt("tiny-dp2", 2)], env=ENV, timeout=400),
    Step("as-cuda", f"python {G}/as_cuda.py {G}/tmp/tiny-dp2/2", env=ENV, timeout=120),
    Step("config-resume", _config("tiny-resume", "--dp 2", steps=4, load=f"{G}/tmp/tiny-dp2/2"),
         outputs=[f"{G}/tmp/tiny-resume/config.json"], env=ENV, timeout=180),
    Step("resume", _train("tiny-resume"), outputs=[_ckpt("tiny-resume", 4)], env=ENV, timeout=400),
    Step("config-tp2", _config("tiny-tp2", "--tp 2"), outputs=[f"{G}/tmp/tiny-tp2/config.json"], env=ENV,
         timeout=180),
    Step("train-tp2", _train("tiny-tp2"), outputs=[_ckpt("tiny-tp2", 2)], env=ENV, timeout=400),
    Step("config-pp2", _config("tiny-pp2", "--pp 2 --pp_engine 1f1b"), outputs=[f"{G}/tmp/tiny-pp2/config.json"],
         env=ENV, timeout=180),
    Step("train-pp2", _train("tiny-pp2"), outputs=[_ckpt("tiny-pp2", 2)], env=ENV, timeout=400),
    Step("config-cpu", _config("tiny-cpu", "--dp 2 --use_cpu"), outputs=[f"{G}/tmp/tiny-cpu/config.json"], env=ENV,
         timeout=180),
    Step("train-cpu", _train("tiny-cpu"), outputs=[_ckpt("tiny-cpu", 2)], env=ENV, timeout=400),
]
