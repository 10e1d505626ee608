"""EasyContext's own commands (train_scripts/*.sh and the README's evaluation), on a tiny random Llama, with 2
processes through the repository's accelerate configs (DeepSpeed ZeRO-3 offload):

- ``train-dp``: ``accelerate launch --config_file accelerate_configs/single_node.yaml train.py ... --parallel_mode
  data_parallel`` (the first stages of EasyContext-1M-Llama-2-7B.sh), 2 optimizer steps at sequence length 64.
- ``train-zigzag``: the same with ``--parallel_mode zigzag_ring_attn`` (the later stages of the script): each rank
  holds two zigzag chunks of the sequence, attention runs through ring-flash-attention's
  zigzag_ring_flash_attn_func, monkey-patched into transformers' LlamaFlashAttention2.
- ``eval-ppl``: the README's perplexity command (``accelerate launch --config_file
  accelerate_configs/deepspeed_inference.yaml ... eval_ppl.py --tokenized ... --truncate --aggressive-memory -m
  MODEL``: zigzag ring attention, ZeRO-3 inference), 2 documents at 64 tokens.

The scripts' sizes are scaled by their own flags (--seq-length, --max-train-steps, --batch-size,
--gradient-accumulate-every, --min/max-tokens, --tokens-step, --samples); the configs are the repository's, the
process count is accelerate launch's --num_processes (the README's way). Data are synthetic: a tokenized dataset
saved to disk (train.py's load_dataset falls back to load_from_disk) and a tokenized eval set with
input_ids / attention_mask / tokenized_len, as --save-tokenized writes it. The model is a tiny random Llama
(2 layers, hidden 32, 4 heads) with a SentencePiece tokenizer, its weights written as on a GPU box
(pytorch_model.bin, storages tagged cuda:0).

Not CUDA, worked around the same on the original and the port (a sitecustomize under _gauntlet/site):
ring-flash-attn's PyPI releases (0.1.0 is the one of the commit's week; requirements.txt installs the GitHub HEAD)
import ``ring_flash_attn.adapters.hf_adapter`` from the package's __init__, which imports
transformers.modeling_flash_attention_utils (transformers >= 4.44); requirements.txt pins transformers 4.39.1, whose
LlamaFlashAttention2._flash_attention_forward the monkey patches replace. The shim gives ``ring_flash_attn.adapters``
as an empty module (the HF adapter is not used by EasyContext), as the spring-2024 ring-flash-attention the
requirements were written against had none. The DeepSpeed C++ ops the CPU run JIT-builds (cpu_adam for the
offloaded AdamW, the shm comm op) are built once in prepare() into a shared TORCH_EXTENSIONS_DIR.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _recipe import Step, cuda_tags, synthetic_text, tiny_llama

G = "_gauntlet"
MODEL = f"{G}/Llama-2-7b-hf"
EXTENSIONS = os.path.expanduser("~/.cache/porter-gauntlet/torch_extensions-easycontext")
SEQ = 64

ENV = {
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "PYTHONPATH": "{tree}/_gauntlet/site",
    "TORCH_EXTENSIONS_DIR": EXTENSIONS,
}

SITECUSTOMIZE = '''\
"""Gauntlet (not a CUDA matter): ring-flash-attn's PyPI releases import ring_flash_attn.adapters.hf_adapter from the
package __init__, which needs transformers >= 4.44 (transformers.modeling_flash_attention_utils); EasyContext pins
transformers 4.39.1. ring_flash_attn.adapters is given as a module whose two functions raise when called (EasyContext
never calls them). Then the next sitecustomize on sys.path runs (the harness's own, if any)."""
import importlib.util
import os
import sys
import types


def _adapter_absent(*args, **kwargs):
    raise NotImplementedError("ring_flash_attn.adapters needs transformers >= 4.44 (gauntlet shim)")


_adapters = types.ModuleType("ring_flash_attn.adapters")
_adapters.substitute_hf_flash_attn = _adapter_absent
_adapters.update_ring_flash_attn_params = _adapter_absent
sys.modules.setdefault("ring_flash_attn.adapters", _adapters)

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in list(sys.path):
    if not _entry or os.path.abspath(_entry) == _here:
        continue
    _next = os.path.join(_entry, "sitecustomize.py")
    if os.path.isfile(_next):
        _spec = importlib.util.spec_from_file_location("_gauntlet_next_sitecustomize", _next)
        _module = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_module)
        break
'''

BUILD_OPS = '''\
"""Gauntlet: JIT-build the DeepSpeed C++ ops a CPU run loads (cpu_adam for the offloaded optimizer, the shm
all-reduce op) once, into TORCH_EXTENSIONS_DIR, so that no step spends its timeout compiling. Best effort."""
from deepspeed.accelerator import get_accelerator

accelerator = get_accelerator()
print("deepspeed accelerator:", accelerator._name)
for name in ("CPUAdamBuilder", "ShareMemCommBuilder"):
    try:
        builder = accelerator.create_op_builder(name)
        if builder is not None:
            builder.load()
            print("built", name)
    except Exception as error:  # an accelerator without the op: the step builds what it needs
        print("not built", name, type(error).__name__, error)
'''


def prepare(tree: Path) -> None:
    import random

    import datasets
    import torch
    import transformers

    tree = Path(tree)
    root = tree / G
    (root / "site").mkdir(parents=True, exist_ok=True)
    (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)

    # a tiny random Llama with a SentencePiece tokenizer; weights as a GPU box writes pytorch_model.bin
    text = synthetic_text(words=6000)
    tokenizer, config = tiny_llama(tree / MODEL, text)
    config.max_position_embeddings = 4 * SEQ
    model = transformers.LlamaForCausalLM(config)
    with cuda_tags():
        model.save_pretrained(tree / MODEL, safe_serialization=False)

    ids = tokenizer(text.replace("\n", " "), add_special_tokens=False)["input_ids"]
    r = random.Random(0)

    def chunk(n):
        start = r.randrange(0, len(ids) - n)
        return ids[start:start + n]

    # training set: pre-tokenized rows longer than --seq-length + 1 (as the slimpajama chunks are)
    train = datasets.Dataset.from_dict({"input_ids": [chunk(2 * SEQ) for _ in range(8)]})
    train.save_to_disk(str(root / "train_data"))
    # eval set: the columns eval_ppl.py's --save-tokenized writes (input_ids, attention_mask, tokenized_len)
    docs = [chunk(3 * SEQ) for _ in range(2)]
    evaluation = datasets.Dataset.from_dict({"input_ids": docs, "attention_mask": [[1] * len(d) for d in docs],
                                             "tokenized_len": [len(d) for d in docs]})
    evaluation.save_to_disk(str(root / "eval_data"))

    # deepspeed_inference.yaml's ZeRO config fixes train_batch_size at 8 (= 8 processes x micro-batch 1, the README's
    # --num_processes 8); DeepSpeed asserts it equals micro x accumulation x world size, so the 2-process run reads a
    # copy of the repository's yaml and json with train_batch_size 2 (nothing else changed)
    import json

    import yaml

    launch = yaml.safe_load((tree / "accelerate_configs" / "deepspeed_inference.yaml").read_text())
    ds_file = launch["deepspeed_config"]["deepspeed_config_file"].strip()
    ds = json.loads((tree / ds_file).read_text())
    ds["train_batch_size"] = ds.get("train_micro_batch_size_per_gpu", 1) * 2
    (root / "zero3_offload_inference.json").write_text(json.dumps(ds, indent=2))
    launch["deepspeed_config"]["deepspeed_config_file"] = f"{G}/zero3_offload_inference.json"
    launch["num_processes"] = 2
    (root / "deepspeed_inference.yaml").write_text(yaml.safe_dump(launch, sort_keys=False))

    (root / "build_ops.py").write_text(BUILD_OPS)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=EXTENSIONS, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(root / "build_ops.py")], cwd=tree, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=840, check=False)
    print(proc.stdout[-3000:])
    del torch


def accelerate(config: str, script: str, args: str) -> str:
    # the README / train_scripts launch, with 2 processes and a random port (other recipes may run beside this one)
    return (f"accelerate launch --config_file {config} --num_processes 2"
            f" --main_process_port $((20000 + RANDOM % 20000)) {script} {args}")


def train(mode: str, out: str) -> str:
    return accelerate("accelerate_configs/single_node.yaml", "train.py",
                      f"--batch-size 1 --gradient-accumulate-every 1 --output-dir {out} --seed 2024"
                      f" --max-train-steps 2 --learning-rate 2e-5 --dataset {G}/train_data --model {MODEL}"
                      f" --seq-length {SEQ} --rope-theta 1000000 --parallel_mode {mode}")


STEPS = [
    Step("train-dp", train("data_parallel", f"{G}/out-dp"),
         outputs=[f"{G}/out-dp/config.json", f"{G}/out-dp/model*.safetensors"], timeout=600, env=ENV),
    Step("train-zigzag", train("zigzag_ring_attn", f"{G}/out-zigzag"),
         outputs=[f"{G}/out-zigzag/config.json", f"{G}/out-zigzag/model*.safetensors"], timeout=600, env=ENV),
    Step("eval-ppl", accelerate(f"{G}/deepspeed_inference.yaml", "eval_ppl.py",
                                f"--tokenized {G}/eval_data --samples 2 --output-file {G}/ppl.csv"
                                f" --min-tokens {SEQ} --max-tokens {SEQ} --tokens-step {SEQ} --truncate"
                                f" --aggressive-memory -m {MODEL}"),
         outputs=[f"{G}/ppl.csv"], timeout=600, env=ENV),
]
