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

from porter.rulebase.families.thirdparty.uses import _catches_import_error, _some_imports, tries_import, under
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
        if not tries_import(stmt, roots):
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



_NOQA = cst.TrailingWhitespace(whitespace=cst.SimpleWhitespace("  "), comment=cst.Comment("# noqa: F401"))


class _ProbeImports(cst.CSTTransformer):
    """Marks the import lines of a ``try`` (also under an ``if`` inside it) whose names
    are in ``dead`` with ``# noqa: F401``."""

    def __init__(self, roots: tuple[str, ...], dead: set[str]) -> None:
        super().__init__()
        self.roots, self.dead, self.marked = roots, dead, 0

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> bool:
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> cst.SimpleStatementLine:
        found = _some_imports(cst.IndentedBlock(body=[original]))
        if not found or not all(under(q, self.roots) for _, q in found) or updated.trailing_whitespace.comment:
            return updated
        if not all(bound.split(".")[0] in self.dead for bound, _ in found):
            return updated
        self.marked += 1
        return updated.with_changes(trailing_whitespace=_NOQA)


def mark_probe_imports(original: cst.Module, updated: cst.Module, roots: Iterable[str]) -> cst.Module:
    """An availability probe that stays (its flag is still read) keeps its imports: they
    are the test of whether the library imports, and removing them would make the flag
    True on a CUDA machine without the library. Where the port took their last use, the
    lines are marked ``# noqa: F401`` (imported for the probe), so that a linter finds
    nothing the original did not."""
    from porter.rulebase.families.thirdparty.uses import uses

    roots = tuple(roots)
    body = list(updated.body)
    changed = False
    for index, stmt in enumerate(body):
        if not tries_import(stmt, roots):
            continue
        if any(_some_imports(h.body) for h in stmt.handlers):
            continue  # an import chain (FlashAttention-3, else 2): no probe, and no guard
        old = next((s for s in original.body if isinstance(s, cst.Try) and s.body.deep_equals(stmt.body)), None)
        if old is None:  # its handler may have changed (flags_for_twins), its body not
            continue
        names = {bound.split(".")[0] for bound, _ in _probe_bindings(stmt.body)}
        dead = {n for n in names if uses(updated, [n], stmt) == 0 and uses(original, [n], old) > 0}
        if not dead:
            continue
        marker = _ProbeImports(roots, dead)
        new = stmt.with_changes(body=stmt.body.visit(marker))
        if marker.marked:
            body[index], changed = new, True
    return updated.with_changes(body=body) if changed else updated


def _probe_bindings(body: cst.BaseSuite) -> list[tuple[str, str]]:
    found = list(_some_imports(body))
    for line in body.body if isinstance(body, cst.IndentedBlock) else []:
        if isinstance(line, cst.If):
            found += _probe_bindings(line.body)
    return found
