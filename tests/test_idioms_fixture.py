"""End to end on fixtures/repos/imagenet_ddp, the issue-9 idioms in one classic trainer.

Unported on this CPU machine the trainer "succeeds" having started no process, and the
evaluation script stops. Ported with no manual edit, it trains, writes its checkpoint,
resumes from a checkpoint written on a GPU (storages tagged cuda:0, keys `module.`),
and evaluates that checkpoint with an unwrapped model.
"""

import json
import os
import socket
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.serialization

from porter_test_utils import FIXTURES, python_without_porter, run_porter, snapshot

REPO = FIXTURES / "repos" / "imagenet_ddp"
SPEC = json.loads((REPO / "porter_fixture.json").read_text())
TRAIN, RESUME, EVALUATE = SPEC["entry_points"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(entry: dict, repo: Path, out: Path) -> subprocess.CompletedProcess:
    port = str(free_port())
    args = [c.replace("{out}", str(out)).replace("{port}", port) for c in entry["cmd"]]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(python_without_porter(*args[1:]), cwd=repo, env=env, capture_output=True,
                          text=True, timeout=600)


def save_as_if_on_gpu(obj, path: Path) -> None:
    """torch.save with every storage tagged cuda:0, as a GPU run would write it."""
    original = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        torch.save(obj, path)
    finally:
        torch.serialization.location_tag = original


def expected(entry: dict, out: Path) -> list[Path]:
    return [Path(e.replace("{out}", str(out))) for e in entry["expects"]]


@pytest.mark.slow
def test_unported_trainer_does_nothing_and_evaluation_stops(copy_tree, tmp_path):
    original = copy_tree(REPO, "original")
    out = tmp_path / "out"
    out.mkdir()
    proc = run(TRAIN, original, out)
    assert proc.returncode == 0, proc.stderr[-2000:]  # mp.spawn(nprocs=0) starts nothing
    assert not any(p.exists() for p in expected(TRAIN, out)), "it trained nothing"
    assert "Use GPU" not in proc.stdout

    model = torch.nn.Linear(2, 2)
    state = {"epoch": 1, "state_dict": torch.nn.DataParallel(model).state_dict()}
    save_as_if_on_gpu(state, out / "gpu_checkpoint.pth.tar")
    with pytest.raises(RuntimeError, match="Attempting to deserialize object on a CUDA device"):
        torch.load(out / "gpu_checkpoint.pth.tar")
    proc = run(EVALUATE, original, out)
    assert proc.returncode == 1 and "evaluation needs a GPU" in proc.stderr


def port(repo: Path, report: Path) -> dict:
    proc = run_porter("migrate", repo, "--write", "--report", report)
    assert proc.returncode == 0, proc.stderr.decode()
    return json.loads(report.read_text())


@pytest.mark.slow
def test_ported_trainer_trains_resumes_from_a_gpu_checkpoint_and_evaluates(copy_tree, tmp_path):
    ported = copy_tree(REPO, "ported")
    report = port(ported, tmp_path / "port.json")
    codes = Counter({rule["code"]: rule["rewrites"] for rule in report["rules"]})
    assert sum(rule["findings"] for rule in report["rules"]) == 0, report["rules"]
    for code in ("PT104", "PT901", "PT902", "PT903", "PT905", "PT601", "PT302"):
        assert codes[code], f"{code} rewrote nothing: {codes}"

    out = tmp_path / "out"
    out.mkdir()
    proc = run(TRAIN, ported, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for path in expected(TRAIN, out):
        assert path.exists(), path
    trained = torch.load(out / "checkpoint.pth.tar", weights_only=False)
    assert trained["epoch"] == 1
    assert all(k.startswith("module.") for k in trained["state_dict"])  # DDP, as on the GPU box

    save_as_if_on_gpu(trained, out / "gpu_checkpoint.pth.tar")
    (out / "checkpoint.pth.tar").unlink()
    proc = run(RESUME, ported, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loaded checkpoint" in proc.stdout and "(epoch 1)" in proc.stdout
    resumed = torch.load(out / "checkpoint.pth.tar", weights_only=False)
    assert resumed["epoch"] == 2

    proc = run(EVALUATE, ported, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "required CUDA (evaluation needs a GPU)" in proc.stderr
    assert "'module.'" in proc.stderr  # the one warning of the prefixed load
    result = json.loads((out / "eval.json").read_text())
    assert result["epoch"] == 1 and 0 <= result["acc1"] <= 100

    snap = snapshot(ported)
    assert run_porter("migrate", ported, "--write").returncode == 0
    assert snapshot(ported) == snap, "a second migration must change nothing"
    check = run_porter("migrate", ported, "--check")
    assert check.returncode == 0, check.stderr.decode()
