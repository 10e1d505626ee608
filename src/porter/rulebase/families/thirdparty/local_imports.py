"""A function's own import of a package, removed once every use of what it binds was
ported (the engine's import clean-up sees top-level imports only)."""

from __future__ import annotations

from collections import Counter
from typing import Optional, Sequence

import libcst as cst

from porter.rulebase.families.thirdparty.uses import under


class LocalImports:
    """``from <roots>... import X`` inside a block goes once every use of X in the file
    was a call the rule rewrote (counted in ``ported`` by bare name)."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = roots
        self.ported: Counter[str] = Counter()
        self._loads: Optional[Counter[str]] = None

    def body(self, module: cst.Module, body):
        kept = [stmt for stmt in body if not self._dead(module, stmt)]
        if len(kept) == len(body):
            return body
        if kept and body[0] is not kept[0]:
            kept[0] = kept[0].with_changes(leading_lines=body[0].leading_lines)
        return kept or body

    def _dead(self, module: cst.Module, stmt: cst.BaseStatement) -> bool:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return False
        node = stmt.body[0]
        if not isinstance(node, cst.ImportFrom) or node.relative or isinstance(node.names, cst.ImportStar):
            return False
        if not under(cst.Module([]).code_for_node(node.module) if node.module else None, self.roots):
            return False
        names = [(a.asname.name if a.asname else a.name) for a in node.names]
        if not all(isinstance(n, cst.Name) for n in names):
            return False
        if self._loads is None:
            self._loads = _name_loads(module)
        return all(self.ported[n.value] and self.ported[n.value] == self._loads[n.value] for n in names)


class _Loads(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.counts[node.value] += 1


def _name_loads(module: cst.Module) -> Counter:
    """How often each name occurs in the module outside import statements."""
    loads = _Loads()
    module.visit(loads)
    return loads.counts
