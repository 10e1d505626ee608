"""FlexAttention with a backward off CUDA.

``torch.nn.attention.flex_attention.flex_attention`` runs its forward everywhere, but
its eager kernel has no backward on the CPU or MPS ("FlexAttention does not support
backward on CPU"), so a training step that calls it fails off CUDA where inference
passes. :func:`flex_attention_call` takes the function the code calls (torch's, or the
``torch.compile`` of it the code made) and its arguments:

- on CUDA, or where nothing needs a gradient, it calls that function as the code did;
- elsewhere it computes the same attention densely, in ordinary differentiable torch
  ops: torch's own reference implementation of FlexAttention (the ``math`` path the
  kernels are tested against), with the same score modification, block mask (its
  ``mask_mod`` evaluated on every query/key pair), scale and grouped-query heads, so
  autograd gives the backward. Memory is quadratic in the sequence length there, as
  for any attention without a fused kernel.

Calls that ask for the log-sum-exp (``return_lse``, ``return_aux``) are passed to torch
unchanged off CUDA too: torch then says what it cannot do.
"""
from __future__ import annotations

import importlib
import math
from typing import Any, Callable

import torch

from .. import _log

#: flex_attention's parameters after query, key and value, in order.
_PARAMETERS = ("score_mod", "block_mask", "scale", "enable_gqa", "return_lse", "kernel_options")


def _needs_backward(*tensors: torch.Tensor) -> bool:
    """torch's eager kernel refuses any input that requires a gradient, in any grad mode."""
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def flex_attention_call(fn: Callable[..., Any], query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        *args: Any, **kwargs: Any) -> Any:
    """``fn(query, key, value, *args, **kwargs)``: on CUDA exactly that; elsewhere, where a
    gradient is needed, the same attention through torch's differentiable reference."""
    if query.device.type == "cuda" or not _needs_backward(query, key, value):
        return fn(query, key, value, *args, **kwargs)
    options = dict(zip(_PARAMETERS, args))
    options.update(kwargs)
    unknown = set(options) - set(_PARAMETERS) - {"return_aux"}
    if unknown or options.get("return_lse") or options.get("return_aux") is not None:
        return fn(query, key, value, *args, **kwargs)
    _log.info_once("flex_attention:dense",
                   f"porter_runtime: FlexAttention has no backward on {query.device.type}; its training calls "
                   "run torch's dense reference of the same attention (score_mod and block mask applied)")
    return dense_flex_attention(query, key, value, options.get("score_mod"), options.get("block_mask"),
                                options.get("scale"), bool(options.get("enable_gqa", False)))


def dense_flex_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                         score_mod: Any = None, block_mask: Any = None, scale: Any = None,
                         enable_gqa: bool = False) -> torch.Tensor:
    """FlexAttention's result through torch's reference implementation, which autograd
    differentiates (torch._higher_order_ops.flex_attention.math_attention)."""
    frontend = importlib.import_module("torch.nn.attention.flex_attention")
    reference = importlib.import_module("torch._higher_order_ops.flex_attention")
    if enable_gqa and key.size(-3) != query.size(-3):
        if query.size(-3) % key.size(-3):
            raise ValueError(f"Expect number of query heads to be a multiple of kv heads for GQA but got "
                             f"Hq={query.size(-3)} and Hkv={key.size(-3)}.")
        groups = query.size(-3) // key.size(-3)
        key, value = key.repeat_interleave(groups, dim=-3), value.repeat_interleave(groups, dim=-3)
    if score_mod is None:
        score_mod = frontend._identity
    if block_mask is None:
        block_mask = frontend._create_empty_block_mask(query, key)
    if scale is None:
        scale = 1.0 / math.sqrt(query.size(-1))
    out = reference.math_attention(query, key, value, score_mod, block_mask.as_tuple(), scale, {})[0]
    return out.to(query.dtype)
