"""PT801's table: every op is MISSING in torch 2.13 and every name exists in torch.

The coverage table itself has one home, porter_runtime/tools/mps_coverage.py (the runtime's
MPS emulation reads it, and it ships without porter); it is generated from the
reference by bench/mps_coverage_table.py and checked against it here.
"""

import importlib.util
from pathlib import Path

import pytest
import torch

from porter.rules.mps_ops import ALWAYS_CPU, MISSING_2_13
from porter_runtime.tools import mps_coverage as _mps_coverage

#: ../shared/ sits beside the checkout (on developers' machines and in CI).
COVERAGE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "mps_ops_coverage.txt"


def _resolve(name: str):
    obj = torch
    for part in name.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def test_every_op_is_missing_in_2_13():
    for op in MISSING_2_13:
        assert _mps_coverage.missing(op, (2, 13)) == "M", op


@pytest.mark.skipif(not COVERAGE.exists(), reason="the coverage reference is not on this machine")
def test_the_runtime_table_is_the_reference():
    spec = importlib.util.spec_from_file_location("mps_coverage_table",
                                                  Path(__file__).resolve().parents[1] / "bench" / "mps_coverage_table.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert Path(_mps_coverage.__file__).read_text() == generator.render(COVERAGE.read_text())


@pytest.mark.parametrize("table", [MISSING_2_13, ALWAYS_CPU])
def test_every_public_name_exists(table):
    for entry in table.values():
        for name in entry.names:
            assert callable(_resolve(name)), name
        for method in entry.methods:
            assert hasattr(torch.Tensor, method), method
