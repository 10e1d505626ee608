"""Twins of flash_attn's private forward/backward functions (``flash_attn_interface``).

Code that builds its own ``torch.autograd.Function`` over flash-attn (ring attention,
online-softmax merges of several attention calls, MoBA) calls
``_flash_attn_forward`` / ``_flash_attn_varlen_forward`` for the output *and* its
log-sum-exp, and ``_flash_attn_backward`` / ``_flash_attn_varlen_backward`` with an
output and a log-sum-exp of its own (often merged from several calls): the backward
uses the ``out`` and ``softmax_lse`` it is given, not the ones of the forward. These
twins keep that contract.

CUDA with flash_attn importable: the same private function, called with the caller's
arguments. Elsewhere: the same computation in PyTorch, in float32, one sequence and
one chunk of query rows at a time (bottom-right causal and window masks, GQA/MQA,
ALiBi, softcap; rows that see no key give 0 and a log-sum-exp of +inf, as the
kernels do). Dropout draws its mask from a seed kept in ``rng_state``, so the
backward given that ``rng_state`` sees the forward's mask (not flash-attn's).

The private signatures changed between releases; a call binds as the release it was
written for:

- 2.5: ``window_size`` (a pair), no ``softcap``; the forward returns
  ``(out, q, k, v, out_padded, softmax_lse, S_dmask, rng_state)``, the backward
  ``(dq, dk, dv, softmax_d)``;
- 2.6: the same with ``softcap`` after ``window_size``;
- 2.7 and later: ``window_size_left, window_size_right``; the forward returns
  ``(out, softmax_lse, S_dmask, rng_state)``, the backward ``softmax_d`` (dq, dk and
  dv are written into the buffers passed in, as in every release).

The release is read off the call (its window keywords or positional types) or given
as ``flash_attn_release="2.6"`` (porter passes it where only the way the result is
unpacked tells); without either, 2.7's layout is used.
"""
from __future__ import annotations

import importlib
import math
from typing import Any, Optional

import torch

from .core import make_plan
from .. import _device

_COMMON = {
    "2.5": "window_size alibi_slopes",
    "2.6": "window_size softcap alibi_slopes",
    "2.7": "window_size_left window_size_right softcap alibi_slopes",
}
_VARLEN = "cu_seqlens_q cu_seqlens_k max_seqlen_q max_seqlen_k"
_TAILS = {
    "forward": ("q k v", "dropout_p softmax_scale causal", "return_softmax",
                {"2.5": "", "2.6": "", "2.7": ""}),
    "varlen_forward": (f"q k v {_VARLEN}", "dropout_p softmax_scale causal", "return_softmax block_table",
                       {"2.5": "", "2.6": "leftpad_k seqused_k", "2.7": "leftpad_k seqused_k zero_tensors"}),
    "backward": ("dout q k v out softmax_lse dq dk dv", "dropout_p softmax_scale causal",
                 "deterministic rng_state", {"2.5": "", "2.6": "", "2.7": ""}),
    "varlen_backward": (f"dout q k v out softmax_lse dq dk dv {_VARLEN}", "dropout_p softmax_scale causal",
                        "deterministic rng_state", {"2.5": "", "2.6": "", "2.7": "zero_tensors"}),
}
_DEFAULTS = {"dropout_p": 0.0, "softmax_scale": None, "causal": False, "window_size": (-1, -1),
             "window_size_left": -1, "window_size_right": -1, "softcap": 0.0, "alibi_slopes": None,
             "return_softmax": False, "block_table": None, "leftpad_k": None, "seqused_k": None,
             "zero_tensors": False, "deterministic": False, "rng_state": None}
_CHUNK_BYTES = 16 * 2**20  # float32 scores (and their gradient) per chunk of query rows


def _params(kind: str, release: str) -> list[str]:
    head, options, tail, extra = _TAILS[kind]
    return f"{head} {options} {_COMMON[release]} {tail} {extra[release]}".split()


def _release(kind: str, args: tuple, kwargs: dict, hint: Optional[str]) -> str:
    """The release whose layout the call is written in (see the module doc)."""
    if hint is not None:
        if hint not in _COMMON:
            raise ValueError(f"flash_attn_release must be one of {sorted(_COMMON)}, not {hint!r}")
        return hint
    if {"window_size_left", "window_size_right", "zero_tensors"} & kwargs.keys():
        return "2.7"
    if "window_size" in kwargs:
        return "2.6" if {"softcap", "leftpad_k", "seqused_k"} & kwargs.keys() else "2.5"
    at = _params(kind, "2.7").index("window_size_left")  # the window's place in every release
    if len(args) > at:
        if isinstance(args[at], (tuple, list)):
            nxt = args[at + 1] if len(args) > at + 1 else None
            return "2.6" if isinstance(nxt, (int, float)) and not isinstance(nxt, bool) else "2.5"
        return "2.7"
    return "2.7"


def _bind(kind: str, release: str, args: tuple, kwargs: dict) -> dict[str, Any]:
    names = _params(kind, release)
    name = f"_flash_attn_{kind}"
    if len(args) > len(names):
        raise TypeError(f"{name}() (flash_attn {release}) takes {len(names)} positional arguments "
                        f"but {len(args)} were given")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{name}() (flash_attn {release}) got an unexpected keyword argument {key!r}")
        if key in bound:
            raise TypeError(f"{name}() got multiple values for argument {key!r}")
        bound[key] = value
    for key in names:
        if key not in bound:
            if key not in _DEFAULTS:
                raise TypeError(f"{name}() missing required argument {key!r}")
            bound[key] = _DEFAULTS[key]
    if release != "2.7":
        bound["window_size_left"], bound["window_size_right"] = bound.pop("window_size")
        bound.setdefault("softcap", 0.0)
    for key in ("block_table", "leftpad_k", "seqused_k"):
        if bound.get(key) is not None:
            raise NotImplementedError(f"{name}(..., {key}=...) needs flash_attn's CUDA kernels; this machine "
                                      f"runs {_device.device_type()}")
    if bound.get("return_softmax"):
        raise NotImplementedError(f"{name}(..., return_softmax=True) returns flash-attn's encoded dropout "
                                  f"mask, which only its CUDA kernels make; this machine runs "
                                  f"{_device.device_type()}")
    return bound


def _flash(kind: str):
    """flash_attn's own private function on a CUDA machine where it imports, else None."""
    if not _device.is_cuda():
        return None
    try:
        module = importlib.import_module("flash_attn.flash_attn_interface")
    except Exception:  # not installed, or a broken CUDA extension
        return None
    return getattr(module, f"_flash_attn_{kind}", None)


class _Geometry:
    """One sequence's masking and scaling: q (Sq, H, D), k (Sk, Hk, D)."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, o: dict[str, Any],
                 slopes: Optional[torch.Tensor], seed: int, index: int) -> None:
        self.heads, self.groups = q.shape[1], q.shape[1] // max(k.shape[1], 1)
        self.scale = o["softmax_scale"] if o["softmax_scale"] is not None else q.shape[-1] ** -0.5
        self.cap = float(o["softcap"] or 0.0)
        self.plan = make_plan(q[None], k[None], bool(o["causal"]),
                              (o["window_size_left"], o["window_size_right"]), None)
        self.slopes = None if slopes is None else slopes.to(q.device, torch.float32).reshape(-1, 1, 1)
        self.dropout = float(o["dropout_p"] or 0.0)
        self.seed, self.index = seed, index
        self.rows = max(1, _CHUNK_BYTES // (4 * 3 * max(1, self.heads * k.shape[0])))

    def chunks(self, sq: int):
        for start in range(0, sq, self.rows):
            yield start, min(sq, start + self.rows)

    def scores(self, qh: torch.Tensor, kh: torch.Tensor, start: int, stop: int
               ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(masked scores, tanh of the capped ones or None) of rows [start, stop): (H, rows, Sk)."""
        s = torch.matmul(qh[:, start:stop], kh.transpose(-1, -2)) * self.scale
        t = None
        if self.cap > 0:
            t = torch.tanh(s / self.cap)
            s = t * self.cap
        if self.slopes is not None:
            i = torch.arange(start, stop, device=s.device)[:, None] + self.plan.off
            j = torch.arange(kh.shape[1], device=s.device)[None, :]
            s = s - self.slopes * (i - j).abs().to(torch.float32)
        keep = self.plan.keep(start, stop, 0, kh.shape[1], s.device)
        if keep is not None:
            s = s.masked_fill(~keep, -math.inf)
        return s, t

    def kept(self, shape: torch.Size, device: torch.device, start: int) -> Optional[torch.Tensor]:
        """The dropout's scaled keep mask for the chunk at ``start`` (None without dropout)."""
        if self.dropout <= 0:
            return None
        gen = torch.Generator(device=device)
        gen.manual_seed((self.seed * 1_000_003 + self.index * 65_537 + start) % (2**63 - 1))
        keep = torch.rand(shape, generator=gen, device=device) >= self.dropout
        return keep.to(torch.float32) / (1.0 - self.dropout)


def _heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(S, Hk, D) -> (H, S, D) float32, key/value heads repeated for GQA/MQA."""
    x = x.transpose(0, 1).to(torch.float32)
    return x.repeat_interleave(groups, 0) if groups > 1 else x


def _forward_one(q, k, v, g: _Geometry) -> tuple[torch.Tensor, torch.Tensor]:
    """out (Sq, H, Dv) in q's dtype, lse (H, Sq) float32 of one sequence."""
    qh, kh, vh = q.transpose(0, 1).to(torch.float32), _heads(k, g.groups), _heads(v, g.groups)
    outs, lses = [], []
    for start, stop in g.chunks(q.shape[0]):
        s, _ = g.scores(qh, kh, start, stop)
        lse = torch.logsumexp(s, dim=-1)
        lse = torch.where(torch.isneginf(lse), torch.full_like(lse, math.inf), lse)
        p = torch.exp(s - lse[..., None])
        mask = g.kept(p.shape, p.device, start)
        outs.append(torch.matmul(p if mask is None else p * mask, vh))
        lses.append(lse)
    out = torch.cat(outs, 1) if outs else q.new_zeros(q.shape[1], 0, v.shape[-1], dtype=torch.float32)
    lse = torch.cat(lses, 1) if lses else q.new_zeros(q.shape[1], 0, dtype=torch.float32)
    return out.transpose(0, 1).to(q.dtype), lse


def _backward_one(dout, q, k, v, out, lse, g: _Geometry):
    """(dq, dk, dv) float32 and softmax_d (H, Sq) of one sequence, from the given out and lse."""
    qh, kh, vh = q.transpose(0, 1).to(torch.float32), _heads(k, g.groups), _heads(v, g.groups)
    do = dout.transpose(0, 1).to(torch.float32)
    d = (do * out.transpose(0, 1).to(torch.float32)).sum(-1)  # (H, Sq)
    dq = torch.zeros_like(qh)
    dk, dv = torch.zeros_like(kh), torch.zeros_like(vh)
    for start, stop in g.chunks(q.shape[0]):
        s, t = g.scores(qh, kh, start, stop)
        p = torch.exp(s - lse[:, start:stop, None].to(torch.float32))
        mask = g.kept(p.shape, p.device, start)
        dv += torch.matmul((p if mask is None else p * mask).transpose(-1, -2), do[:, start:stop])
        dp = torch.matmul(do[:, start:stop], vh.transpose(-1, -2))
        if mask is not None:
            dp = dp * mask
        ds = p * (dp - d[:, start:stop, None])
        if t is not None:
            ds = ds * (1.0 - t * t)
        ds = ds * g.scale
        dq[:, start:stop] = torch.matmul(ds, kh)
        dk += torch.matmul(ds.transpose(-1, -2), qh[:, start:stop])
    if g.groups > 1:
        dk = dk.unflatten(0, (-1, g.groups)).sum(1)
        dv = dv.unflatten(0, (-1, g.groups)).sum(1)
    return dq.transpose(0, 1), dk.transpose(0, 1), dv.transpose(0, 1), d


def _slopes(alibi: Optional[torch.Tensor], b: int) -> Optional[torch.Tensor]:
    if alibi is None:
        return None
    return alibi[b] if alibi.dim() == 2 else alibi


def _segments(o: dict[str, Any], varlen: bool, batch: int):
    """(index, q rows, k rows) per sequence: slices of the packed tensors, or batch indices."""
    if not varlen:
        return [(b, b, b) for b in range(batch)]
    cq, ck = o["cu_seqlens_q"].tolist(), o["cu_seqlens_k"].tolist()
    return [(b, slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])) for b in range(len(cq) - 1)]


def _seed(o: dict[str, Any], device: torch.device) -> tuple[int, torch.Tensor]:
    state = o.get("rng_state")
    if state is not None:
        return int(state.reshape(-1)[0]), state
    seed = int(torch.randint(0, 2**62, (1,))) if float(o["dropout_p"] or 0.0) > 0 else 0
    return seed, torch.tensor([seed, 0], dtype=torch.int64, device=device)


def _forward(kind: str, args: tuple, kwargs: dict, release: Optional[str]) -> Any:
    flash = _flash(kind)
    if flash is not None:
        return flash(*args, **kwargs)
    rel = _release(kind, args, kwargs, release)
    o = _bind(kind, rel, args, kwargs)
    q, k, v = o["q"], o["k"], o["v"]
    varlen = kind.startswith("varlen")
    seed, rng_state = _seed(o, q.device)
    lse_shape = (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1])
    out = q.new_zeros(*q.shape[:-1], v.shape[-1])
    lse = torch.full(lse_shape, math.inf, dtype=torch.float32, device=q.device)
    for b, rq, rk in _segments(o, varlen, q.shape[0]):
        g = _Geometry(q[rq], k[rk], o, _slopes(o["alibi_slopes"], b), seed, b)
        o_b, l_b = _forward_one(q[rq], k[rk], v[rk], g)
        out[rq] = o_b
        if varlen:
            lse[:, rq] = l_b
        else:
            lse[b] = l_b
    if rel == "2.7":
        return out, lse, None, rng_state
    return out, q, k, v, out, lse, None, rng_state


def _backward(kind: str, args: tuple, kwargs: dict, release: Optional[str]) -> Any:
    flash = _flash(kind)
    if flash is not None:
        return flash(*args, **kwargs)
    rel = _release(kind, args, kwargs, release)
    o = _bind(kind, rel, args, kwargs)
    dout, q, k, v, out, lse = (o[n] for n in ("dout", "q", "k", "v", "out", "softmax_lse"))
    varlen = kind.startswith("varlen")
    if float(o["dropout_p"] or 0.0) > 0 and o["rng_state"] is None:
        raise ValueError(f"_flash_attn_{kind} with dropout_p > 0 needs the forward's rng_state")
    seed = int(o["rng_state"].reshape(-1)[0]) if o["rng_state"] is not None else 0
    grads = [torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in (q, k, v)]
    softmax_d = torch.zeros(lse.shape, dtype=torch.float32, device=q.device)
    for b, rq, rk in _segments(o, varlen, q.shape[0]):
        g = _Geometry(q[rq], k[rk], o, _slopes(o["alibi_slopes"], b), seed, b)
        l_b = lse[:, rq] if varlen else lse[b]
        dq_b, dk_b, dv_b, d_b = _backward_one(dout[rq], q[rq], k[rk], v[rk], out[rq], l_b, g)
        grads[0][rq], grads[1][rk], grads[2][rk] = dq_b, dk_b, dv_b
        if varlen:
            softmax_d[:, rq] = d_b
        else:
            softmax_d[b] = d_b
    given = [o["dq"], o["dk"], o["dv"]]
    dq, dk, dv = (buf.copy_(grad) if buf is not None else grad.to(x.dtype)
                  for buf, grad, x in zip(given, grads, (q, k, v)))
    if rel == "2.7":
        return softmax_d
    return dq, dk, dv, softmax_d


def flash_attn_forward(*args: Any, flash_attn_release: Optional[str] = None, **kwargs: Any) -> Any:
    """Twin of ``flash_attn.flash_attn_interface._flash_attn_forward`` (module doc):
    q, k, v (B, S, H, D); softmax_lse (B, H, Sq) float32."""
    return _forward("forward", args, kwargs, flash_attn_release)


def flash_attn_varlen_forward(*args: Any, flash_attn_release: Optional[str] = None, **kwargs: Any) -> Any:
    """Twin of ``_flash_attn_varlen_forward``: packed q, k, v (total, H, D) cut by
    cu_seqlens; softmax_lse (H, total_q) float32."""
    return _forward("varlen_forward", args, kwargs, flash_attn_release)


def flash_attn_backward(*args: Any, flash_attn_release: Optional[str] = None, **kwargs: Any) -> Any:
    """Twin of ``_flash_attn_backward``: gradients of attention for the given ``out`` and
    ``softmax_lse``, written into dq, dk, dv where they are passed."""
    return _backward("backward", args, kwargs, flash_attn_release)


def flash_attn_varlen_backward(*args: Any, flash_attn_release: Optional[str] = None, **kwargs: Any) -> Any:
    """Twin of ``_flash_attn_varlen_backward`` (packed sequences, cu_seqlens)."""
    return _backward("varlen_backward", args, kwargs, flash_attn_release)
