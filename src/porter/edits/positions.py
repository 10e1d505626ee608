"""Line and column of a few nodes, at the price of one code generation.

LibCST's ``PositionProvider`` records a range for every node of the module: it splits
every token it writes to follow lines and columns, about ten times the cost of a plain
code generation on the files of a large repository (diffusers: 30 s of a 140 s run).
Porter needs the positions of the handful of nodes its rules recorded. :func:`locate`
generates the module's code once with the provider's own codegen state
(``libcst.metadata.position_provider.PositionProvidingCodegenState``, from LibCST's
public ``libcst.metadata`` package: no private module of LibCST is imported), told to
follow only the nodes asked for, and to count lines and columns only when one of them
opens or closes, by LibCST's own rules (syntactic positions where a node declares them,
else the span of its tokens).

``Module._codegen`` drives it, as ``PositionProvider`` itself does. LibCST is pinned
(pyproject.toml) and tests/test_positions.py holds :func:`locate` to
``PositionProvider``'s answers on real files, so an upgrade that moves the hooks fails there.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

_NEWLINE = re.compile(r"\r\n?|\n")


@dataclass(frozen=False)
class _LocatingState(PositionProvidingCodegenState):
    wanted: set = field(default_factory=set)
    ranges: dict = field(default_factory=dict)
    _open: dict = field(default_factory=dict)
    _scanned: int = 0

    # Tokens are only collected; lines and columns are counted when a wanted node needs them.
    def add_token(self, value: str) -> None:
        self.tokens.append(value)

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)

    def _here(self) -> CodePosition:
        for token in self.tokens[self._scanned:]:
            parts = _NEWLINE.split(token)
            if len(parts) == 1:
                self.column += len(token)
            else:
                self.line += len(parts) - 1
                self.column = len(parts[-1])
        self._scanned = len(self.tokens)
        return CodePosition(self.line, self.column)

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
                           provider=PositionProvider(), wanted=set(nodes))
    module._codegen(state)
    return state.ranges
