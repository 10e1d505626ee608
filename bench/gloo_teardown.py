"""Does a ported 2-process Gloo job end cleanly under load, every time? (issue 29)

    python bench/gloo_teardown.py [--runs 20] [--hogs N] [--keep DIR]

A GPT-style trainer written for CUDA the way nanoGPT is (a module-level DDP model, NCCL,
``destroy_process_group()`` at the end, a checkpoint saved by rank 0), and the same
trainer without ``destroy_process_group()`` (NCCL code often leaves the group to the
exit), are ported with ``porter migrate --write`` and launched, in turn, ``--runs`` times with ``torchrun
--nproc_per_node=2`` on the CPU while ``--hogs`` busy processes (default: twice the
cores) compete for the CPUs. A run passes when both ranks exit 0, the checkpoint is
written, nothing prints "terminate called" (the SIGABRT that a Gloo group destroyed
after the interpreter has gone gives) and the job ends within 180 s (a Gloo destructor
that joins its workers while holding the GIL hangs instead). Prints each run's result and the count; exits 1
on any failure.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAINER = '''\
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

ddp_rank = int(os.environ["RANK"])
ddp_local_rank = int(os.environ["LOCAL_RANK"])
device = f"cuda:{ddp_local_rank}"
init_process_group(backend="nccl")
torch.cuda.set_device(device)
torch.manual_seed(1337 + ddp_rank)


class Block(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.ln = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return x + self.proj(F.gelu(self.fc(self.ln(x))))


class GPT(nn.Module):
    def __init__(self, vocab=64, n_embd=32, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, n_embd)
        self.blocks = nn.Sequential(*[Block(n_embd) for _ in range(n_layer)])
        self.head = nn.Linear(n_embd, vocab)

    def forward(self, idx, targets):
        logits = self.head(self.blocks(self.wte(idx)))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


model = GPT().to(device)
model = DDP(model, device_ids=[ddp_local_rank])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(int(os.environ.get("STEPS", "4"))):
    x = torch.randint(0, 64, (4, 16), device=device)
    loss = model(x, torch.roll(x, 1, 1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
if ddp_rank == 0:
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()},
               os.path.join(os.environ["OUT_DIR"], "ckpt.pt"))
destroy_process_group()
'''


def _hog(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def port(dest: Path) -> Path:
    repo = dest / "repo"
    repo.mkdir(parents=True)
    (repo / "train.py").write_text(TRAINER)
    # The same trainer as code written for NCCL often is: the group left to the exit.
    (repo / "train_leave.py").write_text(TRAINER.replace("destroy_process_group()\n", "")
                                         .replace("from torch.distributed import destroy_process_group, ",
                                                  "from torch.distributed import "))
    subprocess.run([sys.executable, "-m", "porter", "migrate", str(repo), "--root", str(repo), "--write", "-q",
                    "--no-progress"], check=True)
    return repo


def run_once(repo: Path, out: Path, script: str = "train.py", timeout: float = 180) -> tuple[bool, str]:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    env = {**os.environ, "OUT_DIR": str(out), "OMP_NUM_THREADS": "1", "PORTER_QUIET": "1"}
    try:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                               "--standalone", script],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as hung:
        tail = hung.stderr or b""
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        return False, f"hung past {timeout:.0f} s: " + tail[-600:]
    text = proc.stdout + proc.stderr
    ok = proc.returncode == 0 and (out / "ckpt.pt").exists() and "terminate called" not in text
    return ok, "" if ok else f"rc={proc.returncode}: " + text[-600:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--hogs", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--keep", type=Path, help="port into this folder (kept) instead of a scratch one")
    args = parser.parse_args(argv)
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="porter-gloo-"))
    repo = port(scratch)
    stop = multiprocessing.Event()
    hogs = [multiprocessing.Process(target=_hog, args=(stop,), daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    failures = 0
    try:
        for number in range(1, args.runs + 1):
            start = time.perf_counter()
            script = "train.py" if number % 2 else "train_leave.py"
            ok, why = run_once(repo, scratch / "out", script)
            failures += not ok
            print(f"run {number:3d} {script:<15} {'ok' if ok else 'FAILED'} ({time.perf_counter() - start:.1f} s) {why}",
                  flush=True)
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"{args.runs - failures} of {args.runs} runs ended cleanly under {args.hogs} CPU hogs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
