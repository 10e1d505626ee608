"""Mixed precision: autocast, GradScaler and custom_fwd/custom_bwd twins.

CUDA: exactly torch.amp with device_type "cuda" (fp16 by default, real scaler).
MPS / CPU / XPU: bfloat16 where the device supports it, because fp16 needs loss
scaling and bf16 does not; the scaler is then an honest disabled passthrough
(same API). Where bf16 is missing, fp16 with a real scaler if torch has one for
the device (CPU; MPS from torch 2.8), otherwise autocast is switched off.
Every change from CUDA's fp16 is announced by one warning.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from . import _compat, _device, _dtypes, _log

_SCALER_ARGS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")


def _scaler_exists(kind: str) -> bool:
    # GradScaler("mps") needs the MPS AMP kernels of torch 2.8 (facts §3).
    return kind != "mps" or _compat.at_least(2, 8)


def _half_plan(kind: str) -> Optional[torch.dtype]:
    """The dtype that replaces CUDA's float16 on ``kind``; None means autocast off."""
    if _dtypes.is_bf16_supported():
        _log.warn_once("amp:bf16", f"autocast uses torch.bfloat16 on {kind} instead of "
                       "CUDA's torch.float16: float16 needs loss scaling, bfloat16 does not "
                       "(the GradScaler is a disabled passthrough)")
        return torch.bfloat16
    if _scaler_exists(kind):
        return torch.float16
    _log.warn_once("amp:off", f"autocast is disabled on {kind}: no bfloat16 here and torch "
                   f"{torch.__version__} has no GradScaler for float16 on {kind}")
    return None


def amp_dtype(dtype: Optional[torch.dtype] = None) -> Optional[torch.dtype]:
    """The autocast dtype used for a request of ``dtype`` (None: CUDA's default fp16).

    CUDA: ``dtype`` unchanged. Elsewhere: float16/None -> bf16 (or fp16 with a
    scaler, or None meaning autocast off), any other dtype unchanged.
    """
    kind = _device.device_type()
    if kind == "cuda" or dtype not in (None, torch.float16):
        return dtype
    return _half_plan(kind)


def autocast(dtype: Optional[torch.dtype] = None, enabled: bool = True,
             cache_enabled: Optional[bool] = None) -> torch.autocast:
    """Twin of torch.cuda.amp.autocast / torch.autocast("cuda"); context manager and decorator.

    CUDA: ``torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=...)``.
    MPS / CPU: ``torch.autocast(<device>, ...)`` with bf16 in place of fp16 (see
    module doc); other dtypes are passed through and torch validates them.
    """
    kind = _device.device_type()
    if kind == "cuda":
        return torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    chosen = amp_dtype(dtype) if enabled else dtype
    # chosen is None only when enabled fp16 had to be switched off (warned above).
    return torch.autocast(kind, dtype=chosen, enabled=enabled and chosen is not None,
                          cache_enabled=cache_enabled)


def _scaler_kwargs(args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[Optional[str], dict[str, Any]]:
    """The device the caller named (None: none, or CUDA's default) and the other
    GradScaler arguments as keywords."""
    kwargs = dict(kwargs)
    named = kwargs.pop("device", None)
    if args and isinstance(args[0], str):
        named, args = args[0], args[1:]
    kwargs.update(zip(_SCALER_ARGS, args))
    kind = str(named).split(":")[0] if named is not None else None
    # torch.amp.GradScaler("cuda", ...): the device is ours to pick; any other named
    # device ("cpu") is the caller's choice and is kept on every machine.
    return (None if kind in (None, "cuda") else str(named)), kwargs


def GradScaler(*args: Any, **kwargs: Any) -> torch.amp.GradScaler:
    """Twin of torch.cuda.amp.GradScaler(...) and torch.amp.GradScaler("cuda", ...).

    CUDA: ``torch.amp.GradScaler("cuda", ...)`` with the same arguments. A scaler
    for another named device (``GradScaler("cpu")``) is that device's on every machine.
    MPS / CPU: a real scaler when autocast uses fp16 there, otherwise
    ``torch.amp.GradScaler(<device>, enabled=False)``: scale() returns the loss
    unchanged, step() calls optimizer.step(), state_dict() is {}, and
    load_state_dict() accepts a CUDA checkpoint's scaler state and ignores it.
    """
    kind = _device.device_type()
    named, options = _scaler_kwargs(args, kwargs)
    if named is not None:  # GradScaler("cpu"): a CPU scaler on every machine
        return torch.amp.GradScaler(named, **options)
    if kind == "cuda":
        return torch.amp.GradScaler("cuda", **options)
    if options.get("enabled", True) and amp_dtype(None) != torch.float16:
        options["enabled"] = False
    return torch.amp.GradScaler(kind, **options)


def grad_scaler(enabled: bool = True, **kwargs: Any) -> torch.amp.GradScaler:
    """``GradScaler(enabled=enabled, **kwargs)``: see GradScaler."""
    return GradScaler(enabled=enabled, **kwargs)


def custom_fwd(fwd: Optional[Callable[..., Any]] = None, *,
               cast_inputs: Optional[torch.dtype] = None) -> Any:
    """Twin of torch.cuda.amp.custom_fwd: ``torch.amp.custom_fwd(device_type=<device>)``.

    CUDA: device_type "cuda", cast_inputs unchanged. Elsewhere the resolved device
    type, and cast_inputs=float16 follows autocast's choice (bf16 where used).
    """
    kind = _device.device_type()
    if kind != "cuda" and cast_inputs == torch.float16:
        cast_inputs = amp_dtype(cast_inputs) or torch.float32
    return torch.amp.custom_fwd(fwd, device_type=kind, cast_inputs=cast_inputs)


def custom_bwd(bwd: Optional[Callable[..., Any]] = None) -> Any:
    """Twin of torch.cuda.amp.custom_bwd: ``torch.amp.custom_bwd(device_type=<device>)``."""
    return torch.amp.custom_bwd(bwd, device_type=_device.device_type())


def cuda_amp_autocast(enabled: bool = True, dtype: torch.dtype = torch.float16,
                      cache_enabled: bool = True) -> torch.autocast:
    """The class ``torch.cuda.amp.autocast`` used as a value (``partial(...)``, a
    variable): its parameter order and defaults, then ``autocast`` above.

    CUDA: ``torch.autocast("cuda", dtype=dtype, enabled=enabled,
    cache_enabled=cache_enabled)``, which is what the legacy class constructs.
    """
    return autocast(dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
