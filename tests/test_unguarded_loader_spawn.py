"""PT403 on a script in PyTorch-GAN's style (loader and training loop at module level):
unported, a DataLoader with workers fails where workers start with spawn (macOS's
default; here set with ``multiprocessing.set_start_method("spawn")`` before the script
runs); after one ``--write`` it loads the same batches there in the main process, and
keeps its workers where they fork (Linux's default)."""

import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest

from porter_test_utils import run_porter

SCRIPT = dedent("""\
    import argparse

    import torch
    from torch.utils.data import DataLoader, Dataset

    parser = argparse.ArgumentParser()
    parser.add_argument("--n_cpu", type=int, default=2, help="number of cpu threads to use during batch generation")
    opt = parser.parse_args()


    class Squares(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.tensor([float(i * i)])


    dataloader = DataLoader(Squares(), batch_size=4, shuffle=False, num_workers=opt.n_cpu)
    for i, batch in enumerate(dataloader):
        print(i, batch.flatten().tolist())
    """)


#: runs gan.py as the main script, as `python gan.py` does, after choosing the start method
LAUNCH = ("import multiprocessing, runpy, sys; multiprocessing.set_start_method(sys.argv[1]); "
          "sys.argv = ['gan.py']; runpy.run_path('gan.py', run_name='__main__')")


def _run(repo: Path, method: str):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    env.pop("PORTER_EMULATE", None)
    return subprocess.run([sys.executable, "-c", LAUNCH, method], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_an_unguarded_loader_runs_where_workers_spawn_once_ported(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "gan.py").write_text(SCRIPT)
    expected = ["0 [0.0, 1.0, 4.0, 9.0]", "1 [16.0, 25.0, 36.0, 49.0]"]
    forked = _run(repo, "fork")
    assert forked.returncode == 0, forked.stderr[-2000:]
    assert forked.stdout.splitlines() == expected
    spawned = _run(repo, "spawn")
    assert spawned.returncode != 0 and "bootstrapping phase" in spawned.stderr
    proc = run_porter("migrate", repo, "--write")
    assert proc.returncode in (0, 1), proc.stderr.decode()
    assert "num_workers=porter_runtime.unguarded_workers(opt.n_cpu))" in (repo / "gan.py").read_text()
    spawned = _run(repo, "spawn")
    assert spawned.returncode == 0, spawned.stderr[-3000:]
    assert spawned.stdout.splitlines() == expected
    assert "loads in the main process" in spawned.stderr
    forked = _run(repo, "fork")  # Linux: the workers, as before
    assert forked.returncode == 0 and forked.stdout.splitlines() == expected
    assert "loads in the main process" not in forked.stderr
    check = run_porter("migrate", repo, "--check", "--fail-on", "changes")
    assert check.returncode == 0, check.stdout.decode()[-2000:]
