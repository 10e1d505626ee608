"""Line and column of the nodes porter's rules recorded, from LibCST's public API.

LibCST's ``PositionProvider`` (``libcst.metadata``), resolved through a ``MetadataWrapper``
that does not copy the module (``unsafe_skip_copy=True``, so the ranges are keyed by the
very nodes the rules recorded): syntactic positions where a node declares them, else the
span of its tokens. It records a range for every node of the module in one pass, so a
file's positions are computed once: :func:`locate` returns them all, and the engine keeps
them for the rest of the file (``FileContext.located``).

(porter once drove LibCST's private codegen state to locate only the nodes asked for;
the public provider costs more per file with findings, and no private module of LibCST
is imported. tests/test_positions.py holds :func:`locate` to the provider's answers.)
"""

from __future__ import annotations

from typing import Iterable, Mapping

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider


def locate(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> Mapping[cst.CSTNode, CodeRange]:
    """The ranges ``PositionProvider`` gives the nodes of ``module``: those of ``nodes``
    and, computed in the same pass, every other node's (callers keep them all)."""
    del nodes  # one pass finds every node's range; the argument says which the caller needs
    return MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
