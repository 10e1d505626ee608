"""flash_attn's other ops that models import beside its attention functions: the padding
helpers of ``flash_attn.bert_padding``, the rotary embedding of
``flash_attn.layers.rotary`` and the fused norm of ``flash_attn.ops.triton.layer_norm``.

On a CUDA machine where flash_attn imports, each twin calls flash_attn's own function
with the caller's arguments and returns what it returns. Elsewhere it computes the same
thing in PyTorch: the padding helpers are flash_attn's own PyTorch code (exact); the
rotary embedding is flash_attn's reference (``apply_rotary_emb_torch``) with the kernel's
offsets, variable-length batches and positions past the table (left as they are); the
norm is the kernel's arithmetic in float32 (residual added first, kept in float32 with
``residual_in_fp32``). What only the kernels do (a second input ``x1``, ``rowscale``,
the dropout mask returned) raises NotImplementedError off CUDA, saying so.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Optional, Union

import torch
import torch.nn.functional as F

from .. import _device, _log


def _own(module: str, name: str) -> Optional[Callable[..., Any]]:
    """flash_attn's function on a CUDA machine where it imports, else None (said once on CUDA)."""
    if not _device.is_cuda():
        return None
    try:
        return getattr(importlib.import_module(module), name)
    except Exception as exc:  # not installed, a broken CUDA extension, a release without it
        _log.warn_once(f"flash-ops:{module}.{name}", f"{module}.{name} is not called on CUDA "
                       f"({type(exc).__name__}: {str(exc)[:120]}); its PyTorch twin runs instead")
        return None


# -- flash_attn.bert_padding: PyTorch code in flash_attn itself ---------------------------

def index_first_axis(x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``flash_attn.bert_padding.index_first_axis``: the rows ``indices`` of ``x``."""
    own = _own("flash_attn.bert_padding", "index_first_axis")
    return own(x, indices) if own is not None else x[indices]


def unpad_input(hidden_states: torch.Tensor, attention_mask: torch.Tensor,
                unused_mask: Optional[torch.Tensor] = None, *, results: int = 5) -> tuple:
    """``flash_attn.bert_padding.unpad_input``: the tokens the mask keeps, their indices,
    ``cu_seqlens``, the longest sequence and (flash-attn 2.6 and later; ``results=4``
    for the releases before) each sequence's count."""
    own = _own("flash_attn.bert_padding", "unpad_input")
    if own is not None:
        return own(hidden_states, attention_mask) if unused_mask is None else \
            own(hidden_states, attention_mask, unused_mask)
    all_masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
    seqlens_in_batch = all_masks.sum(dim=-1, dtype=torch.int32)
    used_seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(all_masks.flatten(), as_tuple=False).flatten()
    max_seqlen_in_batch = seqlens_in_batch.max().item()
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    out = (flat[indices], indices, cu_seqlens, max_seqlen_in_batch, used_seqlens_in_batch)
    return out[:results]


def pad_input(hidden_states: torch.Tensor, indices: torch.Tensor, batch: int, seqlen: int) -> torch.Tensor:
    """``flash_attn.bert_padding.pad_input``: tokens back to (batch, seqlen, ...), zeros between."""
    own = _own("flash_attn.bert_padding", "pad_input")
    if own is not None:
        return own(hidden_states, indices, batch, seqlen)
    output = torch.zeros(batch * seqlen, *hidden_states.shape[1:], device=hidden_states.device,
                         dtype=hidden_states.dtype)
    output = output.index_put((indices,), hidden_states)
    return output.reshape(batch, seqlen, *hidden_states.shape[1:])


# -- flash_attn.layers.rotary ---------------------------------------------------------------

def _rotate_half(x: torch.Tensor, interleaved: bool) -> torch.Tensor:
    if not interleaved:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def _positions(x: torch.Tensor, seqlen_offsets: Union[int, torch.Tensor],
               cu_seqlens: Optional[torch.Tensor]) -> torch.Tensor:
    """Each token's position: (batch, seqlen), or (total,) for a variable-length batch."""
    if cu_seqlens is None:
        batch, seqlen = x.shape[0], x.shape[1]
        pos = torch.arange(seqlen, device=x.device).expand(batch, seqlen)
        offsets = seqlen_offsets.to(x.device).long()[:, None] if isinstance(seqlen_offsets, torch.Tensor) \
            else seqlen_offsets
        return pos + offsets
    cu = cu_seqlens.to(x.device).long()
    lengths = cu[1:] - cu[:-1]
    starts = torch.repeat_interleave(cu[:-1], lengths)
    pos = torch.arange(x.shape[0], device=x.device) - starts
    if isinstance(seqlen_offsets, torch.Tensor):
        pos = pos + torch.repeat_interleave(seqlen_offsets.to(x.device).long(), lengths)
    return pos + (0 if isinstance(seqlen_offsets, torch.Tensor) else seqlen_offsets)


def apply_rotary_emb(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False,
                     inplace: bool = False, seqlen_offsets: Union[int, torch.Tensor] = 0,
                     cu_seqlens: Optional[torch.Tensor] = None, max_seqlen: Optional[int] = None) -> torch.Tensor:
    """``flash_attn.layers.rotary.apply_rotary_emb``: x (batch, seqlen, heads, dim), or
    (total, heads, dim) with ``cu_seqlens``; cos, sin (seqlen_ro, rotary_dim / 2). The first
    ``rotary_dim`` channels are rotated, in float32 as the kernel does; a position past
    ``seqlen_ro`` is left as it is, as the kernel's masked load of cos = 1, sin = 0 leaves it."""
    own = _own("flash_attn.layers.rotary", "apply_rotary_emb")
    if own is not None:
        return own(x, cos, sin, interleaved=interleaved, inplace=inplace, seqlen_offsets=seqlen_offsets,
                   cu_seqlens=cu_seqlens, max_seqlen=max_seqlen)
    half = cos.shape[-1]
    rotary_dim = 2 * half
    if rotary_dim > x.shape[-1]:
        raise ValueError(f"rotary_dim ({rotary_dim}) must be at most the head dimension ({x.shape[-1]})")
    pos = _positions(x, seqlen_offsets, cu_seqlens)
    inside = pos < cos.shape[0]
    pos = pos.clamp(max=cos.shape[0] - 1)
    c = torch.where(inside[..., None], cos[pos].float(), torch.ones((), device=cos.device))
    s = torch.where(inside[..., None], sin[pos].float(), torch.zeros((), device=sin.device))
    c = c.repeat_interleave(2, dim=-1) if interleaved else torch.cat((c, c), dim=-1)
    s = s.repeat_interleave(2, dim=-1) if interleaved else torch.cat((s, s), dim=-1)
    c, s = c.unsqueeze(-2), s.unsqueeze(-2)  # over the heads
    rot = x[..., :rotary_dim].float()
    rotated = (rot * c + _rotate_half(rot, interleaved) * s).to(x.dtype)
    if inplace:
        x[..., :rotary_dim] = rotated
        return x
    return torch.cat((rotated, x[..., rotary_dim:]), dim=-1)


# -- flash_attn.ops.triton.layer_norm -------------------------------------------------------

def layer_norm_fn(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                  residual: Optional[torch.Tensor] = None, x1: Optional[torch.Tensor] = None,
                  weight1: Optional[torch.Tensor] = None, bias1: Optional[torch.Tensor] = None,
                  eps: float = 1e-6, dropout_p: float = 0.0, rowscale: Optional[torch.Tensor] = None,
                  prenorm: bool = False, residual_in_fp32: bool = False, is_rms_norm: bool = False,
                  return_dropout_mask: bool = False, **kwargs: Any) -> Any:
    """``flash_attn.ops.triton.layer_norm.layer_norm_fn`` (as ``rms_norm_fn`` with
    ``is_rms_norm=True``): ``residual`` is added first (in float32 with
    ``residual_in_fp32``), the sum normalised in float32 and returned in x's dtype (or
    ``out_dtype``); with ``prenorm`` the sum is returned too. Dropout in training draws
    its own mask (as any two runs of the kernel do)."""
    own = _own("flash_attn.ops.triton.layer_norm", "layer_norm_fn")
    if own is not None:
        return own(x, weight, bias, residual=residual, x1=x1, weight1=weight1, bias1=bias1, eps=eps,
                   dropout_p=dropout_p, rowscale=rowscale, prenorm=prenorm, residual_in_fp32=residual_in_fp32,
                   is_rms_norm=is_rms_norm, return_dropout_mask=return_dropout_mask, **kwargs)
    kernel_only = {"x1": x1, "weight1": weight1, "bias1": bias1, "rowscale": rowscale,
                   "return_dropout_mask": return_dropout_mask or None,
                   **{k: v for k, v in kwargs.items() if k not in ("out_dtype", "zero_centered_weight")}}
    asked = [k for k, v in kernel_only.items() if v is not None and v is not False]
    if asked:
        raise NotImplementedError(f"layer_norm_fn's {', '.join(asked)} need flash_attn's Triton kernel, which "
                                  f"this machine ({_device.device_type()}) cannot run")
    out_dtype = kwargs.get("out_dtype") or x.dtype
    if dropout_p > 0.0 and torch.is_grad_enabled():
        x = F.dropout(x, p=dropout_p)
    summed = x.float() + residual.float() if residual is not None else x.float()
    if kwargs.get("zero_centered_weight") and weight is not None:
        weight = weight + 1.0
    if is_rms_norm:
        y = summed * torch.rsqrt(summed.pow(2).mean(-1, keepdim=True) + eps)
    else:
        y = F.layer_norm(summed, summed.shape[-1:], eps=eps)
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    y = y.to(out_dtype)
    if not prenorm:
        return y
    keep = residual.dtype if residual is not None else (torch.float32 if residual_in_fp32 else x.dtype)
    return y, summed.to(keep)


def rms_norm_fn(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor],
                residual: Optional[torch.Tensor] = None, x1: Optional[torch.Tensor] = None,
                weight1: Optional[torch.Tensor] = None, bias1: Optional[torch.Tensor] = None,
                eps: float = 1e-6, dropout_p: float = 0.0, rowscale: Optional[torch.Tensor] = None,
                prenorm: bool = False, residual_in_fp32: bool = False,
                return_dropout_mask: bool = False, **kwargs: Any) -> Any:
    """``flash_attn.ops.triton.layer_norm.rms_norm_fn``: :func:`layer_norm_fn` with ``is_rms_norm``."""
    own = _own("flash_attn.ops.triton.layer_norm", "rms_norm_fn")
    if own is not None:
        return own(x, weight, bias, residual=residual, x1=x1, weight1=weight1, bias1=bias1, eps=eps,
                   dropout_p=dropout_p, rowscale=rowscale, prenorm=prenorm, residual_in_fp32=residual_in_fp32,
                   return_dropout_mask=return_dropout_mask, **kwargs)
    return layer_norm_fn(x, weight, bias, residual=residual, x1=x1, weight1=weight1, bias1=bias1, eps=eps,
                         dropout_p=dropout_p, rowscale=rowscale, prenorm=prenorm,
                         residual_in_fp32=residual_in_fp32, is_rms_norm=True,
                         return_dropout_mask=return_dropout_mask, **kwargs)


# -- flash_attn.losses.cross_entropy --------------------------------------------------------

class CrossEntropyLoss(torch.nn.Module):
    """``flash_attn.losses.cross_entropy.CrossEntropyLoss``: flash_attn's own module on a CUDA
    machine where it imports; elsewhere the same loss in PyTorch, in float32: per token
    ``logsumexp(s * x) - s * x[target]`` (``s``: ``logit_scale``), with ``label_smoothing`` as
    torch's cross-entropy has it, plus ``lse_square_scale * lse ** 2`` (the z-loss, returned
    too with ``return_z_loss``); tokens at ``ignore_index`` count 0, and ``"mean"`` divides by
    the others. ``inplace_backward`` only saves memory in the kernel; a vocabulary split over
    a ``process_group`` of several processes needs the kernel (NotImplementedError)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        own = _own("flash_attn.losses.cross_entropy", "CrossEntropyLoss")
        return own(*args, **kwargs) if own is not None else super().__new__(cls)

    def __init__(self, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 logit_scale: float = 1.0, lse_square_scale: float = 0.0, inplace_backward: bool = False,
                 process_group: Any = None, return_z_loss: bool = False) -> None:
        super().__init__()
        if reduction not in ("mean", "none", "sum"):
            raise NotImplementedError("Only support reduction = 'mean' or 'none' or 'sum'")
        if process_group is not None and torch.distributed.get_world_size(process_group) > 1:
            raise NotImplementedError("CrossEntropyLoss over a vocabulary split across processes needs flash_attn's "
                                      f"kernel, which this machine ({_device.device_type()}) cannot run")
        self.ignore_index, self.reduction, self.label_smoothing = ignore_index, reduction, label_smoothing
        self.logit_scale, self.lse_square_scale = logit_scale, lse_square_scale
        self.inplace_backward, self.process_group, self.return_z_loss = inplace_backward, process_group, return_z_loss

    def forward(self, input: torch.Tensor, target: torch.Tensor, precomputed_lse: Optional[torch.Tensor] = None) -> Any:
        logits = input.float() * self.logit_scale
        lse = torch.logsumexp(logits, dim=-1) if precomputed_lse is None else precomputed_lse.float()
        valid = target != self.ignore_index
        picked = logits.gather(-1, torch.where(valid, target, 0).unsqueeze(-1)).squeeze(-1)
        smoothing = self.label_smoothing
        loss = lse - picked if not smoothing else lse - (1 - smoothing) * picked - smoothing * logits.mean(-1)
        z_loss = self.lse_square_scale * lse.square()
        zero = torch.zeros((), dtype=loss.dtype, device=loss.device)
        loss, z_loss = torch.where(valid, loss + z_loss, zero), torch.where(valid, z_loss, zero)
        if self.reduction == "mean":
            count = valid.sum()
            loss, z_loss = loss.sum() / count, z_loss.sum() / count
        elif self.reduction == "sum":
            loss, z_loss = loss.sum(), z_loss.sum()
        return (loss, z_loss) if self.return_z_loss else loss
