"""Compiled CUDA extensions (torch.utils.cpp_extension.load / load_inline) built only
where they can be.

``porter_runtime.build_cuda_extension(load, name=..., sources=[...])`` is the original
call ``load(name=..., sources=[...])`` on CUDA, with the caller's arguments, at the
same moment (import time). Elsewhere nvcc and the CUDA toolkit are missing, the build
would fail, and None is returned: porter uses it only where the module's own code
already takes a PyTorch path for tensors that are not on CUDA.

``porter_runtime.reference_path(kernel_fn, reference_fn, ext)`` wires the PyTorch
reference a module keeps beside its kernel (Deformable-DETR's
``ms_deform_attn_core_pytorch`` beside ``MSDeformAttnFunction``, which calls the compiled
extension): where the extension imported (CUDA), ``kernel_fn`` comes back untouched;
where it did not, calls of ``kernel_fn`` (or ``kernel_fn.apply`` for an autograd
Function) run the reference, given the arguments it names by name.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch


def build_cuda_extension(builder: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``builder(*args, **kwargs)`` when torch sees CUDA, else None (no build attempted)."""
    if torch.cuda.is_available():
        return builder(*args, **kwargs)
    return None


def reference_path(kernel_fn: Any, reference: Callable[..., Any], extension: Any) -> Any:
    """``kernel_fn`` as it is where ``extension`` (the compiled module) imported; else
    ``kernel_fn`` calling ``reference`` with the arguments whose names it takes (an
    autograd Function: its ``apply``, its ``forward``'s names after ``ctx``)."""
    if extension is not None:
        return kernel_fn
    is_function = isinstance(kernel_fn, type) and issubclass(kernel_fn, torch.autograd.Function)
    signature = inspect.signature(kernel_fn.forward if is_function else kernel_fn)
    wanted = set(inspect.signature(reference).parameters)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(None, *args, **kwargs) if is_function else signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return reference(**{name: value for name, value in bound.arguments.items() if name in wanted})

    if is_function:
        kernel_fn.apply = staticmethod(call)  # type: ignore[method-assign]
        return kernel_fn
    return functools.wraps(kernel_fn)(call)
