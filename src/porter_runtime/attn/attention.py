"""Attention entry points with flash_attn's public signatures.

CUDA with flash_attn importable and q in fp16/bf16: the same-named flash_attn
function is called with the caller's arguments (defaults left out, so older
flash_attn releases without e.g. ``softcap`` keep working). Everywhere else:
scaled_dot_product_attention with flash-attn's exact semantics (core.py).
On CUDA that is a departure from the original call (flash_attn missing or broken,
fp32 inputs flash_attn rejects, a function the installed release lacks), and it
is announced by one warning naming what runs instead.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Optional, Sequence

import torch

from . import core as _attn_core
from .. import _device, _log

_FLASH_DTYPES = (torch.float16, torch.bfloat16)
_DEFAULTS: dict[str, Any] = {
    "dropout_p": 0.0, "softmax_scale": None, "causal": False, "window_size": (-1, -1),
    "softcap": 0.0, "alibi_slopes": None, "deterministic": False,
    "return_attn_probs": False, "block_table": None,
}
_UNSET = object()
_flash: Any = _UNSET
_flash_error = ""


#: The flash-attn release whose semantics the PyTorch paths follow (tests/runtime/test_rt_real_api.py
#: checks the twins' signatures against its sources).
FLASH_ATTN_RELEASE = "2.8.3"


def flash_attn_version() -> str:
    """``from flash_attn import __version__``: where torch sees CUDA, the installed release's
    (a missing flash_attn raises ImportError there, as the import did); elsewhere flash_attn's
    own where it imports, else the release whose semantics the PyTorch paths follow, so a
    version check guarding a feature the twins have (``past_key_value`` needs >= 2.1.0:
    LongLoRA) passes as it does on CUDA with a current flash-attn."""
    if _device.is_cuda():
        from flash_attn import __version__
        return __version__
    module = flash_attn_module()
    return str(getattr(module, "__version__", FLASH_ATTN_RELEASE)) if module is not None else FLASH_ATTN_RELEASE


def flash_attn_module() -> Optional[ModuleType]:
    """The flash_attn module if it imports (checked once), else None."""
    global _flash, _flash_error
    if _flash is _UNSET:
        try:
            _flash = importlib.import_module("flash_attn")
        except Exception as exc:  # ImportError, or a broken CUDA extension (OSError, ...)
            _flash, _flash_error = None, f"{type(exc).__name__}: {str(exc)[:200]}"
    return _flash


def _reset() -> None:
    global _flash, _flash_error
    _flash, _flash_error = _UNSET, ""


def _changed(options: dict[str, Any]) -> dict[str, Any]:
    """The options that differ from flash_attn's defaults, to forward as keywords."""
    out = {}
    for name, value in options.items():
        default = _DEFAULTS[name]
        same = value is default if default is None or isinstance(value, torch.Tensor) \
            else value == default
        if not same:
            out[name] = value
    return out


def _why_not_flash(name: str, dtype: torch.dtype) -> Optional[str]:
    """Why flash_attn.<name> is not called on this CUDA machine, or None if it is."""
    module = flash_attn_module()
    if module is None:
        return f"flash_attn failed to import ({_flash_error})"
    if getattr(module, name, None) is None:
        version = getattr(module, "__version__", "?")
        return f"the installed flash_attn {version} has no {name}"
    if dtype not in _FLASH_DTYPES:
        return f"flash_attn.{name} only takes float16/bfloat16 inputs, these are {dtype}"
    return None


def _flash_fn(name: str, dtype: torch.dtype) -> tuple[Optional[Any], Optional[str]]:
    """(flash_attn.<name> to call, None), or (None, why not) on a CUDA machine,
    or (None, None) off CUDA, where SDPA is the plan rather than a departure."""
    if not _device.is_cuda():
        return None, None
    why = _why_not_flash(name, dtype)
    if why is None:
        return getattr(flash_attn_module(), name), None
    _log.warn_once(f"flash:{name}:{why}", f"flash_attn.{name} is not called on CUDA: {why}; "
                   "running torch's scaled_dot_product_attention with flash-attn's "
                   "semantics instead")
    return None, why


def _sdpa_options(options: dict[str, Any], why: Optional[str] = None) -> dict[str, Any]:
    """Options for core.py; refuses what only flash_attn's kernels provide.

    ``why`` says why flash_attn is not used on a CUDA machine (None: not CUDA)."""
    where = f"flash_attn is not used here because {why}" if why else \
        f"this machine runs {_device.device_type()}, not CUDA"
    if options.pop("return_attn_probs", False):
        raise NotImplementedError(
            "return_attn_probs=True returns flash-attn's internal softmax_lse and dropout "
            f"mask, which only flash_attn's CUDA kernels compute; {where}. porter_runtime "
            "computes attention with scaled_dot_product_attention here and cannot return them.")
    if options.pop("block_table", None) is not None:
        raise NotImplementedError("a paged KV cache (block_table) needs flash_attn's CUDA "
                                  f"kernels; {where}")
    options.pop("deterministic", None)  # SDPA off CUDA is deterministic without dropout
    return options


def _with_lse(kind: str, tensors: tuple, options: dict[str, Any]) -> tuple:
    """flash-attn's ``(out, softmax_lse, S_dmask)`` for ``return_attn_probs=True`` off CUDA:
    the attention and its log-sum-exp (float32; (B, H, Sq), or (H, total_q) for varlen) from
    the PyTorch twin of flash_attn's private forward (internals.py), differentiable through
    ``out`` and the log-sum-exp, as ring attention's references need. ``S_dmask``, the encoded
    dropout mask only flash_attn's kernels make, is None."""
    from . import internals
    left, right = options["window_size"]
    forward = internals.flash_attn_forward if kind == "forward" else internals.flash_attn_varlen_forward
    result = forward(*tensors, dropout_p=options["dropout_p"], softmax_scale=options["softmax_scale"],
                     causal=options["causal"], window_size_left=left, window_size_right=right,
                     softcap=options["softcap"], alibi_slopes=options["alibi_slopes"])
    return result[0], result[1], None


def _options(dropout_p: float, softmax_scale: Optional[float], causal: bool,
             window_size: Sequence[int], softcap: float, alibi_slopes: Optional[torch.Tensor],
             deterministic: bool, return_attn_probs: bool) -> dict[str, Any]:
    return {"dropout_p": dropout_p, "softmax_scale": softmax_scale, "causal": causal,
            "window_size": window_size, "softcap": softcap, "alibi_slopes": alibi_slopes,
            "deterministic": deterministic, "return_attn_probs": return_attn_probs}


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
              softmax_scale: Optional[float] = None, causal: bool = False,
              window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
              alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
              return_attn_probs: bool = False) -> Any:
    """Twin of flash_attn.flash_attn_func: q (B,Sq,H,D), k/v (B,Sk,Hk,D) -> (B,Sq,H,D).

    CUDA + flash_attn + fp16/bf16: flash_attn_func(q, k, v, <same options>).
    Elsewhere (MPS, CPU, CUDA fp32): SDPA with flash-attn's semantics (bottom-right
    causal/window masks, GQA/MQA, ALiBi, softcap, zero rows for empty windows).
    ``return_attn_probs=True``: ``(out, softmax_lse, None)`` off CUDA (:func:`_with_lse`).
    """
    options = _options(dropout_p, softmax_scale, causal, window_size, softcap,
                       alibi_slopes, deterministic, return_attn_probs)
    flash, why = _flash_fn("flash_attn_func", q.dtype)
    if flash is not None:
        return flash(q, k, v, **_changed(options))
    if return_attn_probs and why is None:
        return _with_lse("forward", (q, k, v), options)
    return _attn_core.dense(q, k, v, **_sdpa_options(options, why))


def attention_qkvpacked(qkv: torch.Tensor, dropout_p: float = 0.0,
                        softmax_scale: Optional[float] = None, causal: bool = False,
                        window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                        alibi_slopes: Optional[torch.Tensor] = None,
                        deterministic: bool = False, return_attn_probs: bool = False) -> Any:
    """Twin of flash_attn_qkvpacked_func: qkv (B,S,3,H,D). CUDA + flash_attn: that
    function; elsewhere ``attention(*qkv.unbind(2), ...)``."""
    options = _options(dropout_p, softmax_scale, causal, window_size, softcap,
                       alibi_slopes, deterministic, return_attn_probs)
    flash, why = _flash_fn("flash_attn_qkvpacked_func", qkv.dtype)
    if flash is not None:
        return flash(qkv, **_changed(options))
    q, k, v = qkv.unbind(2)
    if return_attn_probs and why is None:
        return _with_lse("forward", (q, k, v), options)
    return _attn_core.dense(q, k, v, **_sdpa_options(options, why))


def attention_kvpacked(q: torch.Tensor, kv: torch.Tensor, dropout_p: float = 0.0,
                       softmax_scale: Optional[float] = None, causal: bool = False,
                       window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                       alibi_slopes: Optional[torch.Tensor] = None,
                       deterministic: bool = False, return_attn_probs: bool = False) -> Any:
    """Twin of flash_attn_kvpacked_func: kv (B,Sk,2,Hk,D). CUDA + flash_attn: that
    function; elsewhere ``attention(q, *kv.unbind(2), ...)``."""
    options = _options(dropout_p, softmax_scale, causal, window_size, softcap,
                       alibi_slopes, deterministic, return_attn_probs)
    flash, why = _flash_fn("flash_attn_kvpacked_func", q.dtype)
    if flash is not None:
        return flash(q, kv, **_changed(options))
    k, v = kv.unbind(2)
    if return_attn_probs and why is None:
        return _with_lse("forward", (q, k, v), options)
    return _attn_core.dense(q, k, v, **_sdpa_options(options, why))


def attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
                     max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                     softmax_scale: Optional[float] = None, causal: bool = False,
                     window_size: Sequence[int] = (-1, -1), softcap: float = 0.0,
                     alibi_slopes: Optional[torch.Tensor] = None, deterministic: bool = False,
                     return_attn_probs: bool = False, block_table: Optional[torch.Tensor] = None
                     ) -> Any:
    """Twin of flash_attn_varlen_func: q (total_q,H,D), k/v (total_k,Hk,D), cu_seqlens
    (B+1,) int32. CUDA + flash_attn: that function. Elsewhere each sequence is
    attended separately with SDPA (masks aligned per sequence); block_table raises."""
    options = _options(dropout_p, softmax_scale, causal, window_size, softcap,
                       alibi_slopes, deterministic, return_attn_probs)
    flash, why = _flash_fn("flash_attn_varlen_func", q.dtype)
    if flash is not None:
        extra = {"block_table": block_table} if block_table is not None else {}
        return flash(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     **_changed(options), **extra)
    if return_attn_probs and why is None and block_table is None:
        return _with_lse("varlen_forward", (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k),
                         options)
    options["block_table"] = block_table
    options = _sdpa_options(options, why)
    slopes = options.pop("alibi_slopes")
    return _attn_core.varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, slopes, **options)


def attention_varlen_qkvpacked(qkv: torch.Tensor, cu_seqlens: torch.Tensor, max_seqlen: int,
                               dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                               causal: bool = False, window_size: Sequence[int] = (-1, -1),
                               softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                               deterministic: bool = False, return_attn_probs: bool = False
                               ) -> Any:
    """Twin of flash_attn_varlen_qkvpacked_func: qkv (total,3,H,D). CUDA + flash_attn:
    that function; elsewhere attention_varlen on the unpacked tensors."""
    options = _options(dropout_p, softmax_scale, causal, window_size, softcap,
                       alibi_slopes, deterministic, return_attn_probs)
    flash, _ = _flash_fn("flash_attn_varlen_qkvpacked_func", qkv.dtype)
    if flash is not None:
        return flash(qkv, cu_seqlens, max_seqlen, **_changed(options))
    q, k, v = qkv.unbind(1)
    return attention_varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, **options)


def attention_varlen_kvpacked(q: torch.Tensor, kv: torch.Tensor, cu_seqlens_q: torch.Tensor,
                              cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                              dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                              causal: bool = False, window_size: Sequence[int] = (-1, -1),
                              softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None,
                              deterministic: bool = False, return_attn_probs: bool = False
                              ) -> Any:
    """Twin of flash_attn_varlen_kvpacked_func: kv (total_k,2,Hk,D). CUDA + flash_attn:
    that function; elsewhere attention_varlen on the unpacked tensors."""
    options = _options(dropout_p, softmax_scale, causal, window_size, softcap,
                       alibi_slopes, deterministic, return_attn_probs)
    flash, _ = _flash_fn("flash_attn_varlen_kvpacked_func", q.dtype)
    if flash is not None:
        return flash(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     **_changed(options))
    k, v = kv.unbind(1)
    return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                            **options)
