"""Dtypes the device can hold, changed only with a one-time warning (STYLE rule 10)."""
from __future__ import annotations

from typing import Optional, Union

import torch

from . import _compat, _device, _log

# What MPS cannot hold, what to use instead, and why (facts §2).
_MPS_REPLACEMENTS = {
    torch.float64: (torch.float32, "the MPS framework has no float64"),
    torch.complex128: (torch.complex64, "the MPS framework has no complex128"),
}


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether bfloat16 works on the resolved device.

    CUDA: ``torch.cuda.is_bf16_supported()`` (arguments forwarded).
    MPS: True from torch 2.9, before that only on macOS 14 or newer.
    CPU: True (CPU kernels and CPU autocast support bf16). XPU: torch.xpu's answer.
    """
    kind = _device.device_type()
    if kind == "cuda":
        if including_emulation:
            return bool(torch.cuda.is_bf16_supported())
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    if kind == "mps":
        return _compat.mps_bf16_supported()
    if kind == "xpu":
        return bool(torch.xpu.is_bf16_supported())
    return True


def supported_dtype(dtype: torch.dtype,
                    device: Union[None, str, torch.device] = None) -> torch.dtype:
    """The dtype to use for ``dtype`` on ``device`` (default: the resolved device).

    CUDA, CPU, XPU: ``dtype`` unchanged. MPS: float64 -> float32, complex128 ->
    complex64, and bfloat16 -> float32 where MPS lacks bf16 (macOS < 14 with torch
    < 2.9); float32 rather than float16 because it keeps bf16's exponent range.
    Each change warns once, naming the dtype and the reason.
    """
    target = _device.device(device)
    if _device.kind_of(target) != "mps":
        return dtype
    if dtype in _MPS_REPLACEMENTS:
        replacement, why = _MPS_REPLACEMENTS[dtype]
    elif dtype == torch.bfloat16 and not _compat.mps_bf16_supported():
        replacement, why = torch.float32, "MPS bfloat16 needs macOS 14 or torch >= 2.9"
    else:
        return dtype
    _log.warn_once(f"dtype:{dtype}", f"using {replacement} instead of {dtype} on mps: {why}")
    return replacement


def mps_safe(tensor: torch.Tensor, target: torch.device) -> Optional[torch.dtype]:
    """The dtype a tensor must be cast to before moving to ``target``, or None."""
    if _device.kind_of(target) != "mps" or tensor.dtype not in _MPS_REPLACEMENTS:
        return None
    return supported_dtype(tensor.dtype, target)
