"""Small, cached facts about the installed torch build (no device probing)."""
from __future__ import annotations

import functools
import os
import re
from typing import Any, Callable

import torch


@functools.lru_cache(maxsize=None)
def torch_version() -> tuple[int, int]:
    """(major, minor) of the installed torch, e.g. (2, 13) for '2.13.0+cpu'."""
    match = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def at_least(major: int, minor: int) -> bool:
    """True when the installed torch is at least major.minor."""
    return torch_version() >= (major, minor)


def launch_world_size(variable: str = "WORLD_SIZE") -> int:
    """``WORLD_SIZE`` as a launcher (torchrun) set it (or ``LOCAL_WORLD_SIZE``: the
    processes it started on this machine); 1 when unset or unreadable."""
    try:
        return int(os.environ.get(variable, "1"))
    except ValueError:
        return 1


def emulated() -> str:
    """The device PORTER_EMULATE names ("mps"), or "" when the runtime runs as itself.

    Under emulation tensors stay on the CPU while the runtime's choices follow the
    emulated device (see tools/emulate.py); torch's own answers are never changed."""
    value = os.environ.get("PORTER_EMULATE", "").strip().lower()
    if value not in ("", "mps"):
        raise ValueError(f"PORTER_EMULATE={value!r}: the runtime can emulate only 'mps'")
    return value


def mps_available() -> bool:
    """torch.backends.mps.is_available(), False on builds without the backend."""
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def xpu_available() -> bool:
    """torch.xpu.is_available(), False on builds without torch.xpu."""
    xpu = getattr(torch, "xpu", None)
    return bool(xpu is not None and xpu.is_available())


def mps_bf16_supported() -> bool:
    """bf16 on MPS: always from torch 2.9, before that it needs macOS 14 (facts §2).
    Emulated MPS is a Mac with macOS 14 or newer (the only one torch 2.12+ wheels serve)."""
    if emulated() == "mps":
        return True
    if not mps_available():
        return False
    if at_least(2, 9):
        return True
    check = getattr(torch.backends.mps, "is_macos_or_newer", None)
    return bool(check is not None and check(14, 0))


def mps_accelerator(name: str, neutral: Any) -> Any:
    """torch.accelerator.<name>() on MPS where it works, else ``neutral``."""
    fn: Callable[[], Any] | None = getattr(getattr(torch, "accelerator", None), name, None)
    if fn is None:
        return neutral
    try:
        return fn()
    except (RuntimeError, AssertionError):
        return neutral
