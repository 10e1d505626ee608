"""End to end on fixtures/repos/device_flow: CUDA values that cross modules (issues 26, 27).

Unported, its trainer and sampler stop on this CPU machine. Ported with one
``--write`` and no edit, both run and write their outputs: the `gpu_ids` option reaches
`net.to(gpu_ids[0])` in another module (CUT), the sampler's int device reaches the
repository's own `sample_loop(device=...)` (DiT), `ema.cuda()` still calls the class's
own `cuda`, and the `GradScaler` that `train.py` imports from `utils` is still there.
"""

import os
import subprocess
from pathlib import Path

import pytest

from porter_test_utils import FIXTURES, python_without_porter, run_porter

REPO = FIXTURES / "repos" / "device_flow"
ENTRY_POINTS = (["train.py", "--out", "{out}"], ["sample.py", "--out", "{out}"])


def run(repo: Path, args: list[str], out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PORTER_QUIET": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(python_without_porter(*(a.replace("{out}", str(out)) for a in args)), cwd=repo, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_unported_entry_points_stop_on_cpu(copy_tree, tmp_path):
    repo = copy_tree(REPO, "original")
    for args in ENTRY_POINTS:
        proc = run(repo, args, tmp_path / "out")
        assert proc.returncode != 0, proc.stdout
        assert "cuda" in proc.stderr.lower() or "GPU" in proc.stderr


@pytest.mark.slow
def test_ported_once_everything_runs_on_cpu(copy_tree, tmp_path):
    repo = copy_tree(REPO, "port")
    proc = run_porter("migrate", repo, "--write")
    assert proc.returncode in (0, 1), proc.stderr.decode()
    networks = (repo / "models" / "networks.py").read_text()
    assert "net.to(porter_runtime.device(gpu_ids[0]))" in networks
    assert "device=porter_runtime.device(device))" in (repo / "sample.py").read_text()
    train = (repo / "train.py").read_text()
    assert "ema.cuda(opt.gpu_ids[0])" in train  # ModelEMA's own cuda(), not a .to() it lacks
    assert "from torch.cuda.amp import GradScaler" in (repo / "utils" / "__init__.py").read_text()
    assert "ModelEMA" in proc.stderr.decode() and "PT001" in proc.stderr.decode()
    out = tmp_path / "out"
    for args in ENTRY_POINTS:
        done = run(repo, args, out)
        assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "latest_net.pth").exists() and (out / "samples_0.pt").exists()
    check = run_porter("migrate", repo, "--check", "--fail-on", "changes")
    assert check.returncode == 0, check.stdout.decode()[-2000:]


def test_the_diff_is_the_same_for_any_jobs(copy_tree):
    repo = copy_tree(REPO)
    one = run_porter("migrate", repo, "--diff", "-j", "1")
    two = run_porter("migrate", repo, "--diff", "-j", "2")
    assert one.stdout == two.stdout and b"porter_runtime.device(gpu_ids[0])" in one.stdout
