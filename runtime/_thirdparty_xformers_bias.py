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
from typing import Any, Optional, Sequence, Union

import torch

from . import _thirdparty_libs as _libs

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


def _triangle(shape: Sequence[int], dtype: torch.dtype, device: Any, diagonal: int) -> torch.Tensor:
    create_as = dtype if dtype is not torch.bfloat16 else torch.float32
    full = torch.full(tuple(shape), float("-inf"), dtype=create_as, device=device)
    return torch.triu(full, diagonal=diagonal).to(dtype)


class LowerTriangularMask(AttentionBias):
    """Causal mask aligned top-left: query i sees keys j <= i."""

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


@dataclass
class _SeqLenInfo:
    """Packed sequence boundaries, under both the old and the new xformers names."""

    max_seqlen: int
    seqstart_py: list[int]

    @classmethod
    def from_seqlens(cls, seqlens: Sequence[int]) -> "_SeqLenInfo":
        starts = [0]
        for n in seqlens:
            starts.append(starts[-1] + int(n))
        return cls(max((int(n) for n in seqlens), default=-1), starts)

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

    @classmethod
    def from_seqlens(cls, q_seqlen: Sequence[int], kv_seqlen: Optional[Sequence[int]] = None,
                     **kwargs: Any) -> Any:
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

    def _block(self, rows: int, cols: int, dtype: torch.dtype, device: Any) -> torch.Tensor:
        return _triangle((rows, cols), dtype, device, cols - rows + 1)


__all__ = [
    "AttentionBias", "LowerTriangularMask", "LowerTriangularMaskWithTensorBias",
    "LowerTriangularFromBottomRightMask", "BlockDiagonalMask", "BlockDiagonalCausalMask",
    "BlockDiagonalCausalFromBottomRightMask",
]
