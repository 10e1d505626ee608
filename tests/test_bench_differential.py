"""bench/differential.py's comparison of what two runs wrote."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import torch

_SPEC = importlib.util.spec_from_file_location(
    "differential", Path(__file__).resolve().parent.parent / "bench" / "differential.py")
differential = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(differential)  # type: ignore[union-attr]


def _write(root: Path, loss: float, weight: torch.Tensor, seconds: float) -> None:
    root.mkdir()
    (root / "history.json").write_text(json.dumps(
        [{"epoch": 1, "train_loss": loss, "epoch_time": seconds,
          "checkpoint": str(root / "best.pt")}]))
    torch.save({"model": {"w": weight}, "step": 3}, root / "best.pt")


def test_identical_runs_are_bitwise_whatever_the_timings_and_folders(tmp_path):
    w = torch.randn(3, 3)
    _write(tmp_path / "a", 2.5, w, 1.0)
    _write(tmp_path / "b", 2.5, w.clone(), 7.0)
    rows = differential.compare_outputs(tmp_path / "a", tmp_path / "b")
    assert [name for name, _ in rows] == ["best.pt", "history.json"]
    assert all(diff == 0.0 for _, diff in rows)


def test_differences_are_measured(tmp_path):
    w = torch.ones(2)
    _write(tmp_path / "a", 2.5, w, 1.0)
    _write(tmp_path / "b", 2.5 * (1 + 1e-3), w + 1e-5, 1.0)
    rows = dict(differential.compare_outputs(tmp_path / "a", tmp_path / "b"))
    assert math.isclose(rows["history.json"], 1e-3 / (1 + 1e-3), rel_tol=1e-6)
    assert 0 < rows["best.pt"] < 1e-4
    (tmp_path / "b" / "extra.txt").write_text("x")
    rows = dict(differential.compare_outputs(tmp_path / "a", tmp_path / "b"))
    assert rows["extra.txt (written by one side only)"] == math.inf


def test_shape_or_dtype_changes_are_incomparable():
    assert differential._difference(torch.ones(2), torch.ones(3)) == math.inf
    assert differential._difference(torch.ones(2), torch.ones(2, dtype=torch.float64)) == math.inf
    assert differential._difference(torch.ones(2, dtype=torch.long),
                                    torch.zeros(2, dtype=torch.long)) == math.inf


def test_a_torch_archive_is_compared_by_its_tensors_whatever_its_name(tmp_path):
    """`checkpoint.pth.tar` (torchvision's ImageNet example) is a torch.save zip whose
    bytes differ run to run; found on an H100, where identical runs read as differing."""
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        torch.save({"state_dict": {"w": torch.ones(2)}, "epoch": 1}, tmp_path / side / "checkpoint.pth.tar")
    assert dict(differential.compare_outputs(tmp_path / "a", tmp_path / "b")) == {"checkpoint.pth.tar": 0.0}
    torch.save({"state_dict": {"w": torch.ones(2) * 2}, "epoch": 1}, tmp_path / "b" / "checkpoint.pth.tar")
    assert dict(differential.compare_outputs(tmp_path / "a", tmp_path / "b"))["checkpoint.pth.tar"] == 0.5


def test_a_seconds_field_is_a_timing():
    leaves = {"[0]/seconds": 0.25, "[0]/loss": 1.0}
    assert differential._comparable(leaves, Path("/nowhere")) == {"[0]/loss": 1.0}
