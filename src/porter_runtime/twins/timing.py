"""Events for timing, streams and NVTX-style profiler ranges, per device.

Streams: CUDA's own on CUDA; elsewhere the device's one queue, in order. MPS and the CPU
have no user streams. Code that overlaps work with a side stream (a loader that copies
the next batch on ``torch.cuda.Stream()`` while the model runs, then
``current_stream().wait_stream(side)`` and ``tensor.record_stream(...)``: LAVIS's and
MiniGPT-4's ``PrefetchLoader``) computes the same on one queue: every stream's work
still runs, in program order, and every wait is already met. Only the overlap, a matter
of speed, is gone."""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator, Optional

import torch

from .. import _device


class WallClockEvent:
    """CPU stand-in for torch.cuda.Event: ``record()`` reads a wall clock.

    CPU ops run synchronously, so the wall-clock time between two records is the
    time of the work between them. ``elapsed_time`` returns milliseconds, like CUDA.
    """

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._time: Optional[float] = None

    def record(self, stream: Any = None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        """Nothing to wait for: CPU work is already done."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for: CPU work is already done."""

    @property
    def cuda_event(self) -> int:
        """torch.cuda.Event's handle: 0 until the event is recorded (code tests it to tell a
        recorded event: StyleGAN-XL's training loop), then non-zero."""
        return 0 if self._time is None else id(self)

    def elapsed_time(self, end_event: "WallClockEvent") -> float:
        if not self.enable_timing or not end_event.enable_timing:
            raise RuntimeError("Events were not created with enable_timing=True")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time")
        return (end_event._time - self._time) * 1000.0


def Event(enable_timing: bool = False, blocking: bool = False,
          interprocess: bool = False) -> Any:
    """Twin of torch.cuda.Event.

    CUDA: a real ``torch.cuda.Event(enable_timing, blocking, interprocess)``.
    MPS: ``torch.mps.Event(enable_timing=...)`` (record/wait/query/synchronize/
    elapsed_time; blocking and interprocess do not exist there).
    CPU, and emulated MPS: a WallClockEvent (milliseconds of wall-clock time).
    """
    kind = _device.hardware_type()
    if kind == "cuda":
        return torch.cuda.Event(enable_timing=enable_timing, blocking=blocking,
                                interprocess=interprocess)
    if kind == "mps":
        return _mps_event()(enable_timing=enable_timing)
    if kind == "xpu":
        return torch.xpu.Event(enable_timing=enable_timing)
    return WallClockEvent(enable_timing, blocking, interprocess)


_MPS_EVENTS: dict = {}


def _mps_event() -> type:
    """torch.mps.Event whose ``record`` and ``wait`` take the stream argument CUDA code
    passes (None, from ``current_stream``): MPS has one queue."""
    base = torch.mps.Event
    made = _MPS_EVENTS.get(base)
    if made is None:
        class MpsEvent(base):  # type: ignore[misc, valid-type]
            def record(self, stream: Any = None) -> None:
                super().record()
                self._recorded = True

            @property
            def cuda_event(self) -> int:
                """0 until recorded, as torch.cuda.Event's handle (WallClockEvent's)."""
                return id(self) if getattr(self, "_recorded", False) else 0

            def wait(self, stream: Any = None) -> None:
                super().wait()

        made = _MPS_EVENTS[base] = MpsEvent
    return made


# Off CUDA, push/pop map onto record_function ranges kept on a per-thread stack.
_ranges = threading.local()


def _stack() -> list[Any]:
    if not hasattr(_ranges, "stack"):
        _ranges.stack = []
    return _ranges.stack


def _record_push(msg: str) -> int:
    scope = torch.autograd.profiler.record_function(msg)
    scope.__enter__()
    _stack().append(scope)
    return len(_stack()) - 1


def nvtx_range_push(msg: str) -> int:
    """Open a named profiler range; returns the zero-based depth of the new range.

    CUDA: torch.cuda.nvtx.range_push(msg). Elsewhere, and on CUDA builds without
    NVTX: a torch.autograd.profiler.record_function range, visible in
    torch.profiler traces. Never raises "NVTX functions not installed".
    """
    if _device.is_cuda():
        try:
            return int(torch.cuda.nvtx.range_push(msg))
        except RuntimeError:
            pass  # a CUDA build without NVTX: keep the range in the profiler
    return _record_push(msg)


def nvtx_range_pop() -> int:
    """Close the innermost range; returns its depth (-1 when none was open).

    CUDA: torch.cuda.nvtx.range_pop(). Elsewhere: closes the record_function range.
    """
    if _device.is_cuda() and not _stack():
        try:
            return int(torch.cuda.nvtx.range_pop())
        except RuntimeError:
            return -1
    if not _stack():
        return -1
    _stack().pop().__exit__(None, None, None)
    return len(_stack())


@contextlib.contextmanager
def nvtx_range(msg: str, *args: Any, **kwargs: Any) -> Iterator[None]:
    """Context manager and decorator for a named range (``msg.format(*args, **kwargs)``).

    CUDA: torch.cuda.nvtx.range(msg, *args, **kwargs). Elsewhere, and on CUDA
    builds without NVTX: torch.autograd.profiler.record_function.
    """
    with contextlib.ExitStack() as stack:
        entered = False
        if _device.is_cuda():
            try:
                stack.enter_context(torch.cuda.nvtx.range(msg, *args, **kwargs))
                entered = True
            except RuntimeError:
                pass  # no NVTX in this build: record the range in the profiler instead
        if not entered:
            stack.enter_context(
                torch.autograd.profiler.record_function(msg.format(*args, **kwargs)))
        yield


def current_stream(device: Any = None) -> Any:
    """Twin of ``torch.cuda.current_stream(device)``: CUDA's current stream on CUDA;
    elsewhere the device's one queue (porter_runtime.twins.streams.DeviceQueue: MPS and
    the CPU have no user streams), which every ``Event`` twin's ``record`` and ``wait``
    take as the stream they are given (``start.record(torch.cuda.current_stream(device))``)."""
    if _device.hardware_type() == "cuda":
        return torch.cuda.current_stream(device)
    return DeviceQueue(device)


class DeviceQueue:
    """Off CUDA, the stand-in of a ``torch.cuda.Stream``: the device's one queue."""

    priority = 0

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.device = _device.device()

    def wait_stream(self, stream: Any) -> None:
        """Its work is already ahead in the one queue."""

    def wait_event(self, event: Any) -> None:
        """The event's work is already ahead in the one queue."""

    def record_event(self, event: Any = None) -> Any:
        event = event if event is not None else Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        if self.device.type == "mps":
            torch.mps.synchronize()

    def __enter__(self) -> "DeviceQueue":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DeviceQueue)

    def __hash__(self) -> int:
        return hash(DeviceQueue)


def Stream(device: Any = None, priority: int = 0, **kwargs: Any) -> Any:
    """Twin of ``torch.cuda.Stream(device, priority)``: CUDA's on CUDA, the device's one
    queue (a :class:`DeviceQueue`) elsewhere."""
    if _device.hardware_type() == "cuda":
        return torch.cuda.Stream(device, priority, **kwargs)
    return DeviceQueue(device, priority)


def stream(stream: Any) -> Any:
    """Twin of ``torch.cuda.stream(stream)``: CUDA's context on CUDA; elsewhere work stays on
    the device's one queue."""
    if _device.hardware_type() == "cuda":
        return torch.cuda.stream(stream)
    return contextlib.nullcontext()


def default_stream(device: Any = None) -> Any:
    """Twin of ``torch.cuda.default_stream(device)``."""
    if _device.hardware_type() == "cuda":
        return torch.cuda.default_stream(device)
    return DeviceQueue(device)


def record_stream(tensor: torch.Tensor, s: Any) -> None:
    """``tensor.record_stream(s)`` on CUDA; elsewhere nothing: one queue frees memory in order."""
    if _device.hardware_type() == "cuda":
        tensor.record_stream(s)
