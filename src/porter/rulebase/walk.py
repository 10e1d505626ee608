"""Finding every node of some types in a LibCST tree, fast.

``module.visit(visitor)`` rebuilds every node it passes (LibCST's visitors and
transformers share one path) and calls hooks for every whitespace and punctuation
node: a rule's extra pass over a large module costs as much as its parse.
:func:`nodes_of` reads the nodes' fields instead and skips the fields that can only
hold whitespace, punctuation or operators, about fifteen times faster. It yields in
no particular order and has no leave hooks: for passes that only gather facts.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Iterator, Union

import libcst as cst

#: Node kinds that never hold an expression or a statement.
_TRIVIA = (
    cst.BaseParenthesizableWhitespace, cst.EmptyLine, cst.TrailingWhitespace, cst.Newline, cst.Comment,
    cst.Comma, cst.Colon, cst.Dot, cst.AssignEqual, cst.Semicolon, cst.LeftParen, cst.RightParen,
    cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace, cst.Asynchronous,
    cst.BaseAugOp, cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp,
)

_FIELDS: dict[type, tuple[str, ...]] = {}


def nodes_of(root: cst.CSTNode, types: Union[type, tuple[type, ...]]) -> Iterator[cst.CSTNode]:
    """Every node under ``root`` (itself included) that is an instance of ``types``."""
    stack: list = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, types):
            yield node
        stack.extend(code_children(node))


def code_children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The children of ``node`` other than trivia, in no particular order (for a walk
    of one's own that prunes some subtrees)."""
    for name in _fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            yield value
        elif isinstance(value, (tuple, list)):
            yield from (item for item in value if isinstance(item, cst.CSTNode))


def _fields(kind: type) -> tuple[str, ...]:
    """The fields of a node class that may hold more than trivia (all of them where
    the class's annotations can't be read)."""
    found = _FIELDS.get(kind)
    if found is None:
        names = tuple(f.name for f in dataclasses.fields(kind)) if dataclasses.is_dataclass(kind) else ()
        try:
            hints = typing.get_type_hints(kind)
        except (NameError, TypeError):  # pragma: no cover - an annotation LibCST can't resolve
            hints = {}
        found = _FIELDS[kind] = tuple(n for n in names if n not in hints or _may_hold_code(hints[n]))
    return found


def _may_hold_code(hint: object) -> bool:
    """Whether a field annotated ``hint`` may hold a node other than trivia."""
    args = typing.get_args(hint)
    if args:
        return any(_may_hold_code(arg) for arg in args)
    if not isinstance(hint, type):
        return False  # a Literal's values, None
    return issubclass(hint, cst.CSTNode) and not issubclass(hint, _TRIVIA)
