"""`torch.cuda.current_device()` is an index; its twin is 0 off CUDA, which torch reads
as `cuda:0`. Wherever the index is meant as a device, the whole port (every rule in one
pass) wraps it in `porter_runtime.device(...)`, so the port runs on CPU (issue 26)."""
from __future__ import annotations

import io
from textwrap import dedent

import torch

from porter.engine.process import migrate_source
from porter.engine.options import Options
from porter.engine.registry import all_rules

ORIGINAL = dedent("""\
    import torch
    from torch.cuda import current_device


    def make(x, checkpoint):
        dev = torch.cuda.current_device()
        return {
            "zeros": torch.zeros(2, device=torch.cuda.current_device()),
            "generator": torch.Generator(device=current_device()),
            "new": x.new_zeros(3, device=torch.cuda.current_device()),
            "moved": x.to(dev),
            "cuda": x.cuda(torch.cuda.current_device()),
            "loaded": torch.load(checkpoint, map_location=lambda s, loc: s.cuda(torch.cuda.current_device())),
            "name": torch.cuda.get_device_name(torch.cuda.current_device()),
        }
    """)


def _port() -> str:
    result = migrate_source(ORIGINAL.encode(), Options(rules=all_rules()), path="make.py")
    return result.new.decode()


def test_every_current_device_meant_as_a_device_is_wrapped():
    port = _port()
    for use in ("torch.zeros(2, device=", "torch.Generator(device=", "x.new_zeros(3, device=",
                "x.to(", "map_location="):
        start = port.index(use) + len(use)
        assert port[start:].startswith(("porter_runtime.device(", "porter_runtime.map_location(porter_runtime.device(")), use


def test_the_port_runs_on_cpu(monkeypatch):
    monkeypatch.setenv("PORTER_QUIET", "1")
    namespace: dict = {}
    exec(compile(_port(), "make.py", "exec"), namespace)
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(2)}, buffer)
    buffer.seek(0)
    made = namespace["make"](torch.ones(2), buffer)
    for key in ("zeros", "new", "moved", "cuda"):
        assert made[key].device == torch.device("cpu"), key
    assert made["generator"].device == torch.device("cpu")
    assert made["loaded"]["w"].device == torch.device("cpu")
    assert made["name"].startswith("CPU")
