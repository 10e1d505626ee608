"""Shared pieces of the third-party rules (TP1xx-TP6xx): finding uses of a package's
names, checking call arguments, and telling a guarded import from an unguarded one.

No Rule subclass lives here (the registry would pick it up); the mixin below is mixed
into the rules that report every use of a package they cannot rewrite.
"""
from __future__ import annotations

from typing import Iterable, Optional

import libcst as cst

from porter.matching import Ambiguous


def under(name: Optional[str], prefixes: Iterable[str]) -> bool:
    """Whether ``name`` is one of ``prefixes`` or inside one (``a.b`` is under ``a``)."""
    if name is None or isinstance(name, Ambiguous):
        return False
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def arguments_fit(call: cst.Call, max_positional: int, keywords: frozenset[str]) -> bool:
    """True when ``call`` passes at most ``max_positional`` positional arguments, only
    keywords from ``keywords``, and no ``*args`` / ``**kwargs``."""
    positional = 0
    for arg in call.args:
        if arg.star:
            return False
        if arg.keyword is None:
            positional += 1
        elif arg.keyword.value not in keywords:
            return False
    return positional <= max_positional


def literal_is(node: cst.BaseExpression, *names: str) -> bool:
    return isinstance(node, cst.Name) and node.value in names


class UseFinder:
    """Mixin: calls ``self.on_use(node, qualname, call)`` for every outermost Name or
    Attribute chain that resolves under ``self.prefixes`` (``call`` is the Call whose
    callee the chain is, else None). Names inside imports are not uses."""

    prefixes: tuple[str, ...] = ()

    def _inner_nodes(self) -> set[int]:
        if not hasattr(self, "_inner"):
            self._inner: set[int] = set()
            self._callees: dict[int, cst.Call] = {}
        return self._inner

    def visit_Call(self, node: cst.Call) -> None:
        self._inner_nodes()
        self._callees[id(node.func)] = node

    def visit_Attribute(self, node: cst.Attribute) -> None:
        inner = self._inner_nodes()
        inner.add(id(node.value))
        if id(node) not in inner:
            self._check_use(node)

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._inner_nodes():
            self._check_use(node)

    def _check_use(self, node: cst.BaseExpression) -> None:
        name = self.qualname(node)  # type: ignore[attr-defined]
        if under(name, self.prefixes):
            self.on_use(node, name, self._callees.get(id(node)))  # type: ignore[arg-type]

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        raise NotImplementedError


_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError"}


def _catches_import_error(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    for kind in kinds:
        value = kind.value if isinstance(kind, cst.Element) else kind
        if isinstance(value, cst.Name) and value.value in _IMPORT_ERRORS:
            return True
    return False


class GuardTracker:
    """Mixin: ``self.guarded()`` is True inside a ``try`` whose handlers catch ImportError,
    ``self.flag_test()`` the test of the innermost enclosing ``if`` (or None)."""

    def _stacks(self) -> tuple[list[bool], list[cst.If]]:
        if not hasattr(self, "_try_stack"):
            self._try_stack: list[bool] = []
            self._if_stack: list[cst.If] = []
        return self._try_stack, self._if_stack

    def visit_Try(self, node: cst.Try) -> None:
        self._stacks()[0].append(any(_catches_import_error(h) for h in node.handlers))

    def leave_Try(self, original: cst.Try, updated: cst.Try) -> cst.Try:
        self._stacks()[0].pop()
        return updated

    def visit_If(self, node: cst.If) -> None:
        self._stacks()[1].append(node)

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        self._stacks()[1].pop()
        return updated

    def guarded(self) -> bool:
        return any(self._stacks()[0])

    def flag_test(self) -> Optional[cst.If]:
        stack = self._stacks()[1]
        return stack[-1] if stack else None
