"""flash-attn semantics computed with scaled_dot_product_attention.

Layout is flash-attn's (batch, seqlen, heads, headdim). Masks are aligned
bottom-right: with ``off = Sk - Sq`` query i sees key j when
``i + off - left <= j <= i + off + right`` (-1 = unbounded, causal => right = 0).
ALiBi adds ``-slope * |i + off - j|``. Rows that see no key output 0.

The fused SDPA path (no mask; ``is_causal`` only when Sq == Sk) is used whenever
the arguments allow. Otherwise the queries are cut into row chunks and each chunk
attends only to the *band* of keys its mask can see (a window of width w costs
O(S * w), a bottom-right causal mask half of the full product). A two-sided window
batches its chunks into few SDPA calls over an unfold of the keys; the other masks
(and ALiBi) depend only on ``i + off - j``, so a chunk's mask is a strided view of
one vector per head (Plan.banded_bias), never a materialised matrix. A mask is never
combined with is_causal. softcap, which SDPA cannot express, takes the manual
path: QKᵀ accumulated in float32 (as flash-attn's kernels do, also for fp16/bf16
inputs), the cap, bias and mask applied in place where autograd allows, softmax,
PV in float32, one chunk of rows at a time sized to stay in cache.

FlexAttention is not used: on CPU it needs torch.compile (a C++ compiler, about 40 s
of compilation per shape), and compiled it measured 2.3x plain causal attention for
softcap at S = 4096 against 1.8x for this path (torch 2.13, one thread).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import torch
import torch.nn.functional as F

from .. import _compat

_MASK_BUDGET = 16 * 2**20   # bytes of float mask per SDPA chunk (bool masks: 1/4 of it)
_SCORE_BUDGET = 8 * 2**20   # bytes of float32 scores per chunk on the manual path
_BAND_BUDGET = 8 * 2**20   # bytes of unfolded keys per SDPA call on the window path


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

    def band(self, start: int, stop: int) -> tuple[int, int]:
        """Keys [lo, hi) that query rows [start, stop) can see (hi <= lo: none)."""
        lo = 0 if self.left_open else max(0, start + self.off - self.left)
        hi = self.sk if self.right_open else min(self.sk, stop - 1 + self.off + self.right + 1)
        return lo, hi

    def rows(self) -> int:
        """Query rows per chunk that keep each band narrow: about a quarter of the
        window's width (at least 32), 256 under a one-sided (causal) mask."""
        if self.left_open and self.right_open:
            return max(self.sq, 1)
        if self.left_open or self.right_open:
            return 256
        return max(32, 1 << max(0, round(math.log2((self.left + self.right + 1) / 4))))

    def width(self, rows: int) -> int:
        """The widest key band of a chunk of ``rows`` query rows."""
        if self.left_open or self.right_open:
            return max(self.sk, 1)
        return max(1, min(self.sk, rows + self.left + self.right))

    def keep(self, start: int, stop: int, lo: int, hi: int,
             device: torch.device) -> Optional[torch.Tensor]:
        """(rows, hi - lo) bool mask of the visible keys, None when all are visible."""
        if not self.windowed:
            return None
        i = torch.arange(start, stop, device=device)[:, None] + self.off
        j = torch.arange(lo, hi, device=device)[None, :]
        keep = torch.ones(stop - start, hi - lo, dtype=torch.bool, device=device)
        if not self.left_open:
            keep &= j >= i - self.left
        if not self.right_open:
            keep &= j <= i + self.right
        return None if bool(keep.all()) else keep

    def masks(self, start: int, stop: int, lo: int, hi: int) -> bool:
        """True when some key of the band [lo, hi) is hidden from some row of the chunk."""
        return (not self.left_open and stop - 1 + self.off - self.left > lo) or \
            (not self.right_open and start + self.off + self.right + 1 < hi)

    def blind(self, row: int) -> bool:
        """True when query ``row`` sees no key at all (its output is 0)."""
        lo = 0 if self.left_open else row + self.off - self.left
        hi = self.sk if self.right_open else row + self.off + self.right + 1
        return min(hi, self.sk) <= max(lo, 0)

    def banded_bias(self, start: int, stop: int, lo: int, hi: int,
                    device: torch.device) -> Optional[torch.Tensor]:
        """The chunk's additive mask (ALiBi and -inf outside the window) with its
        query rows in *reverse* order, as a (B or 1, H or 1, rows, hi - lo) view of
        one vector per head: both depend only on ``i + off - j``, so row r' = rows-1-r,
        column c hold entry ``r' + c`` (a Toeplitz matrix that costs O(rows + band),
        not O(rows * band)). None when every key is visible and there is no ALiBi."""
        if self.slopes is None and not self.masks(start, stop, lo, hi):
            return None
        rows, cols = stop - start, hi - lo
        d = (stop - 1 + self.off - lo) - torch.arange(rows + cols - 1, device=device)
        hidden = torch.zeros_like(d, dtype=torch.bool)
        if not self.left_open:
            hidden |= d > self.left
        if not self.right_open:
            hidden |= d < -self.right
        if self.slopes is None:
            line = torch.zeros(1, 1, d.shape[0], device=device)
        else:
            line = d.abs().to(torch.float32) * -self.slopes[..., 0]  # (B or 1, H, L)
        line = line.masked_fill_(hidden, -math.inf)
        return line.as_strided((line.shape[0], line.shape[1], rows, cols),
                               (line.stride(0), line.stride(1), 1, 1))

    def bias(self, start: int, stop: int, lo: int, hi: int,
             device: torch.device) -> Optional[torch.Tensor]:
        """(B or 1, H, rows, hi - lo) float32 ALiBi bias."""
        if self.slopes is None:
            return None
        i = torch.arange(start, stop, device=device)[:, None] + self.off
        j = torch.arange(lo, hi, device=device)[None, :]
        return (i - j).abs().to(torch.float32) * -self.slopes


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


def _chunks(plan: Plan, bytes_per_score: int, budget: int
            ) -> Iterator[tuple[int, int, int, int]]:
    """(start, stop, lo, hi): row chunks of at most ``budget`` bytes of scores (or
    mask) each, and the band of keys [lo, hi) each chunk sees."""
    rows = plan.rows()
    rows = max(1, min(rows, budget // max(bytes_per_score * plan.width(rows), 1)))
    for start in range(0, plan.sq, rows):
        stop = min(start + rows, plan.sq)
        yield (start, stop, *plan.band(start, stop))


def _empty(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention with no query or no key, still connected to autograd: rows that
    see no key are 0 (flash-attn), and (q kᵀ) v over an empty axis is exactly that."""
    qh, kh, vh, _ = _heads(q, k, v, repeat=True)
    return torch.matmul(torch.matmul(qh, kh.transpose(-1, -2)), vh).transpose(1, 2)


def _zeros(q: torch.Tensor, v: torch.Tensor, rows: int) -> torch.Tensor:
    """Output rows that see no key: 0, as flash-attn writes them."""
    return q.new_zeros(q.shape[0], rows, q.shape[2], v.shape[-1])


def _masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan,
            dropout_p: float, scale: Optional[float]) -> torch.Tensor:
    """SDPA over each row chunk's key band (see the module doc)."""
    if not (plan.left_open or plan.right_open) and plan.sq > 2 * _window_rows(plan):
        return _windowed(q, k, v, plan, dropout_p, scale)
    parts = [_masked_rows(q, k, v, plan, *chunk, dropout_p, scale)
             for chunk in _chunks(plan, 1, _MASK_BUDGET)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _window_rows(plan: Plan) -> int:
    return max(16, min(128, 1 << max(0, round(math.log2((plan.left + plan.right + 1) / 8)))))


def _windowed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan,
              dropout_p: float, scale: Optional[float]) -> torch.Tensor:
    """A two-sided window: chunks of C query rows become a batch, each with its own
    band of C + left + right keys (an unfold of the padded keys), so that one SDPA
    call serves many chunks; the mask (band and ALiBi) is the same for every chunk
    except where the band runs past the ends of the keys."""
    b, sq, h, _ = q.shape
    rows, width = _window_rows(plan), plan.left + plan.right + 1
    n = -(-sq // rows)
    wide = rows + width - 1  # keys seen by one chunk
    first = plan.off - plan.left  # key index where chunk 0's band starts
    qp = q if n * rows == sq else F.pad(q, (0, 0, 0, 0, 0, n * rows - sq))
    r = torch.arange(rows, device=q.device)[:, None]
    t = torch.arange(wide, device=q.device)[None, :]
    keep = (t >= r) & (t <= r + plan.left + plan.right)  # the same for every chunk
    j = (torch.arange(n, device=q.device) * rows + first)[:, None, None] + t  # (n, 1, wide)
    keep = keep & ((j >= 0) & (j < plan.sk))  # (n, rows, wide)
    i = torch.arange(n * rows, device=q.device)
    seen = torch.minimum(i + plan.off + plan.right + 1, torch.tensor(plan.sk)) > \
        torch.clamp(i + plan.off - plan.left, min=0)
    rows_ok = (seen & (i < sq)).view(n, rows)
    all_ok = bool(rows_ok.all())
    if not all_ok:
        keep = keep | ~rows_ok[..., None]
    if plan.slopes is None:  # a float mask: SDPA would convert a bool one per call
        mask = torch.zeros(keep.shape, dtype=q.dtype if q.device.type != "cpu" else
                           torch.float32, device=q.device).masked_fill_(~keep, -math.inf)
        mask = mask[:, None]  # (n, 1, rows, wide)
    else:
        d = (r - t + plan.left).abs().to(torch.float32)  # i + off - j, the same for all chunks
        bias = -plan.slopes[:, None] * d  # (B or 1, 1, H, rows, wide)
        mask = bias.masked_fill(~keep[None, :, None], -math.inf)
        mask = mask.expand(b, n, h, rows, wide).reshape(b * n, h, rows, wide)
    group = max(1, _BAND_BUDGET // (wide * k.shape[2] * k.shape[3] * k.element_size() * b))
    out = q.new_empty(b, n * rows, h, v.shape[3])
    for g0 in range(0, n, group):
        g1 = min(n, g0 + group)
        kb, vb = (_band_keys(x, g0 * rows + first, (g1 - 1) * rows + first + wide)
                  .unfold(1, wide, rows).permute(0, 1, 4, 2, 3).flatten(0, 1)
                  for x in (k, v))  # (B*g, wide, Hk, D)
        qb = qp[:, g0 * rows:g1 * rows].reshape(b * (g1 - g0), rows, h, q.shape[3])
        if plan.slopes is None:
            m = mask[None, g0:g1].expand(b, g1 - g0, 1, rows, wide).flatten(0, 1)
        else:
            m = mask.view(b, n, h, rows, wide)[:, g0:g1].flatten(0, 1)
        if q.device.type != "cpu" and plan.slopes is not None:
            m = m.to(q.dtype)
        res = _sdpa(qb, kb, vb, m, False, dropout_p, scale)  # (B*g, rows, H, Dv)
        out[:, g0 * rows:g1 * rows] = res.reshape(b, -1, h, v.shape[3])
    if not all_ok:
        out = out.masked_fill(~rows_ok.reshape(-1)[None, :, None, None], 0.0)
    return out[:, :sq]


def _band_keys(x: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """x[:, start:stop] along the sequence, zero rows where the range leaves x."""
    lo = min(max(start, 0), x.shape[1])
    hi = max(min(stop, x.shape[1]), lo)
    inside = x[:, lo:hi]
    before = min(max(-start, 0), stop - start)
    after = stop - start - before - (hi - lo)
    return F.pad(inside, (0, 0, 0, 0, before, after)) if before or after else inside


def _rows_with_keys(keep: Optional[torch.Tensor]
                    ) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """Unmask rows that see no key (SDPA gives NaN for them on MPS) and return
    (keep, rows_with_keys) so that those rows can be zeroed afterwards."""
    if keep is None:
        return None, None
    rows_ok = keep.any(-1)
    if bool(rows_ok.all()):
        return keep, None
    return keep | ~rows_ok[:, None], rows_ok


def _masked_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan, start: int,
                 stop: int, lo: int, hi: int, dropout_p: float, scale: Optional[float]
                 ) -> torch.Tensor:
    if hi <= lo:  # the band is empty: these rows see no key
        return _zeros(q, v, stop - start)
    if plan.blind(start) or plan.blind(stop - 1):
        return _masked_rows_with_blind(q, k, v, plan, start, stop, lo, hi, dropout_p, scale)
    mask = plan.banded_bias(start, stop, lo, hi, q.device)
    if mask is None:
        return _sdpa(q[:, start:stop], k[:, lo:hi], v[:, lo:hi], None, False, dropout_p, scale)
    if q.device.type != "cpu":  # CPU SDPA reads the strided view (and a float32 mask
        mask = mask.to(q.dtype).contiguous()  # with fp16/bf16 inputs) as it is
    rows = q[:, start:stop].flip(1)  # the mask's rows are reversed (Plan.banded_bias)
    return _sdpa(rows, k[:, lo:hi], v[:, lo:hi], mask, False, dropout_p, scale).flip(1)


def _masked_rows_with_blind(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan,
                            start: int, stop: int, lo: int, hi: int, dropout_p: float,
                            scale: Optional[float]) -> torch.Tensor:
    """A chunk with rows that see no key (only at the ends, when Sq > Sk or a window
    misses the keys): a materialised mask, and those rows set to 0."""
    keep, rows_ok = _rows_with_keys(plan.keep(start, stop, lo, hi, q.device))
    mask: Optional[torch.Tensor] = keep
    bias = plan.bias(start, stop, lo, hi, q.device)
    if bias is not None:
        if keep is not None:
            bias = bias.masked_fill_(~keep, -math.inf)
        mask = bias if q.device.type == "cpu" else bias.to(q.dtype)
    out = _sdpa(q[:, start:stop], k[:, lo:hi], v[:, lo:hi], mask, False, dropout_p, scale)
    if rows_ok is not None:
        out = out.masked_fill(~rows_ok[None, :, None, None], 0.0)
    return out


def _capped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: Plan, dropout_p: float,
            scale: float, softcap: float) -> torch.Tensor:
    """softcap has no SDPA equivalent: the manual path of the module doc."""
    qh, kh, vh, _ = _heads(q, k, v, repeat=True)
    # Kᵀ made contiguous once: the chunks' QKᵀ products run about 2x faster on it.
    kh = kh.to(torch.float32).transpose(-1, -2).contiguous()
    # Autograd needs the intermediate scores; without it they are updated in place.
    inplace = not (torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)))
    per_score = 4 * qh.shape[0] * qh.shape[1]
    parts = [_capped_rows(qh, kh, vh, plan, *chunk, dropout_p, scale, softcap, inplace)
             for chunk in _chunks(plan, per_score, _SCORE_BUDGET)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _capped_rows(qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor, plan: Plan, start: int,
                 stop: int, lo: int, hi: int, dropout_p: float, scale: float, softcap: float,
                 inplace: bool) -> torch.Tensor:
    """softmax(cap·tanh(q kᵀ·scale / cap) + bias, masked) v for one chunk, in float32.

    cap·tanh(x / cap) = 2·cap·sigmoid(2x / cap) − cap, and softmax ignores the
    constant: the sigmoid form is used because it is about 3x cheaper than tanh."""
    if hi <= lo:
        return qh.new_zeros(qh.shape[0], stop - start, qh.shape[1], vh.shape[-1])
    blind = plan.blind(start) or plan.blind(stop - 1)
    rows_ok = None
    if blind:  # materialised mask; rows that see no key are zeroed at the end
        keep, rows_ok = _rows_with_keys(plan.keep(start, stop, lo, hi, qh.device))
        bias = plan.bias(start, stop, lo, hi, qh.device)
        if keep is not None:
            bias = torch.zeros(keep.shape, device=qh.device) if bias is None else bias
            bias = bias.masked_fill_(~keep, -math.inf)
        rows = qh[:, :, start:stop]
    else:  # Toeplitz view with the rows reversed (Plan.banded_bias)
        bias = plan.banded_bias(start, stop, lo, hi, qh.device)
        rows = qh[:, :, start:stop].flip(2)
    q32 = rows.to(torch.float32) * (2.0 * scale / softcap)
    scores = torch.matmul(q32, kh[..., lo:hi])  # kh is Kᵀ in float32 here
    scores = scores.sigmoid_() if inplace else scores.sigmoid()
    if bias is None:
        scores = scores.mul_(2.0 * softcap) if inplace else scores * (2.0 * softcap)
    elif inplace:  # 2·cap·sigmoid + bias and mask in one pass
        scores = torch.add(bias, scores, alpha=2.0 * softcap, out=scores)
    else:
        scores = torch.add(bias, scores, alpha=2.0 * softcap)
    probs = torch.softmax(scores, dim=-1)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    out = torch.matmul(probs, vh[:, :, lo:hi].to(torch.float32))
    if rows_ok is not None:
        out = out.masked_fill(~rows_ok[None, None, :, None], 0.0)
    out = out if blind else out.flip(2)
    return out.to(vh.dtype).transpose(1, 2)


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
    if k.shape[1] == 0 or q.shape[1] == 0:
        return _empty(q, k, v)
    plan = make_plan(q, k, causal, window_size, alibi_slopes)
    if softcap > 0:
        scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
        out = _capped(q, k, v, plan, dropout_p, scale, softcap)
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
    """flash_attn_varlen_func: each packed sequence attends on its own (own offsets).

    Rows outside [cu_seqlens_q[0], cu_seqlens_q[-1]) belong to no sequence: 0."""
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    first = bounds_q[0] if bounds_q else 0
    parts = [_zeros(q[None], v[None], first)[0]] if first > 0 else []
    for b in range(len(bounds_q) - 1):
        (q0, q1), (k0, k1) = bounds_q[b:b + 2], bounds_k[b:b + 2]
        if q1 == q0:
            continue
        slopes = alibi_slopes[b] if alibi_slopes is not None and alibi_slopes.dim() == 2 \
            else alibi_slopes
        parts.append(dense(q[None, q0:q1], k[None, k0:k1], v[None, k0:k1],
                           alibi_slopes=slopes, **options)[0])  # type: ignore[arg-type]
    tail = q.shape[0] - (bounds_q[-1] if bounds_q else 0)
    if tail > 0 or not parts:
        parts.append(_zeros(q[None], v[None], max(tail, 0))[0])
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
