"""Megatron-LM's pretrain_gpt.py (the README's GPT pretraining script, launched with torchrun as
examples/gpt3/train_gpt3_175b_distributed.sh does), scaled down by its own flags: a 2-layer GPT of hidden size 64,
4 heads, sequence length 64, batches of 4, on the repository's own synthetic data (--mock-data, MockGPTDataset)
with its NullTokenizer (--vocab-size 512), and the flags its own no-TransformerEngine functional test
(tests/functional_tests/test_cases/gpt/gpt3_mcore_tp2_pp2_resume_torch_dist_uninstall_te) uses:
--transformer-impl local, --no-persist-layer-norm, --no-masked-softmax-fusion, --no-gradient-accumulation-fusion.
fp32 (no --fp16/--bf16), the default torch_dist checkpoint format, no --distributed-backend (the default, nccl).

The dataset index builder is the repository's C++ helper, compiled at start-up by initialize.py with make and
pybind11 (in the requirements). Its Makefile names the library after `python3-config --extension-suffix`, which on
this machine is a pyenv shim for Python 3.12 (a .cpython-312 library the 3.11 venv cannot import): prepare() runs the
same make with the venv's own suffix (LIBEXT), after which the start-up make has nothing to do for it. Not CUDA.

HEAD requires Python >= 3.12 (pyproject) and this machine's interpreter is 3.11: megatron/training/models/gpt.py
and hybrid.py, imported by training.py on every command's path, do ``from typing import override`` (new in 3.12).
The recipe puts a ``sitecustomize`` on PYTHONPATH that adds a ``typing.override`` (the decorator marks and returns
its function, as 3.12's does) when it is missing; the same on the original and the port, not a CUDA matter.

Steps: train 2 iterations with a checkpoint at 2 (1 process); resume from it to iteration 4; a 2-process run with
--tensor-model-parallel-size 2 (2 iterations, checkpoint at 2)."""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
SHIM = G + "/py311"
ENV = {"PYTHONPATH": "{tree}/" + SHIM, "CUDA_DEVICE_MAX_CONNECTIONS": "1", "OMP_NUM_THREADS": "1"}
TINY = ("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 --max-position-embeddings 64 "
        "--micro-batch-size 2 --global-batch-size 4 --lr 1.0e-4 --min-lr 1.0e-5 --lr-decay-style cosine --lr-decay-iters 8 --use-checkpoint-opt_param-scheduler "
        "--weight-decay 0.1 --clip-grad 1.0 --init-method-std 0.02 "
        "--transformer-impl local --no-persist-layer-norm --no-masked-softmax-fusion "
        "--no-gradient-accumulation-fusion "
        "--mock-data --tokenizer-type NullTokenizer --vocab-size 512 --split 949,50,1 --num-workers 0 "
        f"--data-cache-path {G}/data-cache "
        "--log-interval 1 --eval-interval 2 --eval-iters 1 --save-interval 2")


def prepare(tree: Path) -> None:
    import subprocess
    import sysconfig

    (tree / G / "data-cache").mkdir(parents=True, exist_ok=True)
    subprocess.run(["make", "-C", str(tree / "megatron" / "core" / "datasets"),
                    "LIBEXT=" + sysconfig.get_config_var("EXT_SUFFIX")], check=True)
    shim = tree / SHIM / "sitecustomize.py"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(
        "# gauntlet: Megatron-LM HEAD needs Python >= 3.12; typing.override is new in 3.12\n"
        "import typing\n"
        "if not hasattr(typing, 'override'):\n"
        "    def override(method):\n"
        "        try:\n"
        "            method.__override__ = True\n"
        "        except (AttributeError, TypeError):\n"
        "            pass\n"
        "        return method\n"
        "    typing.override = override\n")


def _run(procs: int, folder: str, iters: int, extra: str = "") -> str:
    return (f"torchrun --standalone --nproc_per_node {procs} pretrain_gpt.py {TINY} --train-iters {iters} "
            f"--save {G}/{folder} --load {G}/{folder} {extra}")


STEPS = [
    Step("train", _run(1, "ckpt", 2), outputs=[f"{G}/ckpt/latest_checkpointed_iteration.txt",
                                               f"{G}/ckpt/iter_0000002/.metadata"], env=ENV, timeout=300),
    Step("resume", _run(1, "ckpt", 4), outputs=[f"{G}/ckpt/iter_0000004/.metadata"], env=ENV, timeout=300),
    Step("tp2", _run(2, "ckpt-tp2", 2, "--tensor-model-parallel-size 2"),
         outputs=[f"{G}/ckpt-tp2/iter_0000002/.metadata"], env=ENV, timeout=300),
]
