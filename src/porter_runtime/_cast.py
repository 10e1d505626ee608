"""Casts that ported code spells as methods (``x.double()``), kept exact on CUDA."""
from __future__ import annotations

from typing import Any, Optional, TypeVar

import torch

from . import _device, _dtypes, _log

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


def double_here(obj: T) -> T:
    """Twin of ``obj.double()`` where ``obj`` may already be on the device (a loss summed
    for a report, ``(pred == y).double().mean()``).

    ``obj.double()`` on CUDA and for anything that is not an MPS tensor (a CPU tensor
    keeps float64 on a Mac too; a module casts as ``.double()`` does). An MPS tensor,
    which can't hold float64, gets float32 instead, warned once (``supported_dtype``).
    Unlike :func:`double`, which decides by the device the run resolved to (for what is
    about to move there), this asks the object where it is.
    """
    return to_dtype(obj, torch.float64) if _on_mps(obj) else obj.double()  # type: ignore[attr-defined]


def to_dtype(obj: T, dtype: torch.dtype) -> T:
    """Twin of ``obj.to(dtype)`` for a float64 / complex128 ``dtype``, where ``obj`` may
    be on the device (``logits.to(torch.float64)`` in a loss).

    ``obj.to(dtype)`` on CUDA and for anything whose ``device`` is not MPS (a CPU
    tensor keeps float64 on a Mac too). An MPS tensor, which can't hold float64, gets
    ``supported_dtype(dtype, its device)``: float32 / complex64, warned once.
    """
    if _on_mps(obj):
        dtype = _dtypes.supported_dtype(dtype, obj.device)  # type: ignore[attr-defined]
    return obj.to(dtype)  # type: ignore[attr-defined, no-any-return]


def _on_mps(obj: Any) -> bool:
    """Whether ``obj`` is a tensor on MPS (or the emulated device), by its own ``device``."""
    device = getattr(obj, "device", None)
    return isinstance(device, torch.device) and device.type != "cuda" and _device.kind_of(device) == "mps"


def as_tensor(data: Any, dtype: Optional[torch.dtype] = None, device: Any = None) -> torch.Tensor:
    """Twin of ``torch.as_tensor(data, dtype=dtype, device=device)`` for data that may be a
    NumPy (or torch) float64 array going to the device (SAM's point grids).

    The same call wherever the target is not MPS, and wherever a dtype is given. To MPS,
    which can't hold float64, float64 / complex128 data gets ``supported_dtype``:
    float32 / complex64, warned once.
    """
    return torch.as_tensor(data, dtype=_mps_dtype(data, dtype, device), device=device)


def _mps_dtype(data: Any, dtype: Optional[torch.dtype], device: Any) -> Optional[torch.dtype]:
    if dtype is not None or device is None:
        return dtype
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError):
        return dtype
    if target.type == "cuda" or _device.kind_of(target) != "mps":
        return dtype
    kind = str(getattr(data, "dtype", ""))
    wide = {"float64": torch.float64, "torch.float64": torch.float64,
            "complex128": torch.complex128, "torch.complex128": torch.complex128}.get(kind)
    return _dtypes.supported_dtype(wide, target) if wide is not None else dtype


def gradcheck(func: Any, inputs: Any, *args: Any, **kwargs: Any) -> bool:
    """Twin of ``torch.autograd.gradcheck`` for a check whose inputs are on the device.

    Where the resolved device has float64 (CUDA, CPU, XPU): torch's gradcheck, unchanged.
    On MPS, which has none: a numerical gradient check needs float64 (its float32
    finite differences fail the default tolerances), so the inputs are copied to the
    host, float32 ones as float64 (``porter_runtime.double`` left them float32 there),
    each keeping ``requires_grad``, and the check runs on the CPU, with the module's own
    function: an info line says so once.
    """
    return _on_the_host(torch.autograd.gradcheck, func, inputs, args, kwargs)


def gradgradcheck(func: Any, inputs: Any, *args: Any, **kwargs: Any) -> bool:
    """Twin of ``torch.autograd.gradgradcheck``: as :func:`gradcheck`, with its
    ``grad_outputs`` copied the same way."""
    if kwargs.get("grad_outputs") is not None:
        kwargs["grad_outputs"] = _host_inputs(kwargs["grad_outputs"])
    elif args and args[0] is not None and _dtypes.supported_dtype(torch.float64) != torch.float64:
        args = (_host_inputs(args[0]), *args[1:])
    return _on_the_host(torch.autograd.gradgradcheck, func, inputs, args, kwargs)


def _on_the_host(check: Any, func: Any, inputs: Any, args: tuple, kwargs: dict) -> bool:
    if _dtypes.supported_dtype(torch.float64) == torch.float64:
        return bool(check(func, inputs, *args, **kwargs))
    _log.info_once("gradcheck:host", "gradcheck runs on the CPU in float64: the device has no float64")
    return bool(check(func, _host_inputs(inputs), *args, **kwargs))


def _host_inputs(inputs: Any) -> Any:
    if isinstance(inputs, torch.Tensor):
        return _host(inputs)
    if type(inputs) in (tuple, list):
        return type(inputs)(_host_inputs(x) for x in inputs)
    return inputs


def _host(tensor: torch.Tensor) -> torch.Tensor:
    wide = {torch.float32: torch.float64, torch.complex64: torch.complex128}.get(tensor.dtype, tensor.dtype)
    return tensor.detach().to("cpu").to(wide).requires_grad_(tensor.requires_grad)
