"""Device resolution: CUDA > MPS > XPU > CPU, with the PORTER_DEVICE override.

The resolution is computed on first use (never at import) and cached, because
user code asks for the device in hot loops. ``_reset()`` clears the cache.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Union

import torch

from . import _compat, _log

DeviceLike = Union[None, int, str, torch.device]


@dataclass(frozen=True)
class Resolution:
    """The device the runtime chose and the reason, for the info line and doctor."""

    device: torch.device
    reason: str


_resolution: Optional[Resolution] = None


def _from_env(value: str) -> Resolution:
    """Honour PORTER_DEVICE, refusing a device that is not there (never fake it)."""
    try:
        dev = torch.device(value)
    except RuntimeError as exc:
        raise ValueError(f"PORTER_DEVICE={value!r} is not a torch device: {exc}") from None
    checks = {"cuda": torch.cuda.is_available, "mps": _compat.mps_available,
              "xpu": _compat.xpu_available}
    if dev.type in checks and not checks[dev.type]():
        raise RuntimeError(
            f"PORTER_DEVICE={value!r} but {dev.type} is not available on this machine; "
            "unset PORTER_DEVICE or choose cpu")
    return Resolution(dev, f"PORTER_DEVICE={value}")


def _probe() -> Resolution:
    """Check every backend explicitly: torch.accelerator knows only the build's one."""
    if torch.cuda.is_available():
        return Resolution(torch.device("cuda"), "torch.cuda.is_available() is True")
    if _compat.mps_available():
        return Resolution(torch.device("mps"),
                          "torch.backends.mps.is_available() is True, CUDA is not")
    if _compat.xpu_available():
        return Resolution(torch.device("xpu"), "torch.xpu.is_available() is True, CUDA is not")
    return Resolution(torch.device("cpu"), "no CUDA, MPS or XPU device is available")


def resolve() -> Resolution:
    """The cached resolution; the first call prints one info line (PORTER_QUIET=1 mutes)."""
    global _resolution
    if _resolution is None:
        override = os.environ.get("PORTER_DEVICE", "").strip()
        _resolution = _from_env(override) if override else _probe()
        _log.info_once("device", f"using {_resolution.device} ({_resolution.reason})")
        if _resolution.device.type == "mps" and os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK") is None:
            # torch was imported before porter_runtime (the usual import order), so the
            # runtime could not set the variable: torch reads it once, at import.
            _log.info_once("mps-fallback", "PYTORCH_ENABLE_MPS_FALLBACK is not set, so ops MPS lacks raise "
                           "NotImplementedError; export PYTORCH_ENABLE_MPS_FALLBACK=1 to run them on the CPU")
    return _resolution


def _reset() -> None:
    """Forget the cached resolution and one-time messages (for tests)."""
    global _resolution
    _resolution = None
    _log.reset()


def _cuda_request(index: Optional[int]) -> torch.device:
    """Map a request for CUDA (optionally indexed) to the resolved device."""
    resolved = resolve().device
    if resolved.type == "cuda":
        return resolved if index is None else torch.device("cuda", index)
    if resolved.type == "xpu" and index is not None:
        return torch.device("xpu", index)
    # MPS has a single device and CPU has no index: drop it.
    return torch.device(resolved.type) if resolved.type in ("mps", "cpu") else resolved


def device(index: DeviceLike = None) -> torch.device:
    """The device the original CUDA code meant, on this machine.

    CUDA: ``device()`` is ``torch.device("cuda")`` (no index, as the original),
    ``device(1)`` and ``device("cuda:1")`` are ``cuda:1``.
    MPS / XPU / CPU: CUDA requests map to the resolved device (index dropped on
    MPS). An explicit non-CUDA request (``"cpu"``, ``"mps"``) is returned as is
    on every machine. PORTER_DEVICE overrides the resolution of CUDA requests;
    an explicit index in the request is kept when the override is CUDA.
    """
    if index is None:
        return _cuda_request(None)
    if isinstance(index, int) and not isinstance(index, bool):
        return _cuda_request(index)
    requested = torch.device(index)
    if requested.type != "cuda":
        return requested
    return _cuda_request(requested.index)


def device_type() -> str:
    """'cuda', 'mps', 'xpu' or 'cpu': the type of the resolved device."""
    return resolve().device.type


def is_cuda() -> bool:
    """True when the runtime resolved to CUDA: every twin then forwards to torch.cuda."""
    return device_type() == "cuda"


def is_accelerator_available() -> bool:
    """True when the resolved device is an accelerator (CUDA, MPS or XPU).

    Unlike a faked ``torch.cuda.is_available()``, this says what is true: on a Mac
    it is True because MPS is there, and PORTER_DEVICE=cpu makes it False.
    """
    return device_type() != "cpu"
