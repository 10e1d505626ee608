"""Compiled CUDA extensions (torch.utils.cpp_extension.load / load_inline) built only
where they can be.

``porter_runtime.build_cuda_extension(load, name=..., sources=[...])`` is the original
call ``load(name=..., sources=[...])`` on CUDA, with the caller's arguments, at the
same moment (import time). Elsewhere nvcc and the CUDA toolkit are missing, the build
would fail, and None is returned: porter uses it only where the module's own code
already takes a PyTorch path for tensors that are not on CUDA.
"""
from __future__ import annotations

from typing import Any, Callable

import torch


def build_cuda_extension(builder: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``builder(*args, **kwargs)`` when torch sees CUDA, else None (no build attempted)."""
    if torch.cuda.is_available():
        return builder(*args, **kwargs)
    return None
