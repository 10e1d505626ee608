"""Availability flags that the runtime's twins make true off CUDA.

Where every use of a CUDA-only library in a module now runs a porter_runtime twin, the
module's own flag (``XFORMERS_AVAILABLE = False`` in ``except ImportError:``) no longer
means "nothing to run"; a branch it still selects may stop the program where the twins
would run. :func:`flags_for_twins` sets such a flag's False to
``porter_runtime.twins_stand_in("<library>")``: False on CUDA, as before, and True
elsewhere. The rules of the families that have twins (xformers, flash_attn) call it
from ``leave_Module``.
"""
from __future__ import annotations

from typing import Iterable

import libcst as cst

from porter.rulebase.families.thirdparty.uses import _catches_import_error, _nested_imports, _some_imports, under
from porter.rulebase.walk import code_children
def _reads(node: cst.CSTNode, names: set[str]) -> set[str]:
    """Which of ``names`` ``node`` reads (a field walk)."""
    found, stack = set(), [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name) and current.value in names:
            found.add(current.value)
        stack.extend(code_children(current))
    return found


def _raises(node: cst.CSTNode) -> bool:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Raise):
            return True
        if not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            stack.extend(code_children(current))
    return False


def guarding_flags(module: cst.Module, flags: set[str]) -> set[str]:
    """The flags an ``if`` still tests where one of its branches may raise
    (``if not FLAG: if bias is not None: raise ...; return slow(x)``): a stop that is
    not the whole block, so :func:`without_stops` keeps it."""
    found: set[str] = set()
    stack: list[cst.CSTNode] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.If):
            tested = _reads(node.test, flags)
            if tested and (_raises(node.body) or (node.orelse is not None and _raises(node.orelse))):
                found |= tested
        stack.extend(code_children(node))
    return found


class _FlagValues(cst.CSTTransformer):
    """Sets ``FLAG = False`` in an ``except ImportError:`` to ``value``."""

    def __init__(self, flags: set[str], value: cst.BaseExpression) -> None:
        self.flags, self.value, self.changed = flags, value, []
        self.depth = 0

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> bool:
        self.depth += _catches_import_error(node)
        return True

    def leave_ExceptHandler(self, original: cst.ExceptHandler, updated: cst.ExceptHandler) -> cst.ExceptHandler:
        self.depth -= _catches_import_error(original)
        return updated

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if self.depth and isinstance(original.value, cst.Name) and original.value.value == "False" \
                and any(isinstance(t.target, cst.Name) and t.target.value in self.flags for t in original.targets):
            self.changed.append(original)
            return updated.with_changes(value=self.value)
        return updated


def flags_for_twins(rule, original: cst.Module, updated: cst.Module, roots: Iterable[str], flags: set[str],
                    ported: bool, library: str) -> cst.Module:
    """Where every use of ``library`` in the module now runs a twin, the module's own
    availability flag (``XFORMERS_AVAILABLE = False`` in ``except ImportError:``) no longer
    means "nothing to run": a branch the flag still selects may stop the program off
    CUDA even though the twins would run there. Its False becomes
    ``porter_runtime.twins_stand_in("<library>")``: False on CUDA (the original's value),
    True elsewhere, where the twins run."""
    if not flags or not ported:
        return updated
    guarding = guarding_flags(updated, flags)
    if not guarding:
        return updated
    roots = tuple(roots)
    value = cst.Call(rule.runtime("twins_stand_in"), args=[cst.Arg(cst.SimpleString(f'"{library}"'))])
    body = list(updated.body)
    for index, stmt in enumerate(body):
        if not isinstance(stmt, cst.Try) or not (any(under(q, roots) for _, q in _some_imports(stmt.body))
                                                 or _nested_imports(stmt.body, roots)):
            continue
        flipper = _FlagValues(guarding, value)
        new = stmt.visit(flipper)
        old = next((s for s in original.body if isinstance(s, cst.Try) and s.deep_equals(stmt)), None)
        if not flipper.changed or old is None or rule.ctx.suppressed(old, rule.code):
            continue
        names = ", ".join(f"`{f}`" for f in sorted(guarding))
        rule.ctx.record(rule, old, "rewrite", f"{names} stays False on CUDA without {library}, as before; off "
                        f"CUDA it is True: every {library} call in this file now runs porter_runtime's twin there, "
                        "so the branches it stops no longer stop")
        body[index] = new
    return updated.with_changes(body=body)

