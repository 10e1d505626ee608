"""flash-attn semantics computed with scaled_dot_product_attention.

Layout is flash-attn's (batch, seqlen, heads, headdim). Masks are aligned
bottom-right: with ``off = Sk - Sq`` query i sees key j when
``i + off - left <= j <= i + off + right`` (-1 = unbounded, causal => right = 0).
ALiBi adds ``-slope * |i + off - j|``. Rows that see no key output 0.

The fused SDPA path (no mask; ``is_causal`` only when Sq == Sk) is used whenever
the arguments allow; otherwise a mask is built, row-chunked so that a float
(ALiBi) mask never exceeds _MASK_BUDGET bytes, and never combined with is_causal.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import torch
import torch.nn.functional as F

from . import _compat

_MASK_BUDGET = 64 * 2**20  # bytes of mask (or scores, on the manual path) per chunk


@dataclass(frozen=True)
class Plan:
    """The masking geometry of one (Sq, Sk) attention call."""

    sq: int
    sk: int
    left: int
    right: int
    slopes: Optional[torch.Tensor]  # (B or 1, H, 1, 1) float32

    @property
    def off(self) -> int:
        return self.sk - self.sq

    @property
    def left_open(self) -> bool:  # every key left of the diagonal is visible
        return self.left < 0 or self.sq - 1 + self.off - self.left <= 0

    @property
    def right_open(self) -> bool:  # every key right of the diagonal is visible
        return self.right < 0 or self.off + self.right >= self.sk - 1

    @property
    def windowed(self) -> bool:
        return not (self.left_open and self.right_open)

    @property
    def plain_causal(self) -> bool:  # exactly SDPA's top-left is_causal
        return self.off == 0 and self.right == 0 and self.left_open

    def keep(self, start: int, stop: int, device: torch.device) -> Optional[torch.Tensor]:
        """(rows, Sk) bool mask of visible keys for query rows [start, stop)."""
        if not self.windowed:
            return None
        i = torch.arange(start, stop, device=device)[:, None] + self.off
        j = torch.arange(self.sk, device=device)[None, :]
        keep = torch.ones(stop - start, self.sk, dtype=torch.bool, device=device)
        if not self.left_open:
            keep &= j >= i - self.left
        if not self.right_open:
            keep &= j <= i + self.right
        return keep

    def bias(self, start: int, stop: int, device: torch.device) -> Optional[torch.Tensor]:
        """(B or 1, H, rows, Sk) float32 ALiBi bias for query rows [start, stop)."""
        if self.slopes is None:
            return None
        i = torch.arange(start, stop, device=device)[:, None] + self.off
        j = torch.arange(self.sk, device=device)[None, :]
        return -self.slopes * (i - j).abs().to(torch.float32)


def make_plan(q: torch.Tensor, k: torch.Tensor, causal: bool, window_size: Sequence[int],
              alibi_slopes: Optional[torch.Tensor]) -> Plan:
    left, right = (int(w) for w in window_size)
    if causal:
        right = 0
    slopes = None
    if alibi_slopes is not None:
        s = alibi_slopes.to(device=q.device, dtype=torch.float32)
        slopes = (s if s.dim() == 2 else s[None]).reshape(-1, q.shape[2], 1, 1)
    return Plan(q.shape[1], k.shape[1], left, right, slopes)


def _gqa_by_repeat(device: torch.device) -> bool:
    # enable_gqa exists from torch 2.5; MPS GQA aborts the process before 2.7 (facts §4).
    return not _compat.at_least(2, 5) or (device.type == "mps" and not _compat.at_least(2, 7))


def _heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, repeat: bool
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """(B,H,S,D) views of q, k, v and whether SDPA must be told enable_gqa."""
    groups = q.shape[2] // k.shape[2]
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if groups == 1:
        return qh, kh, vh, False
    if repeat:
        return qh, kh.repeat_interleave(groups, 1), vh.repeat_interleave(groups, 1), False
    return qh, kh, vh, True


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
          is_causal: bool, dropout_p: float, scale: Optional[float]) -> torch.Tensor:
    qh, kh, vh, gqa = _heads(q, k, v, _gqa_by_repeat(q.device))
    extra = {"enable_gqa": True} if gqa else {}
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, dropout_p=dropout_p,
                                         is_causal=is_causal, scale=scale, **extra)
    return out.transpose(1, 2)


def _row_chunks(plan: Plan, per_row_bytes: int) -> Iterator[tuple[int, int]]:
    rows = max(1, _MASK_BUDGET // max(per_row_bytes, 1))
    for start in range(0, plan.sq, rows):
        yield start, min(start + rows, plan.sq)


def _visible(keep: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Unmask rows that see no key (SDPA gives NaN for them on MPS) and return
    (keep, rows_with_keys) so that those rows can be zeroed afterwards."""
    if keep is None:
        return None, None
    rows_ok = keep.any(-1)
    if bool(rows_ok.all()):
        return keep, None
    return keep | ~rows_ok[:, None], rows_ok


def _zero_empty(out: torch.Tensor, rows_ok: Optional[torch.Tensor]) -> torch.Tensor:
    if rows_ok is None:
        return out
    return out.masked_fill(~rows_ok[None, :, None, None], 0.0)


def _masked_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan, start: int,
                 stop: int, dropout_p: float, scale: Optional[float]) -> torch.Tensor:
    keep, rows_ok = _visible(plan.keep(start, stop, q.device))
    bias = plan.bias(start, stop, q.device)
    mask: Optional[torch.Tensor] = keep
    if bias is not None:
        bias = bias if keep is None else bias.masked_fill(~keep, float("-inf"))
        mask = bias.to(q.dtype)  # SDPA wants a float mask in the query's dtype
    out = _sdpa(q[:, start:stop], k, v, mask, False, dropout_p, scale)
    return _zero_empty(out, rows_ok)


def _masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan,
            dropout_p: float, scale: Optional[float]) -> torch.Tensor:
    heads = q.shape[2] * (plan.slopes.shape[0] if plan.slopes is not None else 0)
    per_row = plan.sk * (4 * heads if heads else 1)
    parts = [_masked_rows(q, k, v, plan, a, b, dropout_p, scale)
             for a, b in _row_chunks(plan, per_row)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _manual_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan, start: int,
                 stop: int, dropout_p: float, scale: float, softcap: float) -> torch.Tensor:
    qh, kh, vh, _ = _heads(q[:, start:stop], k, v, repeat=True)
    scores = torch.matmul(qh, kh.transpose(-1, -2)).float() * scale
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    bias = plan.bias(start, stop, q.device)
    if bias is not None:
        scores = scores + bias
    keep, rows_ok = _visible(plan.keep(start, stop, q.device))
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    out = torch.matmul(probs.to(vh.dtype), vh).transpose(1, 2)
    return _zero_empty(out, rows_ok)


def _manual(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan, dropout_p: float,
            scale: float, softcap: float) -> torch.Tensor:
    """softcap has no SDPA equivalent: matmul, cap, mask, softmax in float32, matmul."""
    per_row = q.shape[0] * q.shape[2] * plan.sk * 4
    parts = [_manual_rows(q, k, v, plan, a, b, dropout_p, scale, softcap)
             for a, b in _row_chunks(plan, per_row)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("attention expects (batch, seqlen, heads, headdim) tensors, got "
                         f"q{tuple(q.shape)} k{tuple(k.shape)} v{tuple(v.shape)}")
    if k.shape[2] == 0 or q.shape[2] % k.shape[2] or k.shape[2] != v.shape[2]:
        raise ValueError(f"query heads ({q.shape[2]}) must be a multiple of key/value heads "
                         f"({k.shape[2]}, {v.shape[2]})")


def dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, dropout_p: float = 0.0,
          softmax_scale: Optional[float] = None, causal: bool = False,
          window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
          alibi_slopes: Optional[torch.Tensor] = None) -> torch.Tensor:
    """flash_attn_func's result, computed with SDPA (see the module doc)."""
    _check(q, k, v)
    if k.shape[1] == 0:  # no key at all: every row is empty, flash-attn returns zeros
        return q.new_zeros(*q.shape[:3], v.shape[-1])
    plan = make_plan(q, k, causal, window_size, alibi_slopes)
    if softcap > 0:
        scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
        out = _manual(q, k, v, plan, dropout_p, scale, softcap)
    elif plan.slopes is None and not plan.windowed:
        out = _sdpa(q, k, v, None, False, dropout_p, softmax_scale)
    elif plan.slopes is None and plan.plain_causal:
        out = _sdpa(q, k, v, None, True, dropout_p, softmax_scale)
    else:
        out = _masked(q, k, v, plan, dropout_p, softmax_scale)
    return out.contiguous()  # flash-attn returns contiguous tensors; callers .view() them


def varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
           cu_seqlens_k: torch.Tensor, alibi_slopes: Optional[torch.Tensor],
           **options: object) -> torch.Tensor:
    """flash_attn_varlen_func: each packed sequence attends on its own (own offsets)."""
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    parts = []
    for b in range(len(bounds_q) - 1):
        (q0, q1), (k0, k1) = bounds_q[b:b + 2], bounds_k[b:b + 2]
        if q1 == q0:
            continue
        slopes = alibi_slopes[b] if alibi_slopes is not None and alibi_slopes.dim() == 2 \
            else alibi_slopes
        parts.append(dense(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                           alibi_slopes=slopes, **options)[0])  # type: ignore[arg-type]
    tail = q.shape[0] - (bounds_q[-1] if bounds_q else 0)
    if tail > 0 or not parts:  # rows past the last sequence are not attended: zeros
        parts.append(q.new_zeros(max(tail, 0), q.shape[1], v.shape[-1]))
    return torch.cat(parts, dim=0)
