"""Twin of flash-attn 1.x's module ``flash_attn.flash_attention.FlashAttention``.

``porter_runtime.FlashAttention(...)`` on CUDA, where flash-attn 1.x imports, is its own
class built from the caller's arguments. Everywhere else (flash-attn 2.0 removed the
module, and nothing builds off CUDA) it is the class below, with 1.x's signature and
semantics (flash_attn/flash_attention.py, 1.0.9): no parameters or buffers, so state
dicts agree; ``forward(qkv, key_padding_mask=None, causal=False, cu_seqlens=None,
max_s=None, need_weights=False)`` returns ``(output, None)``; dropout only in training;
a padding mask (True: a token to keep) attends over the kept tokens only and leaves
zeros at padded positions, as 1.x's unpad_input / pad_input do. The attention itself is
the runtime's twins: on CUDA flash-attn 2's functions where they import (1.x's
``flash_attn_unpadded_qkvpacked_func`` is 2.x's ``flash_attn_varlen_qkvpacked_func``),
scaled_dot_product_attention elsewhere. 1.x's ``assert qkv.is_cuda`` and fp16/bf16-only
check are not kept: those are its kernel's limits, not its meaning.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import attention as _attention
from ..thirdparty import libs as _libs


class FlashAttention(nn.Module):
    """Scaled dot-product attention over packed qkv (B, S, 3, H, D), flash-attn 1.x's API."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is FlashAttention:  # the twin itself; a user's subclass keeps its class
            real = _libs.cuda_attr("flash_attn.flash_attention", "FlashAttention")
            if real is not None:
                return real(*args, **kwargs)
        return super().__new__(cls)

    def __init__(self, softmax_scale: Optional[float] = None, attention_dropout: float = 0.0,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.softmax_scale = softmax_scale
        self.dropout_p = attention_dropout

    def forward(self, qkv: torch.Tensor, key_padding_mask: Optional[torch.Tensor] = None,
                causal: bool = False, cu_seqlens: Optional[torch.Tensor] = None,
                max_s: Optional[int] = None, need_weights: bool = False) -> tuple[torch.Tensor, None]:
        assert not need_weights
        dropout_p = self.dropout_p if self.training else 0.0
        options = {"softmax_scale": self.softmax_scale, "causal": causal}
        if cu_seqlens is not None:
            assert max_s is not None
            return _attention.attention_varlen_qkvpacked(qkv, cu_seqlens, max_s, dropout_p, **options), None
        if key_padding_mask is None:
            return _attention.attention_qkvpacked(qkv, dropout_p, **options), None
        return _padded(qkv, key_padding_mask.bool(), dropout_p, options), None


def _padded(qkv: torch.Tensor, keep: torch.Tensor, dropout_p: float, options: dict) -> torch.Tensor:
    """1.x's padded path: the kept tokens of each sequence, packed row by row (unpad_input's
    order), attended as variable-length sequences, then scattered back over zeros."""
    lengths = keep.sum(dim=-1, dtype=torch.int32)
    cu_seqlens = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
    packed = _attention.attention_varlen_qkvpacked(qkv[keep], cu_seqlens, int(lengths.max()), dropout_p,
                                                   **options)
    out = packed.new_zeros(*keep.shape, *packed.shape[1:])
    out[keep] = packed
    return out
