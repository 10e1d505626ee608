"""Stand-ins for xformers' attention biases (``porter_runtime.xformers_bias``).

On CUDA with xformers importable, building any of these returns xformers' own object
(``xformers.ops.fmha.attn_bias.<Name>``) from the caller's arguments, so that
xformers' kernels get what they expect. Elsewhere the stand-in carries the same
geometry and ``materialize()``s to the same additive mask as xformers' (from
xformers/ops/fmha/attn_bias.py): ``LowerTriangularMask`` is causal aligned top-left,
``...FromBottomRight...`` aligned bottom-right, ``BlockDiagonalMask`` packs sequences of
different lengths along the sequence axis of a batch of one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Union

import torch

from . import libs as _libs

_MODULE = "xformers.ops.fmha.attn_bias"


def _real(name: str) -> Optional[Any]:
    return _libs.cuda_attr(_MODULE, name)


class AttentionBias:
    """Base of the stand-ins; ``materialize`` gives the additive mask."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        real = _real(cls.__name__) if cls.__module__ == __name__ else None
        return real(*args, **kwargs) if real is not None else super().__new__(cls)

    def materialize(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        raise NotImplementedError

    def to(self, device: Any) -> Any:
        """The stand-ins keep no device tensors: the same object (xformers' ``to``)."""
        return self


def _triangle(shape: Sequence[int], dtype: torch.dtype, device: Any, diagonal: int) -> torch.Tensor:
    create_as = dtype if dtype is not torch.bfloat16 else torch.float32
    full = torch.full(tuple(shape), float("-inf"), dtype=create_as, device=device)
    return torch.triu(full, diagonal=diagonal).to(dtype)


def _causal(shape: Sequence[int], dtype: torch.dtype, device: Any, *,
            window_size: Optional[int] = None, from_bottomright: bool = False) -> torch.Tensor:
    """xformers' _materialize_causal_mask: causal (top-left, or bottom-right), and
    with ``window_size`` only the last ``window_size`` keys up to the diagonal."""
    rows, cols = shape[-2:]
    shift = cols - rows if from_bottomright else 0
    i = torch.arange(rows, device=device)[:, None] + shift
    j = torch.arange(cols, device=device)[None, :]
    seen = j <= i
    if window_size is not None:
        seen &= j >= i - window_size + 1
    create_as = dtype if dtype is not torch.bfloat16 else torch.float32
    mask = torch.zeros(rows, cols, dtype=create_as, device=device).masked_fill_(~seen, -math.inf)
    return mask.to(dtype).expand(tuple(shape))


class LowerTriangularMask(AttentionBias):
    """Causal mask aligned top-left: query i sees keys j <= i."""

    def __init__(self, device: Optional[Any] = None) -> None:
        pass

    def materialize(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        return _triangle(shape, dtype, device, 1)

    def add_bias(self, bias: torch.Tensor) -> "LowerTriangularMaskWithTensorBias":
        return LowerTriangularMaskWithTensorBias(bias)


class LowerTriangularMaskWithTensorBias(LowerTriangularMask):
    """Top-left causal mask plus an additive tensor bias."""

    def __init__(self, bias: torch.Tensor) -> None:
        self._bias = bias

    def materialize(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        return super().materialize(shape, dtype, device) + self._bias


class LowerTriangularFromBottomRightMask(AttentionBias):
    """Causal mask aligned bottom-right (flash-attn's causal): query i sees keys
    j <= i + Sk - Sq."""

    def materialize(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        return _triangle(shape, dtype, device, shape[-1] - shape[-2] + 1)

    def make_local_attention(self, window_size: int
                             ) -> "LowerTriangularFromBottomRightLocalAttentionMask":
        return LowerTriangularFromBottomRightLocalAttentionMask(window_size)


class LowerTriangularFromBottomRightLocalAttentionMask(LowerTriangularFromBottomRightMask):
    """Bottom-right causal, and each query sees only the last ``window_size`` keys up
    to its diagonal (flash-attn's ``window_size=(window_size - 1, 0)``, causal)."""

    def __init__(self, _window_size: int) -> None:
        if _window_size <= 0:
            raise ValueError(f"Expected `window_size > 0`, but window_size={_window_size}")
        self._window_size = _window_size

    def materialize(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        return _causal(shape, dtype, device, window_size=self._window_size,
                       from_bottomright=True)


class LocalAttentionFromBottomRightMask(AttentionBias):
    """Query i sees keys j with ``i - window_left <= j + Sq - Sk <= i + window_right``
    (flash-attn's ``window_size=(window_left, window_right)``)."""

    def __init__(self, window_left: int, window_right: int) -> None:
        for name, value in (("window_left", window_left), ("window_right", window_right)):
            if value < 0:
                raise ValueError("Invalid window value passed to "
                                 "`LocalAttentionFromBottomRightMask`: expected"
                                 f"`{name} > 0` but got {name}={value}")
        self.window_left, self.window_right = window_left, window_right

    def materialize(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        rows, cols = shape[-2:]
        i = torch.arange(rows, device=device)[:, None] + cols - rows
        j = torch.arange(cols, device=device)[None, :]
        seen = (j >= i - self.window_left) & (j <= i + self.window_right)
        create_as = dtype if dtype is not torch.bfloat16 else torch.float32
        mask = torch.zeros(rows, cols, dtype=create_as, device=device)
        return mask.masked_fill_(~seen, -math.inf).to(dtype).expand(tuple(shape))


@dataclass
class _SeqLenInfo:
    """Packed sequence boundaries, under both the old and the new xformers names."""

    max_seqlen: int
    seqstart_py: list[int]

    @classmethod
    def from_seqlens(cls, seqlens: Sequence[int], *, device: Optional[Any] = None
                     ) -> "_SeqLenInfo":
        starts = [0]
        for n in seqlens:
            starts.append(starts[-1] + int(n))
        return cls(max((int(n) for n in seqlens), default=-1), starts)

    @property
    def min_seqlen(self) -> int:
        lengths = [b - a for a, b in self.intervals()]
        return min(lengths) if lengths else -1

    def intervals(self) -> Iterator[tuple[int, int]]:
        yield from zip(self.seqstart_py, self.seqstart_py[1:])

    def to(self, device: Any) -> "_SeqLenInfo":
        return self

    @property
    def cu_seqlen_py(self) -> list[int]:
        return self.seqstart_py

    @property
    def seqstart(self) -> torch.Tensor:
        return torch.tensor(self.seqstart_py, dtype=torch.int32)

    cu_seqlen = seqstart

    def split(self, x: torch.Tensor, batch_sizes: Optional[Sequence[int]] = None) -> list[torch.Tensor]:
        if self.seqstart_py[-1] != x.shape[1] or x.shape[0] != 1:
            raise ValueError(f"Invalid `torch.Tensor` of shape {x.shape}, expected format "
                             f"(B, M, *) with B=1 and M={self.seqstart_py[-1]}")
        sizes = list(batch_sizes) if batch_sizes is not None else [1] * (len(self.seqstart_py) - 1)
        chunks, at = [], 0
        for size in sizes:
            chunks.append(self.seqstart_py[at + size] - self.seqstart_py[at])
            at += size
        return [t.reshape([bs, -1, *t.shape[2:]]) for bs, t in zip(sizes, x.split(chunks, dim=1))]


class BlockDiagonalMask(AttentionBias):
    """Sequences packed along dim 1 of a batch of one; each attends only to itself."""

    def __init__(self, q_seqinfo: _SeqLenInfo, k_seqinfo: _SeqLenInfo,
                 _batch_sizes: Optional[Sequence[int]] = None) -> None:
        self.q_seqinfo, self.k_seqinfo, self._batch_sizes = q_seqinfo, k_seqinfo, _batch_sizes
        self.__post_init__()

    def __post_init__(self) -> None:
        """Checks of xformers' dataclass (in the subclasses that have them)."""

    def _pairs(self) -> Iterator[tuple[int, int]]:
        """(queries, keys) per block."""
        for (q0, q1), (k0, k1) in zip(self.q_seqinfo.intervals(), self.k_seqinfo.intervals()):
            yield q1 - q0, k1 - k0

    @classmethod
    def from_seqlens(cls, q_seqlen: Sequence[int], kv_seqlen: Optional[Sequence[int]] = None,
                     *, device: Optional[Any] = None) -> Any:
        kwargs = {} if device is None else {"device": device}
        real = _real(cls.__name__)
        if real is not None:
            return real.from_seqlens(q_seqlen, kv_seqlen, **kwargs)
        q_info = _SeqLenInfo.from_seqlens(q_seqlen)
        same = kv_seqlen is None or list(q_seqlen) == list(kv_seqlen)
        k_info = q_info if same else _SeqLenInfo.from_seqlens(kv_seqlen)  # type: ignore[arg-type]
        return cls(q_info, k_info)

    @classmethod
    def from_tensor_list(cls, tensors: Sequence[torch.Tensor]) -> Any:
        real = _real(cls.__name__)
        if real is not None:
            return real.from_tensor_list(tensors)
        seqlens = [x.shape[1] for x in tensors for _ in range(x.shape[0])]
        bias = cls.from_seqlens(seqlens)
        bias._batch_sizes = [x.shape[0] for x in tensors]
        return bias, torch.cat([x.reshape([1, -1, *x.shape[2:]]) for x in tensors], dim=1)

    @classmethod
    def from_tensor_lists_qkv(cls, tensors_q: Sequence[torch.Tensor],
                              tensors_k: Sequence[torch.Tensor],
                              tensors_v: Optional[Sequence[torch.Tensor]] = None) -> Any:
        real = _real(cls.__name__)
        if real is not None:
            return real.from_tensor_lists_qkv(tensors_q, tensors_k, tensors_v)
        q_lens = [q.shape[1] for q in tensors_q for _ in range(q.shape[0])]
        k_lens = [k.shape[1] for k in tensors_k for _ in range(k.shape[0])]
        bias = cls.from_seqlens(q_lens, k_lens)
        bias._batch_sizes = [q.shape[0] for q in tensors_q]
        cat = lambda ts: torch.cat([x.reshape([1, -1, *x.shape[2:]]) for x in ts], dim=1)
        return bias, cat(tensors_q), cat(tensors_k), \
            (cat(tensors_v) if tensors_v is not None else None)

    def split(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self.q_seqinfo.split(tensor, self._batch_sizes)

    def split_queries(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self.q_seqinfo.split(tensor, self._batch_sizes)

    def split_kv(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        return self.k_seqinfo.split(tensor, self._batch_sizes)

    def make_causal(self) -> "BlockDiagonalCausalMask":
        return BlockDiagonalCausalMask(self.q_seqinfo, self.k_seqinfo, self._batch_sizes)

    def make_causal_from_bottomright(self) -> "BlockDiagonalCausalFromBottomRightMask":
        return BlockDiagonalCausalFromBottomRightMask(self.q_seqinfo, self.k_seqinfo,
                                                      self._batch_sizes)

    def make_local_attention(self, window_size: int) -> "BlockDiagonalCausalLocalAttentionMask":
        return BlockDiagonalCausalLocalAttentionMask(self.q_seqinfo, self.k_seqinfo,
                                                     self._batch_sizes, window_size)

    def make_local_attention_from_bottomright(
            self, window_size: int) -> "BlockDiagonalCausalLocalAttentionFromBottomRightMask":
        return BlockDiagonalCausalLocalAttentionFromBottomRightMask(
            self.q_seqinfo, self.k_seqinfo, self._batch_sizes, window_size)

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return torch.zeros(rows, cols, dtype=dtype, device=device)

    def materialize(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        mask = torch.full(tuple(shape[-2:]), -math.inf, dtype=dtype, device=device)
        qs, ks = self.q_seqinfo.seqstart_py, self.k_seqinfo.seqstart_py
        for q0, q1, k0, k1 in zip(qs, qs[1:], ks, ks[1:]):
            mask[q0:q1, k0:k1] = self._block(q1 - q0, k1 - k0, dtype, device)
        return mask.expand(tuple(shape))


class BlockDiagonalCausalMask(BlockDiagonalMask):
    """Block-diagonal, each block causal aligned top-left."""

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return _triangle((rows, cols), dtype, device, 1)


class BlockDiagonalCausalFromBottomRightMask(BlockDiagonalMask):
    """Block-diagonal, each block causal aligned bottom-right."""

    def __post_init__(self) -> None:
        for i, (queries, keys) in enumerate(self._pairs()):
            if keys < queries:
                raise ValueError(f"Block #{i} has num_keys={keys} and num_queries={queries}."
                                 " Expected `num_keys >= num_queries`")

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return _triangle((rows, cols), dtype, device, cols - rows + 1)


class BlockDiagonalCausalLocalAttentionMask(BlockDiagonalCausalMask):
    """Block-diagonal, each block causal aligned top-left, and query i of a block sees
    only keys i - window_size < j <= i of its block (xformers'
    ``make_local_attention``)."""

    def __init__(self, q_seqinfo: _SeqLenInfo, k_seqinfo: _SeqLenInfo,
                 _batch_sizes: Optional[Sequence[int]] = None, _window_size: int = 0) -> None:
        self._window_size = _window_size
        super().__init__(q_seqinfo, k_seqinfo, _batch_sizes)

    def __post_init__(self) -> None:
        if self._window_size <= 0:
            raise ValueError(f"Expected `window_size > 0`, but window_size={self._window_size}")
        for queries, keys in self._pairs():
            if queries - self._window_size >= keys:
                raise RuntimeError(f"No keys are attended in q_seqlen {queries} k_seqlen "
                                   f"{keys} with sliding window {self._window_size}")

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return _causal((rows, cols), dtype, device, window_size=self._window_size)


class BlockDiagonalCausalLocalAttentionFromBottomRightMask(BlockDiagonalCausalFromBottomRightMask):
    """Block-diagonal, each block causal aligned bottom-right, each query seeing only
    the ``window_size`` keys ending at its diagonal (xformers'
    ``make_local_attention_from_bottomright``; flash-attn's window (w - 1, 0))."""

    def __init__(self, q_seqinfo: _SeqLenInfo, k_seqinfo: _SeqLenInfo,
                 _batch_sizes: Optional[Sequence[int]] = None, _window_size: int = 0) -> None:
        self._window_size = _window_size
        super().__init__(q_seqinfo, k_seqinfo, _batch_sizes)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self._window_size <= 0:
            raise ValueError(f"Expected `window_size > 0`, but window_size={self._window_size}")

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return _causal((rows, cols), dtype, device, window_size=self._window_size,
                       from_bottomright=True)


class _PaddedSeqLenInfo(_SeqLenInfo):
    """Keys in blocks of ``padding`` slots, of which each sequence uses its first ``seqlen``
    (a KV cache): xformers' _PaddedSeqLenInfo."""

    def __init__(self, max_seqlen: int, seqstart_py: list[int], seqlen_py: Sequence[int]) -> None:
        super().__init__(max_seqlen, seqstart_py)
        self.seqlen_py = [int(n) for n in seqlen_py]

    @classmethod
    def from_seqlens_padded(cls, seqlens: Sequence[int], padding: int, *,
                            device: Optional[Any] = None) -> "_PaddedSeqLenInfo":
        if not all(int(n) <= padding for n in seqlens):
            raise ValueError(f"Seqlens {list(seqlens)} Padding {padding}")
        return cls(max((int(n) for n in seqlens), default=-1),
                   list(range(0, len(seqlens) * padding + 1, padding)), seqlens)

    def intervals(self) -> Iterator[tuple[int, int]]:
        for (start, _), length in zip(super().intervals(), self.seqlen_py):
            yield start, start + length

    @property
    def seqlen(self) -> torch.Tensor:
        return torch.tensor(self.seqlen_py, dtype=torch.int32)


class BlockDiagonalPaddedKeysMask(AttentionBias):
    """Queries packed in a batch of one, each sequence's keys in its own padded block, of
    which only the first ``kv_seqlen[i]`` are real: the decode mask of a KV cache. The
    padding is never attended (materialized as -inf)."""

    def __init__(self, q_seqinfo: _SeqLenInfo, k_seqinfo: _PaddedSeqLenInfo) -> None:
        self.q_seqinfo, self.k_seqinfo = q_seqinfo, k_seqinfo

    @classmethod
    def from_seqlens(cls, q_seqlen: Sequence[int], kv_padding: int, kv_seqlen: Sequence[int],
                     causal_diagonal: Any = None, *, device: Optional[Any] = None) -> Any:
        real = _real(cls.__name__)
        if real is not None:
            kwargs = {} if device is None else {"device": device}
            if causal_diagonal is not None:
                kwargs["causal_diagonal"] = causal_diagonal
            return real.from_seqlens(q_seqlen, kv_padding, kv_seqlen, **kwargs)
        if len(q_seqlen) != len(kv_seqlen):
            raise ValueError(f"{len(q_seqlen)} query sequences for {len(kv_seqlen)} key sequences")
        return cls(_SeqLenInfo.from_seqlens(q_seqlen), _PaddedSeqLenInfo.from_seqlens_padded(kv_seqlen, kv_padding))

    def make_paged(self, block_tables: torch.Tensor, page_size: int, paged_type: Any) -> Any:
        """xformers' paged KV cache: CUDA-only kernels, no stand-in."""
        raise NotImplementedError(f"{type(self).__name__}.make_paged: xformers' paged attention has no stand-in "
                                  "off CUDA; keep the cache unpaged there (porter_runtime)")

    def make_local_attention(self, window_left: int, window_right: int
                             ) -> "BlockDiagonalLocalAttentionPaddedKeysMask":
        return BlockDiagonalLocalAttentionPaddedKeysMask(self.q_seqinfo, self.k_seqinfo, window_left, window_right)

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return torch.zeros(rows, cols, dtype=dtype, device=device)

    def materialize(self, shape: Sequence[int], dtype: torch.dtype = torch.float32,
                    device: Union[str, torch.device] = "cpu") -> torch.Tensor:
        mask = torch.full(tuple(shape[-2:]), -math.inf, dtype=dtype, device=device)
        for (q0, q1), (k0, k1) in zip(self.q_seqinfo.intervals(), self.k_seqinfo.intervals()):
            mask[q0:q1, k0:k1] = self._block(q1 - q0, k1 - k0, dtype, device)
        return mask.expand(tuple(shape))


class BlockDiagonalCausalWithOffsetPaddedKeysMask(BlockDiagonalPaddedKeysMask):
    """The same, causal from the bottom right in each block: a sequence's new queries see
    its cached keys and themselves (mistral-inference's decode mask)."""

    def __init__(self, q_seqinfo: _SeqLenInfo, k_seqinfo: _PaddedSeqLenInfo, causal_diagonal: Any = None) -> None:
        super().__init__(q_seqinfo, k_seqinfo)
        self.causal_diagonal = causal_diagonal  # unused, as in xformers (kept for old callers)

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return _causal((rows, cols), dtype, device, from_bottomright=True)


class BlockDiagonalLocalAttentionPaddedKeysMask(BlockDiagonalPaddedKeysMask):
    """The same, with each block's keys seen through a window from the bottom right
    (``LocalAttentionFromBottomRightMask``'s), not causal."""

    def __init__(self, q_seqinfo: _SeqLenInfo, k_seqinfo: _PaddedSeqLenInfo, window_left: int,
                 window_right: int) -> None:
        super().__init__(q_seqinfo, k_seqinfo)
        self.window_left, self.window_right = window_left, window_right

    @classmethod
    def from_seqlens_local(cls, q_seqlen: Sequence[int], kv_padding: int, kv_seqlen: Sequence[int],
                           window_left: int, window_right: int) -> Any:
        real = _real(cls.__name__)
        if real is not None:
            return real.from_seqlens_local(q_seqlen, kv_padding, kv_seqlen, window_left, window_right)
        return cls(_SeqLenInfo.from_seqlens(q_seqlen), _PaddedSeqLenInfo.from_seqlens_padded(kv_seqlen, kv_padding),
                   window_left, window_right)

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return LocalAttentionFromBottomRightMask(self.window_left, self.window_right).materialize(
            (rows, cols), dtype=dtype, device=device)


__all__ = [
    "AttentionBias", "LowerTriangularMask", "LowerTriangularMaskWithTensorBias",
    "LowerTriangularFromBottomRightMask", "BlockDiagonalMask", "BlockDiagonalCausalMask",
    "BlockDiagonalCausalFromBottomRightMask", "LowerTriangularFromBottomRightLocalAttentionMask",
    "LocalAttentionFromBottomRightMask", "BlockDiagonalCausalLocalAttentionMask",
    "BlockDiagonalCausalLocalAttentionFromBottomRightMask", "BlockDiagonalPaddedKeysMask",
    "BlockDiagonalCausalWithOffsetPaddedKeysMask", "BlockDiagonalLocalAttentionPaddedKeysMask",
]
