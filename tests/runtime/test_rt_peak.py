"""PORTER_PEAK_MEMORY_FILE: what the runtime records per device (simulated machines) and units."""
from __future__ import annotations

import json
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.optim.optimizer as optimizer_module

from porter_runtime.tools import peak as _peak


def test_unset_means_nothing_happens():
    # This process imported porter_runtime without the variable: no hook, no sampler thread.
    hooks = optimizer_module._global_optimizer_post_hooks.values()
    assert not any(isinstance(getattr(h, "__self__", None), _peak.Recorder) for h in hooks)
    assert not any(t.name == "porter-peak-mps" for t in threading.enumerate())
    assert _peak.install({}) is None
    assert _peak.install({_peak.ENV: "  "}) is None


def test_cpu_peak_is_this_process_image_peak_in_bytes(simulate, monkeypatch):
    simulate("cpu")
    if sys.platform.startswith("linux"):
        status = Path("/proc/self/status").read_text()
        hwm = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) * 1024
        assert abs(_peak.host_peak_rss() - hwm) < 64 << 20  # the same counter, read a moment later
    monkeypatch.setattr(_peak.sys, "platform", "darwin")
    assert _peak.host_peak_rss() == resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # macOS counts bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and ru_maxrss's fork inheritance are Linux's")
def test_a_child_of_a_large_process_reports_its_own_peak(tmp_path):
    """ru_maxrss survives fork + exec: a child started by a 600 MiB process reports at
    least 600 MiB although it never used that much. VmHWM is the child's own."""
    code = (
        "import subprocess, sys\n"
        "ballast = bytearray(600 << 20)\n"
        "child = 'import resource; from porter_runtime.tools import peak as _peak; "
        "print(_peak.host_peak_rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)'\n"
        "print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True, check=True).stdout)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    own, maxrss = map(int, out.split())
    assert own < 400 << 20, own
    assert maxrss >= 600 << 20  # the inherited figure that fooled the measurement


def test_cpu_record_and_step_timing(simulate, tmp_path):
    simulate("cpu")
    recorder = _peak.Recorder(str(tmp_path / "peak.jsonl"))
    model = torch.nn.Linear(4, 4)
    opt, other = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        recorder.on_step(opt)
    recorder.on_step(other)
    recorder.write()
    (line,) = (tmp_path / "peak.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["device"] == "cpu" and record["peak_bytes"] == record["host_peak_bytes"] > 0
    assert record["steps"] == 3 and record["step_seconds"] >= 0  # the optimizer that stepped most
    assert record["capacity_bytes"] > 0 and record["capacity"].endswith("at start")


def test_cuda_record_is_max_memory_allocated(simulate):
    machine = simulate("cuda")
    machine.record(torch.cuda, "max_memory_allocated", lambda i: [5 << 30, 7 << 30][i])
    machine.record(torch.cuda, "current_device", 0)
    machine.record(torch.cuda, "get_device_properties", lambda i: type("P", (), {"total_memory": 80 << 30})())
    record = _peak.Recorder("unused").record()
    assert (record["device"], record["peak_bytes"], record["capacity_bytes"]) == ("cuda", 7 << 30, 80 << 30)
    assert record["measure"] == "torch.cuda.max_memory_allocated()"


def test_mps_record_is_the_driver_allocated_high_water_mark(simulate, monkeypatch):
    machine = simulate("mps")
    machine.record(torch.mps, "driver_allocated_memory", 3 << 30)
    machine.record(torch.mps, "recommended_max_memory", 21 << 30)
    monkeypatch.setattr(torch.accelerator, "max_memory_reserved", lambda: 0, raising=False)
    recorder = _peak.Recorder("unused")
    recorder.mps_samples = 9 << 30  # what the sampler thread saw mid-run
    record = recorder.record()
    assert (record["device"], record["peak_bytes"], record["capacity_bytes"]) == ("mps", 9 << 30, 21 << 30)
    assert record["capacity"] == "MPS recommended maximum working set"


def test_porter_device_decides_what_is_measured(simulate, monkeypatch):
    simulate("mps")
    monkeypatch.setenv("PORTER_DEVICE", "cpu")
    assert _peak.Recorder("unused").record()["device"] == "cpu"


def test_mps_sampler_keeps_the_high_water_mark(simulate):
    machine = simulate("mps")
    readings = iter([1 << 30, 6 << 30, 2 << 30])
    machine.record(torch.mps, "driver_allocated_memory", lambda: next(readings, 2 << 30))
    recorder = _peak.Recorder("unused")
    sampler = threading.Thread(target=recorder.sample_mps)
    sampler.start()
    for _ in range(500):  # at most 5 s
        if recorder.mps_samples >= 6 << 30 or not sampler.is_alive():
            break
        threading.Event().wait(0.01)
    recorder._stop.set()
    sampler.join(5)
    assert not sampler.is_alive() and recorder.mps_samples == 6 << 30  # the peak, not the last reading
