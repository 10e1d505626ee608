"""Twins of xformers' small tensor helpers: ``unbind``, ``scaled_index_add``, ``index_select_cat``.

CUDA with xformers importable: xformers' own function, called with the caller's
arguments. Elsewhere: the PyTorch code xformers documents as each one's equivalent
(xformers 0.0.35, ``xformers/ops/indexing.py`` and ``unbind.py``):

* ``unbind(x, dim)`` is ``torch.unbind(x, dim)`` (xformers only adds a backward that
  avoids a copy when the gradients are contiguous);
* ``scaled_index_add(input, index, source, scaling=None, alpha=1.0)`` is
  ``torch.index_add(input, 0, index, source * scaling, alpha=alpha)`` (``scaling``
  broadcast over the last dimension), the equivalent xformers documents. xformers
  writes into ``input`` as well (inside its own autograd function); the twin returns a
  new tensor and leaves ``input`` as it was, since PyTorch's autograd refuses an
  in-place ``index_add_`` on the views such code passes (``BlockDiagonalMask.split``'s
  outputs). Code that reads the result, as callers do, computes the same;
* ``index_select_cat(sources, indices)`` is
  ``torch.cat([s[i.long()].flatten() for s, i in zip(sources, indices)])``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from . import libs as _libs

__all__ = ["index_select_cat", "scaled_index_add", "unbind"]


def unbind(x: torch.Tensor, dim: int) -> Tuple[torch.Tensor, ...]:
    """xformers.ops.unbind on CUDA; ``torch.unbind`` elsewhere."""
    real = _libs.cuda_attr("xformers.ops", "unbind")
    return real(x, dim) if real is not None else torch.unbind(x, dim)


def scaled_index_add(input: torch.Tensor, index: torch.Tensor, source: torch.Tensor,
                     scaling: Optional[torch.Tensor] = None, alpha: float = 1.0) -> torch.Tensor:
    """xformers.ops.scaled_index_add on CUDA; ``torch.index_add(input, 0, index, source *
    scaling, alpha=alpha)`` elsewhere."""
    real = _libs.cuda_attr("xformers.ops", "scaled_index_add")
    if real is not None:
        return real(input, index, source, scaling, alpha)
    added = source if scaling is None else source * scaling
    return torch.index_add(input, 0, index, added, alpha=alpha)


def index_select_cat(sources: Sequence[torch.Tensor], indices: Sequence[torch.Tensor]) -> torch.Tensor:
    """xformers.ops.index_select_cat on CUDA; the rows ``indices[i]`` of each ``sources[i]``,
    flattened and concatenated, elsewhere."""
    real = _libs.cuda_attr("xformers.ops", "index_select_cat")
    if real is not None:
        return real(sources, indices)
    return torch.cat([s[i.long()].flatten() for s, i in zip(sources, indices)], dim=0)
