"""Twins of apex's fused optimizers and norms: apex itself on CUDA, exact torch elsewhere.

Constructing ``porter_runtime.FusedAdam(...)`` (or FusedLAMB, FusedLayerNorm,
FusedRMSNorm) on CUDA with apex importable returns apex's own object, built from the
caller's arguments. Everywhere else it returns the class below, which implements the
update / forward that apex documents, with apex's defaults and state layout:

* FusedAdam: apex/optimizers/fused_adam.py and csrc/multi_tensor_adam.cu (fp32 math,
  fp32 ``exp_avg``/``exp_avg_sq``, one ``step`` per param group; ``adam_w_mode=True``
  is decoupled weight decay, ``update = m̂ / (sqrt(v̂) + eps) + wd * p``).
* FusedLAMB: apex/optimizers/fused_lamb.py and csrc/multi_tensor_lamb.cu (global grad
  norm clipping at ``max_grad_norm``, per-tensor trust ratio ``|p| / |update|``).
* FusedLayerNorm / FusedRMSNorm: the non-CUDA branch of apex's own ``forward``
  (apex/normalization/fused_layer_norm.py): ``F.layer_norm`` and ``manual_rms_norm``.
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Iterable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import libs as _libs


def _apex_or_none(cls: type, module: str, args: tuple, kwargs: dict) -> Optional[Any]:
    """apex's ``cls.__name__`` built from the caller's arguments, when it is to be used.

    Only for the twins themselves: a user's subclass keeps its own class.
    """
    if cls.__module__ != __name__:
        return None
    real = _libs.cuda_attr(module, cls.__name__)
    return real(*args, **kwargs) if real is not None else None


class _ApexOptimizer(torch.optim.Optimizer):
    """Shared parts of the fallback optimizers (apex's zero_grad and dtype checks)."""

    _dtypes: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
    set_grad_none: bool = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        real = _apex_or_none(cls, "apex.optimizers", args, kwargs)
        return real if real is not None else super().__new__(cls)

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self.set_grad_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            super().zero_grad(set_to_none)

    def _grads(self, group: dict) -> Iterable[torch.Tensor]:
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError(f"{type(self).__name__} does not support sparse gradients, "
                                   "please consider SparseAdam instead")
            if p.dtype not in self._dtypes:
                raise RuntimeError(f"{type(self).__name__} only support fp16 and fp32.")
            yield p


class FusedAdam(_ApexOptimizer):
    """apex.optimizers.FusedAdam: apex on CUDA, the same update in torch elsewhere."""

    def __init__(self, params: Any, lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 adam_w_mode: bool = True, weight_decay: float = 0.0, amsgrad: bool = False,
                 set_grad_none: bool = True, capturable: bool = False,
                 master_weights: bool = False) -> None:
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        if master_weights:
            raise NotImplementedError("FusedAdam(master_weights=True) needs apex on CUDA")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                        weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.capturable = capturable  # CUDA graphs only: no effect off CUDA

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None, grads: Any = None,
             output_params: Any = None, scale: Any = None, grad_norms: Any = None,
             grad_scaler: Any = None) -> Any:
        """apex's signature: the arguments after ``closure`` are deprecated there and
        rejected with apex's error; ``grad_scaler`` only matters with capturable=True."""
        if any(x is not None for x in (grads, output_params, scale, grad_norms)):
            raise RuntimeError("FusedAdam has been updated.  Simply initialize it identically "
                               "to torch.optim.Adam, and call step() with no arguments.")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            for p in self._grads(group):
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p).float()
                    state["exp_avg_sq"] = torch.zeros_like(p).float()
                self._update(p, state["exp_avg"], state["exp_avg_sq"], group)
        return loss

    def _update(self, p: torch.Tensor, m: torch.Tensor, v: torch.Tensor, group: dict) -> None:
        # multi_tensor_adam.cu, AdamFunctor: everything in float32.
        beta1, beta2 = group["betas"]
        lr, eps, decay = group["lr"], group["eps"], group["weight_decay"]
        step = group["step"]
        bc1, bc2 = (1 - beta1 ** step, 1 - beta2 ** step) if group["bias_correction"] else (1, 1)
        g, w = p.grad.float(), p.float()
        if self.adam_w_mode == 0:  # L2: the decay joins the gradient
            g = g + decay * w
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        update = (m / bc1) / ((v / bc2).sqrt() + eps)
        if self.adam_w_mode == 1:  # decoupled weight decay (AdamW)
            update = update + decay * w
        p.copy_(w - lr * update)


class FusedLAMB(_ApexOptimizer):
    """apex.optimizers.FusedLAMB: apex on CUDA, the same update in torch elsewhere.

    Like apex's kernel, ``step`` leaves each parameter's update in ``p.grad``.
    """

    _dtypes = (torch.float16, torch.float32)

    def __init__(self, params: Any, lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, amsgrad: bool = False, adam_w_mode: bool = True,
                 grad_averaging: bool = True, set_grad_none: bool = True,
                 max_grad_norm: float = 1.0, use_nvlamb: bool = False) -> None:
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                        weight_decay=weight_decay, grad_averaging=grad_averaging,
                        max_grad_norm=max_grad_norm)
        super().__init__(params, defaults)
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.use_nvlamb = use_nvlamb

    def _global_grad_norm(self) -> torch.Tensor:
        norms = [p.grad.float().norm() for g in self.param_groups for p in self._grads(g)]
        if not norms:
            return torch.zeros(())
        return torch.stack(norms).norm()

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        norm = float(self._global_grad_norm())
        limit = self.defaults["max_grad_norm"]
        clip = norm / limit if norm > limit else 1.0  # LAMBStage1Functor
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            for p in self._grads(group):
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                self._update(p, state, group, clip)
        return loss

    def _update(self, p: torch.Tensor, state: dict, group: dict, clip: float) -> None:
        beta1, beta2 = group["betas"]
        decay, eps, step = group["weight_decay"], group["eps"], group["step"]
        beta3 = 1 - beta1 if group["grad_averaging"] else 1.0
        bc1, bc2 = (1 - beta1 ** step, 1 - beta2 ** step) if group["bias_correction"] else (1, 1)
        w = p.float()
        param_norm = w.norm()  # taken before the update, as apex does
        g = p.grad.float() / clip
        if self.adam_w_mode == 0 and decay != 0:
            g = g + decay * w
        m = state["exp_avg"].float().mul_(beta1).add_(g, alpha=beta3)
        v = state["exp_avg_sq"].float().mul_(beta2).addcmul_(g, g, value=1 - beta2)
        update = (m / bc1) / ((v / bc2).sqrt() + eps)
        if self.adam_w_mode == 1 and decay != 0:
            update = update + decay * w
        state["exp_avg"].copy_(m)
        state["exp_avg_sq"].copy_(v)
        p.grad.copy_(update)  # apex stores the update in the gradient buffer
        ratio = group["lr"]
        if self.use_nvlamb or decay != 0:  # LAMBStage2Functor
            update_norm = p.grad.float().norm()
            if update_norm != 0 and param_norm != 0:
                ratio = group["lr"] * float(param_norm / update_norm)
        p.copy_(w - ratio * p.grad.float())


def _shape(normalized_shape: Any) -> torch.Size:
    if isinstance(normalized_shape, numbers.Integral):
        normalized_shape = (normalized_shape,)
    return torch.Size(normalized_shape)


class _ApexNorm(nn.Module):
    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        real = _apex_or_none(cls, "apex.normalization", args, kwargs)
        return real if real is not None else super().__new__(cls)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class FusedLayerNorm(_ApexNorm):
    """apex.normalization.FusedLayerNorm: apex on CUDA; elsewhere F.layer_norm, which is
    what apex's own forward computes for a non-CUDA input. Same parameters and state."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True,
                 memory_efficient: bool = False) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.memory_efficient = memory_efficient
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape))
            self.bias = nn.Parameter(torch.zeros(self.normalized_shape))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


def manual_rms_norm(input: torch.Tensor, normalized_shape: torch.Size,
                    weight: Optional[torch.Tensor], eps: float) -> torch.Tensor:
    """apex's reference RMSNorm (its non-CUDA path): float32 statistics, weight's dtype."""
    dims = tuple(range(-1, -len(normalized_shape) - 1, -1))
    variance = input.to(torch.float32).pow(2).mean(dims, keepdim=True)
    input = input * torch.rsqrt(variance + eps)
    if weight is None:
        return input
    if weight.dtype in (torch.float16, torch.bfloat16):
        input = input.to(weight.dtype)
    return weight * input


class FusedRMSNorm(_ApexNorm):
    """apex.normalization.FusedRMSNorm: apex on CUDA; elsewhere apex's manual_rms_norm
    (y = x / sqrt(mean(x²) + eps) * weight). Same parameters and state."""

    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True,
                 memory_efficient: bool = False) -> None:
        super().__init__()
        self.normalized_shape = _shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.memory_efficient = memory_efficient
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        else:
            self.register_parameter("weight", None)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return manual_rms_norm(input, self.normalized_shape, self.weight, self.eps)
