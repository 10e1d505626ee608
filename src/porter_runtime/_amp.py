"""Mixed precision: autocast, GradScaler and custom_fwd/custom_bwd twins.

CUDA: exactly torch.amp with device_type "cuda" (fp16 by default, real scaler).
MPS / CPU / XPU: CUDA's float16 with a real scaler wherever torch has one for the
device (CPU; MPS from torch 2.8): the autocast output dtype is what CUDA code
relies on (``out.cpu().numpy()`` has no bfloat16). Only where float16 has no
scaler (MPS before torch 2.8) bfloat16 stands in, with a disabled scaler, and
where bf16 is missing too autocast is off. PORTER_AMP_DTYPE=bfloat16 asks for
bf16 off CUDA (faster on CPUs without native float16 arithmetic, where float16
autocast is emulated). Every change from CUDA's dtype is announced by one warning.
A scaler the runtime disabled still answers what code reads from an enabled one
(state_dict() entries, the getters) and loads a CUDA scaler's state.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional

import torch

from . import _compat, _device, _dtypes, _log

_SCALER_ARGS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")


def _scaler_exists(kind: str) -> bool:
    # GradScaler("mps") needs the MPS AMP kernels of torch 2.8 (facts §3).
    return kind != "mps" or _compat.at_least(2, 8)


def _half_plan(kind: str) -> Optional[torch.dtype]:
    """The dtype that replaces CUDA's float16 on ``kind``; None means autocast off."""
    if _wants_bf16() and _dtypes.is_bf16_supported():
        _log.warn_once("amp:bf16", f"autocast uses torch.bfloat16 on {kind} instead of CUDA's "
                       "torch.float16, as PORTER_AMP_DTYPE asks (the GradScaler is a disabled "
                       "passthrough: bfloat16 needs no loss scaling)")
        return torch.bfloat16
    if _scaler_exists(kind):
        return torch.float16
    if _dtypes.is_bf16_supported():
        _log.warn_once("amp:bf16", f"autocast uses torch.bfloat16 on {kind} instead of CUDA's "
                       f"torch.float16: torch {torch.__version__} has no GradScaler for {kind} "
                       "(needs 2.8) and float16 needs loss scaling, bfloat16 does not (the "
                       "GradScaler is a disabled passthrough)")
        return torch.bfloat16
    _log.warn_once("amp:off", f"autocast is disabled on {kind}: no bfloat16 here and torch "
                   f"{torch.__version__} has no GradScaler for float16 on {kind}")
    return None


def _wants_bf16() -> bool:
    return os.environ.get("PORTER_AMP_DTYPE", "").strip().lower() in ("bfloat16", "bf16")


def amp_dtype(dtype: Optional[torch.dtype] = None) -> Optional[torch.dtype]:
    """The autocast dtype used for a request of ``dtype`` (None: CUDA's default fp16).

    CUDA: ``dtype`` unchanged. Elsewhere: float16/None -> float16 where a scaler
    exists for it, else bf16 (or None meaning autocast off), any other dtype unchanged.
    """
    kind = _device.device_type()
    if kind == "cuda" or dtype not in (None, torch.float16):
        return dtype
    return _half_plan(kind)


def autocast(dtype: Optional[torch.dtype] = None, enabled: bool = True,
             cache_enabled: Optional[bool] = None) -> torch.autocast:
    """Twin of torch.cuda.amp.autocast / torch.autocast("cuda"); context manager and decorator.

    CUDA: ``torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=...)``.
    MPS / CPU: ``torch.autocast(<device>, ...)`` with CUDA's fp16 where the device
    has a scaler for it, bf16 in its place where not (see module doc); other dtypes
    are passed through and torch validates them.
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


#: An enabled torch.amp.GradScaler's state_dict() entries and their defaults.
_SCALER_STATE = {"scale": 2.0 ** 16, "growth_factor": 2.0, "backoff_factor": 0.5,
                 "growth_interval": 2000, "_growth_tracker": 0}


class KeptState:
    """For a scaler class: when the runtime (not the caller) disabled the scaler, it
    still answers what code reads from an enabled one.

    torch's disabled scaler has ``state_dict() == {}`` (``["scale"]`` raises
    KeyError, and an enabled CUDA scaler refuses to load it) and no
    ``get_growth_factor()``. Here ``state_dict()`` has the enabled scaler's entries,
    holding the values the scaler was made with or last loaded (a disabled scaler
    never updates them, so a checkpoint taken back to CUDA resumes from them), the
    getters return them, and ``load_state_dict`` takes a CUDA scaler's state.
    ``get_scale()`` stays torch's 1.0: the loss really is not scaled.
    """

    _porter_kept: Optional[dict[str, Any]] = None

    def keep_state(self, options: dict[str, Any]) -> "KeptState":
        named = {**options, "scale": options.get("init_scale", _SCALER_STATE["scale"])}
        self._porter_kept = {key: named.get(key, default) for key, default in _SCALER_STATE.items()}
        return self

    def state_dict(self) -> dict[str, Any]:
        kept = self._porter_kept
        return dict(kept) if kept is not None else super().state_dict()  # type: ignore[misc]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        kept = self._porter_kept
        if kept is None:
            return super().load_state_dict(state_dict)  # type: ignore[misc]
        kept.update((key, state_dict[key]) for key in kept if key in state_dict)
        return None

    def get_growth_factor(self) -> float:
        kept = self._porter_kept
        return kept["growth_factor"] if kept is not None else super().get_growth_factor()  # type: ignore[misc]

    def get_backoff_factor(self) -> float:
        kept = self._porter_kept
        return kept["backoff_factor"] if kept is not None else super().get_backoff_factor()  # type: ignore[misc]

    def get_growth_interval(self) -> int:
        kept = self._porter_kept
        return kept["growth_interval"] if kept is not None else super().get_growth_interval()  # type: ignore[misc]


def kept_state(base: type) -> type:
    """``base`` (torch.amp.GradScaler, ShardedGradScaler) with KeptState: what the
    runtime returns where it disables a scaler the caller asked for. Made when first
    needed, from the class torch has then, so nothing is subclassed at import."""
    made = _KEPT.get(base)
    if made is None:
        made = _KEPT[base] = type(f"KeptState{base.__name__}", (KeptState, base), {})
    return made


_KEPT: dict = {}


def disabled_by_runtime(options: dict[str, Any]) -> bool:
    """True (and ``options["enabled"]`` set False) where the caller asked for an
    enabled scaler but autocast does not use float16 here."""
    if not options.get("enabled", True) or amp_dtype(None) == torch.float16:
        return False
    options["enabled"] = False
    return True


def GradScaler(*args: Any, **kwargs: Any) -> torch.amp.GradScaler:
    """Twin of torch.cuda.amp.GradScaler(...) and torch.amp.GradScaler("cuda", ...).

    CUDA: ``torch.amp.GradScaler("cuda", ...)`` with the same arguments
    (``torch.cuda.amp.GradScaler(...)`` under a torch older than 2.3, which has no
    ``torch.amp.GradScaler``: what the original built there). A scaler
    for another named device (``GradScaler("cpu")``) is that device's on every machine.
    MPS / CPU: the device's real scaler where autocast uses fp16 there (CPU; MPS
    from torch 2.8). Where autocast uses bf16 instead, a disabled
    ``kept_state(torch.amp.GradScaler)(<device>)``: scale() returns the loss unchanged, step()
    calls optimizer.step(), and state_dict(), the getters and load_state_dict()
    behave as an enabled scaler's (KeptState). A scaler the caller disabled
    (``enabled=False``) is torch's, as on CUDA.
    """
    kind = _device.device_type()
    named, options = _scaler_kwargs(args, kwargs)
    if named is not None:  # GradScaler("cpu"): a CPU scaler on every machine
        return torch.amp.GradScaler(named, **options)
    if kind == "cuda":
        if not hasattr(torch.amp, "GradScaler"):  # torch < 2.3, as a repository may pin on CUDA
            return torch.cuda.amp.GradScaler(**options)
        return torch.amp.GradScaler("cuda", **options)
    if disabled_by_runtime(options):
        return kept_state(torch.amp.GradScaler)(kind, **options).keep_state(options)
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
