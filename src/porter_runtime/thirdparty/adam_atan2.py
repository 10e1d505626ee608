"""Twin of ``adam_atan2.AdamATan2``, the fused CUDA optimizer of the ``adam-atan2`` package.

The package (github.com/imoneoi/adam-atan2, used by HRM) builds a CUDA extension,
``adam_atan2_backend``, that does not build on a Mac. ``porter_runtime.AdamATan2(...)``
returns the package's own optimizer where the original code would have run it (CUDA,
package importable) and the pure-PyTorch optimizer below elsewhere.

The update is the package's kernel (csrc/adam_atan2.cu, ``adam_math``, and the
reference ``_adam_atan2_reference_impl`` in adam_atan2/adam_atan2_test.py), i.e. Adam
with ``atan2`` in place of ``m / (sqrt(v) + eps)`` (Everett et al. 2024, "Scaling
Exponents Across Parameterizations and Optimizers", with a = b = 1: the package has no
``a``/``b`` arguments)::

    step += 1
    p  *= 1 - lr * weight_decay
    m   = lerp(m, g, 1 - beta1);  v = lerp(v, g*g, 1 - beta2)
    p  -= lr * atan2(m / (1 - beta1**step), sqrt(v) / sqrt(1 - beta2**step))

in float32 (float64 for float64 parameters), with the package's defaults (lr=1e-3,
betas=(0.9, 0.999), weight_decay=1e-2) and state layout (``step`` a float32 scalar
tensor, ``exp_avg`` and ``exp_avg_sq`` in the parameter's dtype), so checkpoints move
between the two. One earlier revision of the kernel applied ``1 / (1 - beta1**step)``
outside the atan2; the revision matched here is the one whose test covers float64,
float32, float16 and bfloat16. lucidrains' ``adam_atan2_pytorch`` is pure PyTorch
(with ``a``/``b`` scales) and needs no twin.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Optional

import torch

from .. import _device
from . import libs as _libs


def _package_class() -> Optional[type]:
    """The importable ``adam_atan2.AdamATan2`` to use here, or None.

    On CUDA: whatever the original import would give. Elsewhere only a pure-PyTorch
    module by that name (a vendored copy): the package's kernel needs CUDA tensors.
    """
    if _device.is_cuda():
        return _libs.cuda_attr("adam_atan2", "AdamATan2")
    found = _libs.module("adam_atan2")
    cls = getattr(found, "AdamATan2", None) if found is not None else None
    if cls is None:
        return None
    return None if "adam_atan2_backend" in sys.modules else cls


class AdamATan2(torch.optim.Optimizer):
    """adam_atan2.AdamATan2: the package on CUDA, the same update in torch elsewhere."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        real = _package_class() if cls.__module__ == __name__ else None
        return real(*args, **kwargs) if real is not None else super().__new__(cls)

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 weight_decay: float = 1e-2) -> None:
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")
                _update(p, self._state(p), group)
        return loss

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if len(state) == 0:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state


def _update(p: torch.Tensor, state: dict, group: dict) -> None:
    beta1, beta2 = group["betas"]
    lr, decay = group["lr"], group["weight_decay"]
    state["step"] += 1
    step = float(state["step"])
    bc1_reciprocal = 1 / (1 - beta1 ** step)
    bc2_sqrt = math.sqrt(1 - beta2 ** step)
    math_dtype = torch.float64 if p.dtype == torch.float64 else torch.float32
    w = p.to(math_dtype, copy=True)
    g = p.grad.to(math_dtype)
    m = state["exp_avg"].to(math_dtype, copy=True)
    v = state["exp_avg_sq"].to(math_dtype, copy=True)
    w.mul_(1 - lr * decay)
    m.lerp_(g, 1 - beta1)
    v.lerp_(g * g, 1 - beta2)
    w.sub_(torch.atan2(bc1_reciprocal * m, v.sqrt() / bc2_sqrt), alpha=lr)
    p.copy_(w)
    state["exp_avg"].copy_(m)
    state["exp_avg_sq"].copy_(v)
