"""flash-attn's documented semantics, materialised naively (test reference only).

From flash_attn_interface.py's docstrings: q (B,Sq,H,D), k/v (B,Sk,Hk,D), query
head h reads kv head h // (H // Hk); causal and window masks are aligned to the
bottom-right corner: query i sees key j iff
``i + Sk - Sq - left <= j <= i + Sk - Sq + right`` (-1 = unbounded; causal means
right = 0); ALiBi adds ``-slope * |i + Sk - Sq - j|`` to the scores; softcap maps
scores s to ``softcap * tanh(s / softcap)`` before bias and masks; a query row
that sees no key outputs 0. Everything is materialised in float64.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              softmax_scale: Optional[float] = None, window_size: Sequence[int] = (-1, -1),
              alibi_slopes: Optional[torch.Tensor] = None, softcap: float = 0.0,
              compute: torch.dtype = torch.float64) -> torch.Tensor:
    """``compute=torch.float32`` gives the fp32-accumulating reference (what an exact
    kernel that accumulates in float32 computes) for precision comparisons."""
    B, Sq, H, D = q.shape
    Sk, Hk = k.shape[1], k.shape[2]
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    k, v = k.repeat_interleave(H // Hk, dim=2), v.repeat_interleave(H // Hk, dim=2)
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(D)
    left, right = window_size
    if causal:
        right = 0
    i = torch.arange(Sq)[:, None] + Sk - Sq
    j = torch.arange(Sk)[None, :]
    visible = torch.ones(Sq, Sk, dtype=torch.bool)
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi_slopes is not None:
        slopes = alibi_slopes.to(compute).reshape(-1, H, 1, 1)
        scores = scores - slopes * (i - j).abs().to(compute)
    has_key = visible.any(-1)[:, None]
    # Empty rows get finite scores (then zero weight) so that gradients stay finite.
    scores = scores.masked_fill(~visible, float("-inf")).masked_fill(~has_key, 0.0)
    probs = torch.softmax(scores, dim=-1) * has_key
    return torch.einsum("bhij,bjhd->bihd", probs, v)
