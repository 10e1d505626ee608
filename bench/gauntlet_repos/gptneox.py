"""GPT-NeoX's README commands, tiny: tools/datasets/preprocess_data.py on a synthetic jsonl (the repository's
CharLevelTokenizer, so no vocabulary file is needed), then `python ./deepy.py train.py` on configs/19M.yml (the
smallest config without flash attention) + configs/local_setup.yml + a recipe config that scales it down by the
repository's own config keys, a resume from that checkpoint written as on a CUDA machine, `python ./deepy.py
generate.py` with configs/text_generation.yml (unconditional samples from the checkpoint), and a 2-process run
(num_gpus 2, model_parallel_size 2) through the same DeepSpeed launcher.

Every config key is the repository's own; precision (19M.yml's fp16), ZeRO stage, the distributed backend
("nccl"), activation checkpointing and the pipeline engine (pipe_parallel_size 1) are kept as 19M.yml has them.
"""

import json
import shlex
from pathlib import Path

from _recipe import Step

HERE = Path(__file__).resolve().parent

G = "_gauntlet"
DATA = f"{G}/data/synth"

# configs/19M.yml scaled down by its own keys; data, tokenizer, checkpoints inside the tree
TINY = {
    "num_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "seq_length": 32,
    "max_position_embeddings": 32,
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "num_workers": 0,
    "train_iters": 4,
    "lr_decay_iters": 4,
    "checkpoint_factor": 2,
    "eval_interval": 2,
    "eval_iters": 0,  # no evaluation: PyPI DeepSpeed's PipelineEngine.eval_batch returns a bare loss, NeoX (DeeperSpeed) unpacks two values
    "log_interval": 1,
    "steps_per_print": 1,
    "data_path": f"{DATA}_text_document",
    "tokenizer_type": "CharLevelTokenizer",
    "vocab_file": None,
    "merge_file": None,
    "save": f"{G}/checkpoints",
    "load": f"{G}/checkpoints",
    "tensorboard_dir": None,
    "log_dir": f"{G}/logs",
    "use_wandb": False,
}
#: the keys that go in the scaled 19M.yml; the rest in the scaled local_setup.yml
MODEL_KEYS = {"num_layers", "hidden_size", "num_attention_heads", "seq_length", "max_position_embeddings",
              "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "num_workers", "train_iters",
              "lr_decay_iters", "checkpoint_factor", "eval_interval", "eval_iters", "log_interval", "steps_per_print"}

CONFIGS = f"{G}/19M.yml {G}/local_setup.yml"


def _write(path: Path, obj: dict) -> None:
    import yaml

    path.parent.mkdir(parents=True, exist_ok=True)
    # PyYAML's own dump: json.dumps writes 1e-08, which PyYAML (NeoX's reader) reads back as a string
    path.write_text(yaml.safe_dump(obj, sort_keys=False))


def _scaled(tree: Path, config: str, changes: dict) -> dict:
    """The repository's config ``config`` with ``changes`` (NeoX refuses a key given twice across files, so a
    scaled-down config is the original's with its own keys changed, not an override file)."""
    import yaml

    loaded = yaml.safe_load((tree / config).read_text())
    out = {key.replace("-", "_"): value for key, value in loaded.items()}
    out.update(changes)
    if isinstance(out.get("fp16"), dict):
        # the configs' `"fp16": {"fp16": true, ...}` is DeeperSpeed's spelling; PyPI DeepSpeed's pydantic config
        # refuses the inner key (extra_forbidden). "enabled" (kept) is the switch both read. Not CUDA.
        out["fp16"] = {k: v for k, v in out["fp16"].items() if k != "fp16"}
    return out


def prepare(tree: Path) -> None:
    from _recipe import synthetic_text

    g = tree / G
    (g / "data").mkdir(parents=True, exist_ok=True)
    text = synthetic_text(words=3000).splitlines()
    with open(g / "data" / "synth.jsonl", "w") as f:
        for i in range(0, len(text), 5):
            f.write(json.dumps({"text": "\n".join(text[i:i + 5])}) + "\n")
    model = {k: v for k, v in TINY.items() if k in MODEL_KEYS}
    setup = {k: v for k, v in TINY.items() if k not in MODEL_KEYS}
    _write(g / "19M.yml", _scaled(tree, "configs/19M.yml", model))
    _write(g / "local_setup.yml", _scaled(tree, "configs/local_setup.yml", setup))
    # the resume: two more iterations from the (CUDA-written) global_step4; lr_decay_iters kept (the scheduler
    # state in the checkpoint must match the config: warmup iterations are warmup x lr_decay_iters)
    _write(g / "resume" / "19M.yml", _scaled(tree, "configs/19M.yml", {**model, "train_iters": 6}))
    # configs/text_generation.yml, fewer and shorter samples, the output inside the tree
    _write(g / "text_generation.yml", _scaled(tree, "configs/text_generation.yml", {
        "num_samples": 2, "maximum_tokens": 8, "sample_output_file": f"{G}/samples.txt"}))
    # two processes, tensor (model) parallel over them, in a checkpoint folder of its own
    _write(g / "two" / "19M.yml", _scaled(tree, "configs/19M.yml", {
        **model, "model_parallel_size": 2, "train_iters": 2, "lr_decay_iters": 2}))
    _write(g / "two" / "local_setup.yml", _scaled(tree, "configs/local_setup.yml", {
        **setup, "num_gpus": 2, "save": f"{G}/checkpoints-mp2", "load": f"{G}/checkpoints-mp2"}))


def cuda_checkpoint(folder: str) -> None:
    """Every .pt under ``folder`` rewritten as a CUDA machine writes it (storages tagged cuda:0), as if the
    train step's checkpoint had been written on a GPU box."""
    import torch

    from _recipe import save_cuda_checkpoint

    found = sorted(Path(folder).rglob("*.pt"))
    assert found, f"no checkpoint under {folder}"
    for path in found:
        save_cuda_checkpoint(torch.load(path, map_location="cpu", weights_only=False), path)


_RETAG = "python -c " + shlex.quote(f"import sys; sys.path.insert(0, {str(HERE)!r}); import gptneox; "
                                    f"gptneox.cuda_checkpoint('{G}/checkpoints')")

STEPS = [
    Step("preprocess", f"python tools/datasets/preprocess_data.py --input {G}/data/synth.jsonl "
         f"--output-prefix {DATA} --tokenizer-type CharLevelTokenizer --dataset-impl mmap --append-eod --workers 1",
         outputs=[f"{DATA}_text_document.bin", f"{DATA}_text_document.idx"], timeout=300),
    Step("train", f"python ./deepy.py train.py {CONFIGS}",
         outputs=[f"{G}/checkpoints/global_step4/mp_rank_00_model_states.pt"], timeout=900),
    Step("resume-cuda-checkpoint", f"{_RETAG} && python ./deepy.py train.py {G}/resume/19M.yml {G}/local_setup.yml",
         outputs=[f"{G}/checkpoints/global_step6/mp_rank_00_model_states.pt"], timeout=900),
    Step("generate", f"python ./deepy.py generate.py {CONFIGS} {G}/text_generation.yml",
         outputs=[f"{G}/samples.txt"], timeout=600),
    Step("two-processes", f"python ./deepy.py train.py {G}/two/19M.yml {G}/two/local_setup.yml",
         outputs=[f"{G}/checkpoints-mp2/global_step2/mp_rank_01_model_states.pt"], timeout=900),
]
