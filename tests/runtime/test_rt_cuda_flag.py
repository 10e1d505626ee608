"""PT909 on a simulated machine: the library's `cuda=` switch gets, after the port, the
value it got before on CUDA (True) and False (the CPU) elsewhere.

The code is the rule's own example, migrated by porter; `torch_fidelity` is a stand-in
module that records the switch it is handed (the real one downloads Inception weights).
"""
from __future__ import annotations

import sys
import types

import pytest

from porter.engine.process import Options, migrate_source
from porter.rules.cuda_flag_keywords import CudaFlagKeyword

EXAMPLE = CudaFlagKeyword.invalid[0]


def _switch_seen(monkeypatch, code: str) -> object:
    """Run ``code`` (which defines ``fid``) against a recording ``torch_fidelity``."""
    seen = {}
    fake = types.ModuleType("torch_fidelity")

    def calculate_metrics(**kwargs):
        seen.update(kwargs)
        return {"frechet_inception_distance": 0.0}

    fake.calculate_metrics = calculate_metrics
    monkeypatch.setitem(sys.modules, "torch_fidelity", fake)
    scope: dict = {}
    exec(compile(code, "example.py", "exec"), scope)
    scope["fid"]("real", "fake")
    return seen["cuda"]


def _ported() -> str:
    result = migrate_source(EXAMPLE.before.encode(), Options(rules=[CudaFlagKeyword]), path="example.py")
    return result.new.decode()


def test_on_cuda_the_library_is_told_cuda_as_before(simulate, monkeypatch):
    simulate("cuda")
    ported = _ported()
    assert "cuda=True" not in ported
    assert _switch_seen(monkeypatch, ported) is _switch_seen(monkeypatch, EXAMPLE.before) is True


@pytest.mark.parametrize("machine", ["mps", "cpu"])
def test_elsewhere_the_library_runs_on_the_cpu(simulate, monkeypatch, machine):
    simulate(machine)
    assert _switch_seen(monkeypatch, _ported()) is False
