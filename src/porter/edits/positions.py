"""Line and column of a few nodes, at the price of one code generation.

LibCST's ``PositionProvider`` records a range for every node of the module, which costs
about six code generations; porter needs the positions of the handful of nodes its rules
recorded. :func:`locate` generates the module's code once with a codegen state that
follows LibCST's own rules (syntactic positions where a node declares them, else the
span of its tokens) but only for the nodes asked for.

That state is LibCST's ``CodegenState`` (``libcst._nodes.internal``), driven by
``Module._codegen``: the one use of LibCST's private API in porter. The public way,
``MetadataWrapper(...).resolve(PositionProvider)``, is about ten times slower on the
files of a large repository, and findings need positions in every file that has one.
LibCST is pinned (pyproject.toml) and tests/test_positions.py holds ``locate`` to
``PositionProvider`` on real files, so an upgrade that moves the hooks fails there.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import CodePosition, CodeRange

_NEWLINE = re.compile(r"\r\n?|\n")


@dataclass(frozen=False)
class _LocatingState(CodegenState):
    wanted: set = field(default_factory=set)
    ranges: dict = field(default_factory=dict)
    _open: dict = field(default_factory=dict)
    _scanned: int = 0
    _line: int = 1
    _column: int = 0

    def _here(self) -> CodePosition:
        for token in self.tokens[self._scanned:]:
            parts = _NEWLINE.split(token)
            if len(parts) == 1:
                self._column += len(token)
            else:
                self._line += len(parts) - 1
                self._column = len(parts[-1])
        self._scanned = len(self.tokens)
        return CodePosition(self._line, self._column)

    def before_codegen(self, node: cst.CSTNode) -> None:
        if node in self.wanted:
            self._open[node] = self._here()

    def after_codegen(self, node: cst.CSTNode) -> None:
        if node in self.wanted and node not in self.ranges:
            self.ranges[node] = CodeRange(self._open.pop(node), self._here())

    @contextmanager
    def record_syntactic_position(
        self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None,
        end_node: Optional[cst.CSTNode] = None,
    ) -> Iterator[None]:
        if node not in self.wanted:
            yield
            return
        self.wanted.update(n for n in (start_node, end_node) if n is not None)
        start = self._here()
        try:
            yield
        finally:
            end = self._here()
            if start_node is not None:
                start = self.ranges[start_node].start
            if end_node is not None:
                end = self.ranges[end_node].end
            self.ranges[node] = CodeRange(start, end)


def locate(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, CodeRange]:
    """The same ranges ``PositionProvider`` gives ``nodes`` (nodes of ``module``)."""
    state = _LocatingState(default_indent=module.default_indent, default_newline=module.default_newline,
                           wanted=set(nodes))
    module._codegen(state)
    return state.ranges
