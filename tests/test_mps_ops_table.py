"""PT801's table: every op is MISSING in torch 2.13 and every name exists in torch."""

from pathlib import Path

import pytest
import torch

from porter.rules.mps_ops import ALWAYS_CPU, MISSING_2_13

#: ../shared/ sits beside the checkout (on developers' machines and in CI).
COVERAGE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "mps_ops_coverage.txt"


def _resolve(name: str):
    obj = torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


@pytest.mark.skipif(not COVERAGE.exists(), reason="the coverage reference is not on this machine")
def test_every_op_is_missing_in_2_13():
    rows = [line.split() for line in COVERAGE.read_text().splitlines() if line and not line.startswith("#")]
    last = {row[0]: row[-1] for row in rows}
    for op in MISSING_2_13:
        assert last.get(op) == "MISSING", op


@pytest.mark.parametrize("table", [MISSING_2_13, ALWAYS_CPU])
def test_every_public_name_exists(table):
    for entry in table.values():
        for name in entry.names:
            assert callable(_resolve(name)), name
        for method in entry.methods:
            assert hasattr(torch.Tensor, method), method
