"""A 2-process Gloo job that ends the way research code does (collectives, barrier,
destroy_process_group, then the DDP model goes) exits, instead of deadlocking.

The script makes the race behind the paper_repro hang happen on every run: with a long
switch interval the main thread keeps the GIL, so the Gloo worker that finishes the
barrier is still waiting for the GIL (to free the all_reduce's tensor) when the DDP
model, whose Reducer owns the group's last reference, is freed. Launched with
``init_process_group`` from torch itself (argument ``torch``) the job hangs nearly
every time; with porter_runtime's (argument ``runtime``) the runtime holds the group,
which is destroyed at exit with the GIL released.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import sys
    import time

    import torch
    import torch.distributed as dist
    import torch.distributed.fsdp  # noqa: F401  torch._dynamo first, as train.py imports it
    from torch.nn.parallel import DistributedDataParallel as DDP

    import porter_runtime


    def main():
        if sys.argv[1] == "runtime":
            porter_runtime.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(2, 2))
        model(torch.ones(1, 2)).sum().backward()
        dist.barrier()
        loss = torch.ones(())
        sys.setswitchinterval(1000.0)  # from here on this thread lets go of the GIL only to block
        dist.all_reduce(loss, async_op=True)  # handles dropped at once: the Gloo worker frees
        dist.barrier(async_op=True)           # the barrier, and with it the all_reduce's tensor
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # both finish; the worker now waits for the GIL
            pass
        dist.destroy_process_group()
        # returning frees the model: its Reducer owns the group's last reference unless the
        # runtime holds one


    main()
    print("exited", flush=True)
''')


def launch(script, init: str, timeout: float = 180) -> tuple[int, str, str]:
    """Run the script under torchrun; on a hang, kill the launcher and both ranks."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(script), init]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # torchrun passes SIGTERM on to the ranks (they run in their own sessions)
        out, err = proc.communicate()
        pytest.fail(f"the job hung for {timeout} s:\n{out}\n{err[-3000:]}")
    return proc.returncode, out, err


@pytest.mark.slow
def test_ddp_job_on_gloo_exits_after_destroy_process_group(tmp_path):
    script = tmp_path / "train_end.py"
    script.write_text(SCRIPT)
    returncode, out, err = launch(script, "runtime")
    assert returncode == 0, err[-3000:]
    assert out.count("exited") == 2, out



LEFT_OPEN = textwrap.dedent('''
    import atexit
    import sys

    import torch
    import torch.distributed as dist

    import porter_runtime

    # registered first, so it runs last: after the runtime's own exit handler
    # one write per rank (print writes its arguments one by one; the ranks share the pipe)
    atexit.register(lambda: sys.stdout.write(f"initialized-at-exit-{dist.is_initialized()}\\n") and sys.stdout.flush())
    porter_runtime.init_process_group("nccl")  # as written for CUDA: never destroyed
    x = torch.ones(4)
    dist.all_reduce(x)
    sys.stdout.write(f"sum {int(x[0])}\\n")  # one write: the ranks share the pipe
    sys.stdout.flush()
''')


@pytest.mark.slow
def test_a_gloo_group_the_program_never_destroys_is_destroyed_at_exit(tmp_path):
    """llama's example scripts never call destroy_process_group (NCCL only warns); on Gloo
    the group was then left to C++ static destructors after the interpreter was gone, and
    the exit aborted ("terminate called without an active exception") in about a third of
    the runs under load. The runtime destroys the group it made at exit, while Python is
    still whole."""
    script = tmp_path / "left_open.py"
    script.write_text(LEFT_OPEN)
    for _ in range(3):
        returncode, out, err = launch(script, "unused")
        assert returncode == 0 and "terminate called" not in err, err[-3000:]
        assert out.count("initialized-at-exit-False") == 2, out


MADE_BY_A_LIBRARY = textwrap.dedent('''
    import atexit
    import sys

    import torch
    import torch.distributed as dist

    from porter_runtime import _gloo_teardown

    atexit.register(lambda: sys.stdout.write(f"initialized-at-exit-{dist.is_initialized()}\\n") and sys.stdout.flush())
    _gloo_teardown.release_gloo_at_exit()  # what TrainingArguments' hook asks for off CUDA
    dist.init_process_group("gloo")  # accelerate's PartialState, for Hugging Face's Trainer
    x = torch.ones(4)
    dist.all_reduce(x)
    sys.stdout.write(f"sum {int(x[0])}\\n")  # one write: the ranks share the pipe
    sys.stdout.flush()
''')


@pytest.mark.slow
def test_a_gloo_group_a_library_made_is_destroyed_at_exit_when_asked(tmp_path):
    """stanford_alpaca under Trainer: accelerate makes the Gloo group and nothing destroys
    it; TP708's hook (porter_runtime.training_arguments) asks the runtime to."""
    script = tmp_path / "made_by_a_library.py"
    script.write_text(MADE_BY_A_LIBRARY)
    returncode, out, err = launch(script, "unused")
    assert returncode == 0 and "terminate called" not in err, err[-3000:]
    assert out.count("sum 2") == 2 and out.count("initialized-at-exit-False") == 2, out
