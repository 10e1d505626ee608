"""Twin of ``xformers.ops.memory_efficient_attention`` (layout BMHK).

CUDA with xformers importable: xformers' own function, called with the caller's
arguments (defaults left out). Elsewhere: xformers' documented semantics,
``softmax(q @ kᵀ * scale + bias)``, dropout ``p``, ``@ v``, computed with SDPA:

* no bias → plain attention; ``LowerTriangularMask`` → causal aligned top-left;
  ``LowerTriangularFromBottomRightMask`` → causal aligned bottom-right (flash-attn's);
* ``BlockDiagonalMask`` / ``...CausalMask`` / ``...CausalFromBottomRightMask`` (batch of
  one, packed sequences) → each sequence attends on its own, as ``attention_varlen``;
* a tensor bias, or any other bias object (through its ``materialize``), is added to
  the scores as SDPA's float ``attn_mask``.

Inputs may be 3-D ``[B, M, K]`` (one head), 4-D ``[B, M, H, K]`` or 5-D
``[B, M, G, H, K]`` (groups of heads), like xformers.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F

from ..attn import core as _attn_core
from . import libs as _libs

#: Block-diagonal biases: causal or not; top-left ones agree with flash-attn's
#: bottom-right masks only when every block is square (else: materialised mask).
_BLOCKS = {"BlockDiagonalMask": False, "BlockDiagonalCausalFromBottomRightMask": True,
           "BlockDiagonalCausalMask": True, "BlockDiagonalCausalLocalAttentionMask": True,
           "BlockDiagonalCausalLocalAttentionFromBottomRightMask": True}
_TOP_LEFT = {"BlockDiagonalCausalMask", "BlockDiagonalCausalLocalAttentionMask"}


def memory_efficient_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                               attn_bias: Any = None, p: float = 0.0,
                               scale: Optional[float] = None, *, op: Any = None,
                               output_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """xformers.ops.memory_efficient_attention on CUDA; its semantics with SDPA elsewhere.

    ``op`` only picks xformers' kernel; it has no meaning off CUDA.
    """
    real = _libs.cuda_attr("xformers.ops", "memory_efficient_attention")
    if real is not None:
        given = {"attn_bias": attn_bias, "scale": scale, "op": op, "output_dtype": output_dtype}
        kwargs = {k: v for k, v in given.items() if v is not None}
        if p != 0.0:
            kwargs["p"] = p
        return real(query, key, value, **kwargs)
    out = _fallback(query, key, value, attn_bias, p, scale)
    return out if output_dtype is None else out.to(output_dtype)


def _fallback(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Any, p: float,
              scale: Optional[float]) -> torch.Tensor:
    if q.dim() == 3:  # [B, M, K]: one head
        return _fallback(q[:, :, None], k[:, :, None], v[:, :, None], bias, p, scale)[:, :, 0]
    if q.dim() == 5:  # [B, M, G, H, K]: fold the groups into the heads
        b, m, g, h, _ = q.shape
        if isinstance(bias, torch.Tensor) and bias.dim() == 5:
            bias = bias.flatten(1, 2)
        out = _fallback(q.flatten(2, 3), k.flatten(2, 3), v.flatten(2, 3), bias, p, scale)
        return out.reshape(b, m, g, h, out.shape[-1])
    return _bmhk(q, k, v, bias, p, scale)


def _bmhk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Any, p: float,
          scale: Optional[float]) -> torch.Tensor:
    options = {"dropout_p": p, "softmax_scale": scale}
    kind = type(bias).__name__
    if bias is None:
        return _attn_core.dense(q, k, v, **options)
    if kind == "LowerTriangularFromBottomRightMask" or \
            (kind == "LowerTriangularMask" and q.shape[1] == k.shape[1]):
        return _attn_core.dense(q, k, v, causal=True, **options)
    if kind == "LowerTriangularFromBottomRightLocalAttentionMask":
        return _attn_core.dense(q, k, v, causal=True, window_size=(bias._window_size - 1, 0),
                                **options)
    if kind == "LocalAttentionFromBottomRightMask":
        return _attn_core.dense(q, k, v, window_size=(bias.window_left, bias.window_right),
                                **options)
    if kind in _BLOCKS and q.shape[0] == 1 and _block_aligned(bias, kind):
        window = getattr(bias, "_window_size", 0)
        return _blocks(q, k, v, bias, causal=_BLOCKS[kind],
                       window_size=(window - 1, 0) if window > 0 else (-1, -1), **options)
    return _with_mask(q, k, v, _as_mask(bias, q, k), p, scale)


def _starts(info: Any) -> list[int]:
    found = getattr(info, "seqstart_py", None)
    return list(found if found is not None else info.cu_seqlen_py)


def _block_aligned(bias: Any, kind: str) -> bool:
    """Top-left and bottom-right causal agree when every block is square."""
    if kind not in _TOP_LEFT:
        return True
    qs, ks = _starts(bias.q_seqinfo), _starts(bias.k_seqinfo)
    return [b - a for a, b in zip(qs, qs[1:])] == [b - a for a, b in zip(ks, ks[1:])]


def _blocks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Any, *, causal: bool,
            **options: Any) -> torch.Tensor:
    cu_q = torch.tensor(_starts(bias.q_seqinfo), dtype=torch.int32)
    cu_k = torch.tensor(_starts(bias.k_seqinfo), dtype=torch.int32)
    return _attn_core.varlen(q[0], k[0], v[0], cu_q, cu_k, None, causal=causal, **options)[None]


def _as_mask(bias: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    if isinstance(bias, torch.Tensor):
        return bias
    shape = (q.shape[0], q.shape[2], q.shape[1], k.shape[1])
    return bias.materialize(shape, dtype=q.dtype, device=q.device)


def _with_mask(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
               p: float, scale: Optional[float]) -> torch.Tensor:
    unread = _unread_keys(mask)
    if unread is not None:  # never read, as xformers' kernels never read them: a KV cache's
        k, v = k.masked_fill(unread, 0), v.masked_fill(unread, 0)  # padding may hold NaN
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         attn_mask=mask, dropout_p=p, scale=scale)
    return out.transpose(1, 2).contiguous()


def _unread_keys(mask: torch.Tensor) -> Optional[torch.Tensor]:
    """Where ``mask`` ([..., Mq, Mk], float -inf or bool False: masked) masks a key for
    every query, a [B or 1, Mk, H or 1, 1] selector of those keys; None where none is.
    Attention gives such a key a weight of exactly 0, but an -inf added to a NaN score (a
    slot of ``torch.empty`` memory) is NaN: mistral-inference's padded KV cache, read
    with xformers' padded-keys mask, gave NaN logits (blind round 12)."""
    masked = ~mask if mask.dtype == torch.bool else torch.isneginf(mask)
    unread = masked.all(dim=-2)
    if not bool(unread.any()):
        return None
    while unread.dim() < 3:
        unread = unread.unsqueeze(0)
    return unread.transpose(-1, -2)[..., None] if unread.dim() == 3 else None

