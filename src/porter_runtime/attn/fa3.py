"""FlashAttention-3 (``flash_attn_interface.flash_attn_func``) and the FA3 → FA2 chain.

Research code imports FlashAttention-3 first and falls back to FlashAttention-2::

    try:
        from flash_attn_interface import flash_attn_func   # FA3 (Hopper)
    except ImportError:
        from flash_attn import flash_attn_func             # FA2

``fa3_attention`` makes the same choice in the same order: on CUDA with
flash_attn_interface importable, FA3's own function runs with the caller's arguments
and its result is returned as FA3 returns it (some releases return
``(out, softmax_lse)``; callers check ``isinstance(out, tuple)``). Otherwise
``porter_runtime.attention`` runs: FlashAttention-2 on CUDA where it imports,
scaled_dot_product_attention with flash-attn's semantics elsewhere (a tensor).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from . import attention as _attention
from ..thirdparty import libs as _thirdparty_libs

_DEFAULTS = {"softmax_scale": None, "causal": False, "window_size": (-1, -1), "softcap": 0.0,
             "deterministic": False}


def fa3_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  softmax_scale: Optional[float] = None, causal: bool = False,
                  window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                  deterministic: bool = False) -> Any:
    """Twin of FlashAttention-3's flash_attn_func (no dropout in FA3): q (B,Sq,H,D),
    k/v (B,Sk,Hk,D). CUDA + flash_attn_interface: that function, with the options
    the caller changed. Else porter_runtime.attention with the same options."""
    options = {"softmax_scale": softmax_scale, "causal": causal, "window_size": tuple(window_size),
               "softcap": softcap, "deterministic": deterministic}
    fa3 = _thirdparty_libs.cuda_attr("flash_attn_interface", "flash_attn_func")
    if fa3 is not None:
        # only what the caller changed: FA3 releases differ in the keywords they know
        return fa3(q, k, v, **{name: value for name, value in options.items() if value != _DEFAULTS[name]})
    return _attention.attention(q, k, v, **options)
