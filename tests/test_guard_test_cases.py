"""PT202 in test code (detectron2, blind round 9): a test that adds its CUDA case where CUDA
is (`["cpu"] + (["cuda"] if torch.cuda.is_available() else [])`, a CUDA-vs-CPU comparison
under `if torch.cuda.is_available():`) is right as written on a Mac: the CPU cases run, the
CUDA one is skipped as the test intends. It is a note there; the same guard in library code,
whose guarded code a user's run needs, stays a finding. A guard whose code only releases
CUDA memory is a note everywhere (ChatGLM-6B's `torch_gc`)."""
from __future__ import annotations

import subprocess
import sys
from textwrap import dedent

import pytest

from porter.engine.process import Options, migrate_source
from porter.engine.registry import all_rules
from porter.rulebase.conditions.test_gates import is_test_path

OPTIONS = Options(rules=list(all_rules()))

ROTATED = dedent("""\
    import torch


    def test_iou_precision():
        for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
            boxes = torch.tensor([[565, 565, 10, 10.0, 0]], device=device)
            assert boxes.sum() > 0


    def test_roi_align_matches_cuda():
        output = torch.ones(2)
        if torch.cuda.is_available():
            output_cuda = output.cuda().cpu()
            assert torch.allclose(output, output_cuda)
    """)


def _pt202(path: str) -> list[tuple[int, str]]:
    result = migrate_source(ROTATED.encode(), OPTIONS, path=path)
    return [(f.line, f.severity) for f in result.findings if f.code == "PT202"]


@pytest.mark.parametrize("path", ["tests/structures/test_rotated_boxes.py", "test_rotated_boxes.py",
                                  "rotated_test.py", "tests/conftest.py"])
def test_a_tests_cuda_case_is_a_note(path):
    assert is_test_path(path)
    assert _pt202(path) == [(5, "info"), (12, "info")]


@pytest.mark.parametrize("path", ["detectron2/structures/rotated_boxes.py", "testing.py", "contest/boxes.py"])
def test_the_same_guard_in_library_code_stays_a_finding(path):
    assert not is_test_path(path)
    assert [severity for _, severity in _pt202(path)] == ["", ""]  # needs a human (no note severity)


def test_the_ported_test_runs_its_cpu_cases(tmp_path):
    new = migrate_source(ROTATED.encode(), OPTIONS, path="tests/test_rotated.py").new
    assert new == ROTATED.encode()  # nothing to rewrite: the CPU cases already run off CUDA
    script = tmp_path / "test_rotated.py"
    script.write_bytes(new + b"\n\ntest_iou_precision()\ntest_roi_align_matches_cuda()\nprint('ok')\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
