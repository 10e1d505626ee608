"""A run's peak memory, recorded at exit when PORTER_PEAK_MEMORY_FILE names a file.

``porter fit`` runs a short training command once per candidate batch size and
reads what each run wrote here. Unset (the normal case) nothing happens: no
thread, no hook, no device probe. Set, importing porter_runtime registers an
exit handler and a global optimizer-step hook that times steps; on macOS a
daemon thread samples MPS's driver-allocated memory, of which torch keeps no peak.

At exit the main process (not DataLoader workers) appends one JSON line:
``{"pid", "device", "peak_bytes", "measure", "capacity_bytes", "capacity",
"host_peak_bytes", "steps", "step_seconds", "wall_seconds"}``.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Optional

ENV = "PORTER_PEAK_MEMORY_FILE"
_SAMPLE_SECONDS = 0.02


def host_peak_rss() -> int:
    """This process's peak resident set size in bytes.

    On Linux, ``VmHWM`` of ``/proc/self/status``: getrusage's ``ru_maxrss`` keeps the
    size the parent had when it forked this process (it survives ``exec``), so a run
    started by a large process would report that process's memory. Elsewhere
    ``ru_maxrss`` (bytes on macOS)."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/self/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024  # kB
        except (OSError, ValueError, IndexError):
            pass
    try:
        import resource
    except ImportError:  # Windows
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def _rss_method() -> str:
    return "peak resident set size (VmHWM)" if sys.platform.startswith("linux") else \
        "peak resident set size (getrusage ru_maxrss)"


def available_ram() -> tuple[int, str]:
    """(bytes, what they are): MemAvailable on Linux, else free pages, else physical RAM."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "available RAM"
    except (OSError, ValueError, IndexError):
        pass
    for name, what in (("SC_AVPHYS_PAGES", "free RAM"), ("SC_PHYS_PAGES", "physical RAM")):
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf(name), what
        except (ValueError, OSError, AttributeError):
            continue
    return 0, "unknown RAM"


class Recorder:
    """Collects what one process needs to write at exit."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.started = time.monotonic()
        self.ram_at_start = available_ram()  # before the run allocates
        self.steps: dict[int, list[float]] = {}
        self.mps_samples = 0
        self._stop = threading.Event()

    def on_step(self, optimizer: Any, *_: Any) -> None:
        """Global optimizer-step hook: wait for the device, then note the time."""
        _synchronize(optimizer)
        self.steps.setdefault(id(optimizer), []).append(time.perf_counter())

    def sample_mps(self) -> None:
        """Keep the high-water mark of torch.mps.driver_allocated_memory()."""
        import torch

        from .. import _compat

        if os.environ.get("PORTER_DEVICE", "mps").strip() not in ("", "mps") or not _compat.mps_available():
            return
        while not self._stop.is_set():
            self.mps_samples = max(self.mps_samples, int(torch.mps.driver_allocated_memory()))
            self._stop.wait(_SAMPLE_SECONDS)

    def record(self) -> dict[str, Any]:
        self._stop.set()
        kind = _device_type()
        peak, measure = _device_peak(kind, self)
        capacity, what = _capacity(kind, self)
        times = max(self.steps.values(), key=len, default=[])  # the optimizer that stepped most
        return {
            "pid": os.getpid(), "device": kind, "peak_bytes": peak, "measure": measure,
            "capacity_bytes": capacity, "capacity": what, "host_peak_bytes": host_peak_rss(),
            "steps": len(times),
            # The first step includes warm-up; the mean interval after it is the pace.
            "step_seconds": (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None,
            "wall_seconds": time.monotonic() - self.started,
        }

    def write(self) -> None:
        import multiprocessing

        if multiprocessing.parent_process() is not None:  # a DataLoader worker, a pool child
            return
        try:
            line = json.dumps(self.record())
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except Exception as exc:  # never change the run's outcome
            print(f"porter_runtime: could not record peak memory in {self.path}: {exc}", file=sys.stderr)


def _synchronize(optimizer: Any) -> None:
    import torch

    for group in getattr(optimizer, "param_groups", ()):
        for param in group.get("params", ()):
            kind = param.device.type
            if kind == "cuda":
                torch.cuda.synchronize(param.device)
            elif kind == "mps":
                torch.mps.synchronize()
            return


def _device_type() -> str:
    """The resolved device's type, resolved quietly if the run never asked."""
    from .. import _device

    resolution = _device._resolution
    if resolution is None:
        override = os.environ.get("PORTER_DEVICE", "").strip()
        try:
            resolution = _device._from_env(override) if override else _device._probe()
        except (RuntimeError, ValueError):
            return "cpu"
    return resolution.device.type


def _device_peak(kind: str, recorder: Recorder) -> tuple[int, str]:
    import torch

    if kind in ("cuda", "xpu"):
        mod = getattr(torch, kind)
        peak = max(int(mod.max_memory_allocated(i)) for i in range(max(mod.device_count(), 1)))
        return peak, f"torch.{kind}.max_memory_allocated()"
    if kind == "mps":
        from .._compat import mps_accelerator

        now = int(torch.mps.driver_allocated_memory())
        try:
            reserved = int(mps_accelerator("max_memory_reserved", 0) or 0)
        except Exception:  # a torch whose accelerator API fails otherwise on MPS
            reserved = 0
        return (max(recorder.mps_samples, now, reserved),
                "high-water mark of torch.mps.driver_allocated_memory()")
    return host_peak_rss(), _rss_method()


def _capacity(kind: str, recorder: Recorder) -> tuple[int, str]:
    import torch

    try:
        if kind in ("cuda", "xpu"):
            mod = getattr(torch, kind)
            return int(mod.get_device_properties(mod.current_device()).total_memory), f"{kind} total memory"
        if kind == "mps":
            return int(torch.mps.recommended_max_memory()), "MPS recommended maximum working set"
    except (RuntimeError, AssertionError, AttributeError):
        return 0, "unknown"
    ram, what = recorder.ram_at_start
    return ram, what + " at start"


def _step_hook_register() -> Optional[Callable[..., Any]]:
    import torch.optim.optimizer as optimizer

    return getattr(optimizer, "register_optimizer_step_post_hook", None)


def install(environ: Any = os.environ) -> Optional[Recorder]:
    """Start recording when PORTER_PEAK_MEMORY_FILE is set; otherwise do nothing."""
    path = environ.get(ENV, "").strip()
    if not path:
        return None
    recorder = Recorder(path)
    register = _step_hook_register()
    if register is not None:
        register(recorder.on_step)
    if sys.platform == "darwin":
        threading.Thread(target=recorder.sample_mps, name="porter-peak-mps", daemon=True).start()
    atexit.register(recorder.write)
    return recorder
