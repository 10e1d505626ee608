"""TP402 with timm 0.4.12's own mixup module (the version DeiT, MAE and ConvNeXt pin),
downloaded from PyPI here (nothing of timm is committed): its Mixup makes one-hot targets
on device='cuda', so a training step fails off CUDA; the port's does not."""

import os
import subprocess
import sys
import zipfile

import pytest

from porter_test_utils import run_porter

TRAIN = """import torch
from timm.data import Mixup

mixup_fn = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=10)
device = torch.device("cuda")
torch.manual_seed(0)
samples = torch.randn(4, 3, 32, 32).to(device, non_blocking=True)
targets = torch.randint(0, 10, (4,)).to(device, non_blocking=True)
samples, targets = mixup_fn(samples, targets)
print("targets", tuple(targets.shape), targets.device.type, round(float(targets.sum()), 4))
"""


@pytest.fixture(scope="module")
def old_timm(tmp_path_factory):
    """timm 0.4.12's timm/data/mixup.py, as a package `timm.data` exporting Mixup."""
    where = tmp_path_factory.mktemp("timm-wheel")
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "timm==0.4.12", "-d",
                          str(where)], capture_output=True, text=True, timeout=300)
    wheels = list(where.glob("timm-0.4.12-*.whl"))
    if got.returncode != 0 or not wheels:
        pytest.skip(f"timm 0.4.12 could not be downloaded here: {got.stderr.strip()[-200:]}")
    site = where / "site"
    (site / "timm" / "data").mkdir(parents=True)
    with zipfile.ZipFile(wheels[0]) as wheel:
        (site / "timm" / "data" / "mixup.py").write_bytes(wheel.read("timm/data/mixup.py"))
    (site / "timm" / "__init__.py").write_text("")
    (site / "timm" / "data" / "__init__.py").write_text("from .mixup import Mixup, FastCollateMixup\n")
    assert "device='cuda'" in (site / "timm" / "data" / "mixup.py").read_text()
    return site


def _run(repo, site, script="train.py"):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PORTER_QUIET": "1", "PYTHONPATH": str(site)}
    return subprocess.run([sys.executable, script], cwd=repo, capture_output=True, text=True, env=env, timeout=300)


def test_mixup_targets_follow_the_device_once_ported(tmp_path, old_timm):
    repo = tmp_path / "convnet"
    repo.mkdir()
    (repo / "README.md").write_text("# a classifier\n")
    (repo / "train.py").write_text(TRAIN)
    assert run_porter("migrate", repo, "--write", "-q").returncode in (0, 1)
    ported = (repo / "train.py").read_text()
    assert "mixup_fn = porter_runtime.timm_mixup(Mixup(mixup_alpha=0.8," in ported, ported
    ran = _run(repo, old_timm)
    assert ran.returncode == 0, ran.stderr[-1500:]
    assert ran.stdout.split()[:4] == ["targets", "(4,", "10)", "cpu"], ran.stdout  # 4 rows of 10 classes
    assert abs(float(ran.stdout.split()[-1]) - 4.0) < 1e-3  # each row a distribution
    # the same port without the wrapper: timm's default device is what fails
    (repo / "unwrapped.py").write_text(ported.replace("porter_runtime.timm_mixup(Mixup(", "(Mixup(", 1))
    failed = _run(repo, old_timm, "unwrapped.py")
    assert failed.returncode != 0 and "CUDA" in failed.stderr, failed.stderr[-800:]
    (repo / "unwrapped.py").unlink()
    again = run_porter("migrate", repo, "--diff", "-q")
    assert again.returncode == 0 and again.stdout == b""
