"""Casts that ported code spells as methods (``x.double()``), kept exact on CUDA."""
from __future__ import annotations

from typing import TypeVar

import torch

from . import _dtypes

T = TypeVar("T")


def double(obj: T) -> T:
    """Twin of ``obj.double()`` for a tensor or a module that goes to the device.

    CUDA, CPU, XPU: ``obj.double()``. MPS, which has no float64: ``obj.float()``,
    which casts the same tensors (floating point only, for modules too), after
    ``supported_dtype`` has warned once that float32 replaces float64 and why.
    """
    if _dtypes.supported_dtype(torch.float64) == torch.float64:
        return obj.double()  # type: ignore[attr-defined]
    return obj.float()  # type: ignore[attr-defined]
