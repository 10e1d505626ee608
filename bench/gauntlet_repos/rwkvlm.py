"""RWKV-LM's RWKV-7 MiniPile recipe (RWKV-v7/train_temp), tiny: a synthetic binidx in place of MiniPile, the
README's two scripts' train.py commands (demo-training-prepare.sh: --train_stage 1 writes rwkv-init.pth;
demo-training-run.sh: --train_stage 3 trains from it) scaled down by their own flags, a resume from an rwkv-N.pth
written as on a CUDA machine, and a 2-device run (--devices 2, Lightning's own launcher).

Every train.py flag is the scripts' own; only sizes change: 2 layers, 64 wide (head_size 64 kept: the kernels
assert it), ctx_len 16, vocab 256, and --my_exit_tokens so that the trainer's own cosine-schedule exit saves
rwkv-final.pth after 2 steps (it exits when the tokens seen reach my_exit_tokens). --wandb "" as in the prepare
script (the run script's "Test" logs in to wandb)."""

import shlex
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

HERE = Path(__file__).resolve().parent

DATA = "_gauntlet/data/minipile"
TOKENS = 1000          # one document; ctx_len 16 -> 62 slots; magic_prime 59 (prime, 3n+2, 59/62 in (0.9, 1])
SIZES = "--n_layer 2 --n_embd 64 --ctx_len 16 --vocab_size 256 --head_size 64 --magic_prime 59"

# demo-training-prepare.sh, as written but for sizes and data
INIT = (f'python train.py --wandb "" --proj_dir _gauntlet/out --data_file "{DATA}" --data_type "binidx" '
        f"--my_testing x070 --train_stage 1 --epoch_count 1 --epoch_begin 0 --epoch_save 1 --weight_decay 0 "
        f"--num_nodes 1 --micro_bsz 1 --my_exit_tokens {TOKENS} {SIZES} "
        "--lr_init 1e-5 --lr_final 1e-5 --warmup_steps 10 --beta1 0.9 --beta2 0.99 --adam_eps 1e-8 "
        "--accelerator cpu --devices 1 --precision bf16 --strategy deepspeed_stage_2 --grad_cp 1")


def _run(proj_dir: str, exit_tokens: int, micro_bsz: int = 2, devices: int = 1, extra: str = "") -> str:
    """demo-training-run.sh's train.py command, as written but for sizes, data, wandb and the exit point."""
    return (f'python train.py --load_model "0" --wandb "" --proj_dir {proj_dir} --my_testing x070 '
            f'--train_stage 3 --epoch_count 999999 --epoch_begin 0 --data_file "{DATA}" '
            f"--my_exit_tokens {exit_tokens} --num_nodes 1 --micro_bsz {micro_bsz} {SIZES} --kernel @rwkv3 "
            "--lr_init 6e-4 --lr_final 6e-5 --warmup_steps 1 --beta1 0.9 --beta2 0.99 --adam_eps 1e-18 "
            '--data_type "binidx" --weight_decay 0.001 --epoch_save 10 --head_chunk 0 '
            f"--accelerator gpu --devices {devices} --precision bf16 --strategy deepspeed_stage_2 --grad_cp 1 "
            f"--enable_progress_bar True {extra}").strip()


def _write_binidx(prefix: Path, tokens) -> None:
    """MiniPile's format (src/binidx.py's MMapIndexedDataset: 'MMIDIDX' index, uint16 tokens), one document."""
    import struct

    import numpy as np

    prefix.parent.mkdir(parents=True, exist_ok=True)
    array = np.asarray(tokens, dtype=np.uint16)
    prefix.with_suffix(".bin").write_bytes(array.tobytes(order="C"))
    with open(prefix.with_suffix(".idx"), "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))                   # code 8 = np.uint16
        f.write(struct.pack("<Q", 1))                   # one item
        f.write(struct.pack("<Q", 2))                   # doc_idx [0, 1]
        f.write(np.array([array.size], dtype=np.int32).tobytes())
        f.write(np.array([0], dtype=np.int64).tobytes())
        f.write(np.array([0, 1], dtype=np.int64).tobytes())


def cuda_resume(init: str, target: str) -> None:
    """``target`` as a run stopped on a GPU box leaves it: rwkv-init.pth and an rwkv-0.pth whose storages are
    tagged cuda:0 (train.py's stage 3 loads the last rwkv-N.pth it finds in --proj_dir). The weights are the
    tree's own init (the state dict's layout is the tree's), saved as bf16 as a bf16 run saves them."""
    import shutil

    import torch

    Path(target).mkdir(parents=True, exist_ok=True)
    shutil.copy(init, Path(target) / "rwkv-init.pth")
    state = torch.load(init, map_location="cpu")
    save_cuda_checkpoint({k: v.bfloat16() for k, v in state.items()}, Path(target) / "rwkv-0.pth")


def prepare(tree: Path) -> None:
    from _recipe import synthetic_text

    data = synthetic_text(words=400).encode("utf-8")
    tokens = [b for b in data][:TOKENS]
    assert len(tokens) == TOKENS
    _write_binidx(tree / DATA, tokens)


_CALL = "python -c " + shlex.quote(f"import sys; sys.path.insert(0, {str(HERE)!r}); import rwkvlm; "
                                   "rwkvlm.cuda_resume('_gauntlet/out/rwkv-init.pth', '_gauntlet/out-resume')")

STEPS = [
    Step("init", INIT, outputs=["_gauntlet/out/rwkv-init.pth"], timeout=240),
    # 32 tokens a step (micro_bsz 2 x ctx_len 16), warmup 1 step: the exit fires at step 2
    Step("train", _run("_gauntlet/out", 64), outputs=["_gauntlet/out/rwkv-final.pth", "_gauntlet/out/train_log.txt"],
         timeout=300),
    # resumed at epoch_begin 1 (= 20160 steps of 2 already seen): the exit fires 2 steps later
    Step("resume-cuda-checkpoint", f"{_CALL} && " + _run("_gauntlet/out-resume", (20160 + 2) * 32),
         outputs=["_gauntlet/out-resume/rwkv-final.pth"], timeout=300),
    # 2 devices x micro_bsz 1; the exit path saves and leaves on rank 0 only, so this run ends by Lightning's
    # --max_steps (a Trainer flag train.py adds), which saves rwkv-0.pth at the epoch's end
    Step("two-devices", "mkdir -p _gauntlet/out-ddp && cp _gauntlet/out/rwkv-init.pth _gauntlet/out-ddp/ && "
         + _run("_gauntlet/out-ddp", 1498226207, micro_bsz=1, devices=2, extra="--max_steps 2"),
         outputs=["_gauntlet/out-ddp/rwkv-0.pth"], timeout=300),
]
