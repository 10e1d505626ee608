"""sdpa_kernel: the attention-backend context managers, kept where torch honours them.

torch.nn.attention.sdpa_kernel and torch.backends.cuda.sdp_kernel set global
switches that CPU attention reads too (its order is flash, then math), so a
restriction changes results there: ``sdpa_kernel(SDPBackend.MATH)`` on CPU gives
the math kernel's numbers, not the flash kernel's. Off CUDA the runtime keeps the
backends the device has and drops the others: the CPU has flash and math, MPS
and other devices math only (MPS runs its own kernels whatever the switches say).
Math is kept allowed wherever the request left only flash, because CPU flash
refuses dropout ("No available kernel"); a request with nothing the device has
(efficient or cuDNN only) restricts nothing. Each change is said once.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .. import _device, _log

_OLD_SDP_KEYWORDS = ("enable_flash", "enable_math", "enable_mem_efficient", "enable_cudnn")
#: Backend names of the old keywords, in torch.backends.cuda.sdp_kernel's parameter order.
_OLD_BACKENDS = ("FLASH_ATTENTION", "MATH", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
#: Backends each device type runs; anything else falls back to math alone.
_DEVICE_BACKENDS = {"cpu": ("FLASH_ATTENTION", "MATH")}


@contextlib.contextmanager
def _no_kernel_choice() -> Iterator[None]:
    # A generator context manager, so that it also works as a decorator.
    yield


def _is_old_form(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return bool(set(_OLD_SDP_KEYWORDS) & kwargs.keys()) or bool(args and isinstance(args[0], bool)) \
        or (not args and not kwargs)


def _requested(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[list[str], bool]:
    """The backend names asked for, in the caller's order, and set_priority."""
    if _is_old_form(args, kwargs):
        flags = dict(zip(_OLD_SDP_KEYWORDS, args), **kwargs)
        return [name for key, name in zip(_OLD_SDP_KEYWORDS, _OLD_BACKENDS) if flags.get(key, True)], False
    backends = args[0] if args else kwargs.get("backends")
    backends = backends if isinstance(backends, (list, tuple)) else [backends]
    priority = args[1] if len(args) > 1 else kwargs.get("set_priority", False)
    return [b.name for b in backends], bool(priority)


def _kept(kind: str, requested: list[str]) -> tuple[list[str], str]:
    """The requested backends ``kind`` runs, plus math where only flash is left, and
    what differs from the request in effect ('' when nothing: leaving out a backend
    the device lacks changes nothing)."""
    runs = _DEVICE_BACKENDS.get(kind, ("MATH",))
    kept = [name for name in requested if name in runs]
    if requested and not kept:
        return kept, f"restricts nothing here ({kind} runs none of them)"
    if kept and "MATH" not in kept:
        return [*kept, "MATH"], f"also allows MATH, since {kind} flash attention has no dropout"
    return kept, ""


def sdpa_kernel(*args: Any, **kwargs: Any) -> Any:
    """Twin of torch.nn.attention.sdpa_kernel and torch.backends.cuda.sdp_kernel.

    CUDA: the old keyword form (enable_flash=..., enable_math=..., ...) goes to
    torch.backends.cuda.sdp_kernel, the backends form to torch.nn.attention.sdpa_kernel,
    with the same arguments. MPS / CPU: torch.nn.attention.sdpa_kernel with the
    requested backends the device runs (module doc), so a math-only restriction
    still gives the math kernel's results; a request with none of them is a no-op
    context. Every backend left out or added is said once.
    """
    if _device.is_cuda():
        if _is_old_form(args, kwargs):
            return torch.backends.cuda.sdp_kernel(*args, **kwargs)
        from torch.nn.attention import sdpa_kernel as new_sdpa_kernel

        return new_sdpa_kernel(*args, **kwargs)
    kind = _device.device_type()
    requested, priority = _requested(args, kwargs)
    kept, change = _kept(kind, requested)
    if change:
        _log.warn_once(f"sdpa_kernel:{kind}:{requested}",
                       f"sdpa_kernel({', '.join(requested)}) on {kind} {change}")
    if not kept:
        return _no_kernel_choice()
    from torch.nn.attention import SDPBackend, sdpa_kernel as new_sdpa_kernel

    backends = [getattr(SDPBackend, name) for name in kept]
    return new_sdpa_kernel(backends, set_priority=True) if priority else new_sdpa_kernel(backends)
