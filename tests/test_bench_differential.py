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
