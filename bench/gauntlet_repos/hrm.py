"""HRM's Sudoku recipe, tiny: the repo's own dataset builder on a synthetic Sudoku CSV laid out
in an offline Hugging Face cache, 2 epochs of pretrain.py (Hydra overrides: a 32-wide model,
batch 4; torch.compile as the repo defaults), evaluate.py (map_location="cuda" in its code) on
the checkpoint it wrote and on a copy of it as a GPU run writes it (storages tagged cuda:0,
compiled ``_orig_mod.`` keys), and a 2-process torchrun run (nccl, all_gather_into_tensor in the
sparse-embedding optimizer). wandb runs disabled (WANDB_MODE)."""

import shlex
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

HERE = Path(__file__).resolve().parent

DATA = "_gauntlet/data/sudoku"
HF_ENV = {"HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1"}
RUN_ENV = {"WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "1"}
TINY = (f"data_path={DATA} epochs=2 eval_interval=1 global_batch_size=4 lr_warmup_steps=1 "
        "arch.hidden_size=32 arch.num_heads=2 arch.H_layers=1 arch.L_layers=1 arch.H_cycles=1 "
        "arch.L_cycles=1 arch.halt_max_steps=2 +project_name=gauntlet +run_name=tiny")


def _sudoku_rows(count: int, seed: int) -> list[list[str]]:
    """Rows of the sapientinc/sudoku-extreme CSV (source, question, answer, rating): a valid
    solved grid, relabelled and shuffled per row, with about half its cells blanked."""
    import random

    r = random.Random(seed)
    base = [[(3 * (i % 3) + i // 3 + j) % 9 + 1 for j in range(9)] for i in range(9)]
    rows = []
    for n in range(count):
        digits = list(range(1, 10))
        r.shuffle(digits)
        grid = [[digits[v - 1] for v in row] for row in base]
        answer = "".join(str(v) for row in grid for v in row)
        question = "".join(c if r.random() < 0.5 else "." for c in answer)
        rows.append([f"synthetic{n}", question, answer, str(r.randint(0, 20))])
    return rows


def _fake_hub_dataset(home: Path, repo_id: str, files: dict) -> None:
    """A dataset repo in a Hugging Face cache under ``home``, as hf_hub_download leaves it."""
    cache = home / "hub" / ("datasets--" + repo_id.replace("/", "--"))
    revision = "0" * 40
    snapshot = cache / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (snapshot / name).write_text(text)
    (cache / "refs").mkdir(exist_ok=True)
    (cache / "refs" / "main").write_text(revision)


def cuda_copy(source: str, target: str, step: str = "step_4") -> None:
    """``source/step`` as a compiled model on a GPU saves it (``_orig_mod.`` keys, storages tagged
    cuda:0), with the run's all_config.yaml beside it, under ``target``. A step runs this after
    training, since the state dict's layout is the tree's own."""
    import shutil

    import torch

    state = torch.load(Path(source) / step, map_location="cpu")
    state = {k if k.startswith("_orig_mod.") else "_orig_mod." + k: v for k, v in state.items()}
    save_cuda_checkpoint(state, Path(target) / step)
    shutil.copy(Path(source) / "all_config.yaml", Path(target) / "all_config.yaml")


def prepare(tree: Path) -> None:
    import csv
    import io

    files = {}
    for split, count, seed in (("train", 8, 0), ("test", 4, 1)):
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["source", "question", "answer", "rating"])
        writer.writerows(_sudoku_rows(count, seed))
        files[f"{split}.csv"] = out.getvalue()
    _fake_hub_dataset(tree / "_gauntlet" / "hf", "sapientinc/sudoku-extreme", files)


STEPS = [
    Step("data", f"python dataset/build_sudoku_dataset.py --output-dir {DATA} --subsample-size 8 --num-aug 1",
         outputs=[f"{DATA}/train/dataset.json", f"{DATA}/test/all__inputs.npy"], env=HF_ENV, timeout=120),
    Step("train", f"python pretrain.py {TINY} +checkpoint_path=_gauntlet/ckpt",
         outputs=["_gauntlet/ckpt/step_*", "_gauntlet/ckpt/all_config.yaml"], env=RUN_ENV, timeout=240),
    Step("evaluate", "python evaluate.py checkpoint=_gauntlet/ckpt/step_4",
         outputs=["_gauntlet/ckpt/step_4_all_preds.0"], env=RUN_ENV, timeout=180),
    Step("evaluate-cuda-checkpoint",
         "python -c " + shlex.quote(f"import sys; sys.path.insert(0, {str(HERE)!r}); import hrm; "
                                    "hrm.cuda_copy('_gauntlet/ckpt', '_gauntlet/ckpt-cuda')")
         + " && python evaluate.py checkpoint=_gauntlet/ckpt-cuda/step_4",
         outputs=["_gauntlet/ckpt-cuda/step_4_all_preds.0"], env=RUN_ENV, timeout=180),
    Step("ddp", f"python -m torch.distributed.run --standalone --nproc_per_node 2 pretrain.py {TINY} +checkpoint_path=_gauntlet/ckpt-ddp",
         outputs=["_gauntlet/ckpt-ddp/step_*"], env=RUN_ENV, timeout=300),
]
