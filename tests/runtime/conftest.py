"""Fixtures that simulate a CUDA, MPS or CPU machine for porter_runtime's decisions.

Device availability is monkeypatched (torch.cuda.is_available, device_count,
torch.backends.mps.is_available); the torch.cuda / torch.mps functions that the
runtime would call are replaced with recorders, so tests can assert that the
runtime forwarded the caller's arguments verbatim.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch

import porter_runtime

_ENV = ("PORTER_DEVICE", "PORTER_COMPILE", "DISABLE_COMPILE", "PORTER_QUIET", "WORLD_SIZE",
        "PORTER_AMP_DTYPE", "PORTER_EMULATE")


@dataclass
class Recorder:
    """A stand-in function that records its calls and returns ``result``."""

    name: str
    result: Any = None
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.result(*args, **kwargs) if callable(self.result) else self.result


@dataclass
class Machine:
    kind: str
    monkeypatch: pytest.MonkeyPatch

    def record(self, owner: Any, name: str, result: Any = None) -> Recorder:
        """Replace ``owner.name`` with a Recorder (undone after the test)."""
        recorder = Recorder(name, result)
        self.monkeypatch.setattr(owner, name, recorder, raising=False)
        return recorder


@pytest.fixture(autouse=True)
def _fresh_runtime(monkeypatch: pytest.MonkeyPatch):
    """Every test starts with no cached device and no inherited PORTER_* variables."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PORTER_QUIET", "1")
    porter_runtime._reset()
    yield
    porter_runtime._reset()


@pytest.fixture
def simulate(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Machine]:
    """``simulate("cuda"|"mps"|"cpu")`` makes this process look like that machine."""

    def make(kind: str) -> Machine:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: kind == "cuda")
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if kind == "cuda" else 0)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: kind == "mps")
        if hasattr(torch, "xpu"):
            monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
        porter_runtime._reset()
        return Machine(kind, monkeypatch)

    return make
