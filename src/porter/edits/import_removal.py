"""The removal of module-level imports a rewrite left unused, without ``libcst.codemod``.

``porter.edits.unused_imports`` decides which imports lost their last use (the counts of
porter's own scope model before and after the rules ran); this module takes them out of
the module's text. It edits the lines as LibCST's ``RemoveImportsVisitor`` does (a name
dropped from a list, the list's commas and parentheses kept right, a line with nothing
left removed) and keeps its safety checks: an import still in use stays, whether a
name reads it, a module-level ``__all__`` exports it or a string annotation
(``"torch.Tensor"``) names it. Importing ``libcst.codemod`` costs about a second per
process (its ``matchers`` module) and its metadata pass copies the whole module; this
costs one walk of the module's top level.

Only imports in the module's own scope are edited (top-level lines and those inside its
``if``/``try``/``with`` blocks): the scheduled imports are top-level ones, and an import
of the same name inside a function is the user's, used or not.
"""

from __future__ import annotations

import ast
from typing import Callable, Iterable, Optional, Union

import libcst as cst

from porter.edits.import_lines import alias_asname
from porter.rulebase.matching import dotted_name
from porter.rulebase.scopes import ast_dotted_name

#: What is scheduled for removal: (module, imported object or None, ``as`` name or None),
#: as ``RemoveImportsVisitor.remove_unused_import`` takes them.
Scheduled = tuple[str, Optional[str], Optional[str]]


def remove_imports(module: cst.Module, scheduled: Iterable[Scheduled], kept: list[cst.SimpleStatementLine],
                   in_use: Callable[[str, str], bool]) -> cst.Module:
    """``module`` less the scheduled imports that nothing uses any more.

    ``kept`` lines (``# porter: ignore``) are left as they are. ``in_use(name, target)``
    says whether a read of ``name`` may still mean the import of ``target`` (porter's
    scope model of ``module``); exports and string annotations are checked here."""
    remover = _Remover(list(scheduled), kept, _Protected(module), in_use)
    return module.visit(remover)


class _Protected:
    """The names ``module`` uses in ways a scope model does not see: exported by a
    module-level ``__all__``, or named in a string annotation."""

    def __init__(self, module: cst.Module) -> None:
        self.exported: set[str] = set()
        self.annotated: set[str] = set()
        module.visit(_Gather(self))

    def __contains__(self, name: str) -> bool:
        return name in self.exported or name in self.annotated


class _Gather(cst.CSTVisitor):
    def __init__(self, into: _Protected) -> None:
        super().__init__()
        self.into = into
        self.depth = 0  # inside a function or class body

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth += 1

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.depth -= 1

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.depth += 1

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self.depth -= 1

    def visit_Assign(self, node: cst.Assign) -> None:
        if not self.depth and any(isinstance(t.target, cst.Name) and t.target.value == "__all__"
                                  for t in node.targets):
            self._export(node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if not self.depth and isinstance(node.target, cst.Name) and node.target.value == "__all__" \
                and node.value is not None:
            self._export(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if not self.depth and isinstance(node.target, cst.Name) and node.target.value == "__all__":
            self._export(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not self.depth and isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) \
                and func.value.value == "__all__" and func.attr.value in ("append", "extend", "insert"):
            for arg in node.args:
                self._export(arg.value)
        elif _called_name(func) in ("TypeVar", "cast", "NewType"):
            for arg in node.args:
                self._annotation(arg.value)

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self._annotation(node.annotation)

    def _export(self, value: cst.BaseExpression) -> None:
        for string in _strings(value):
            self.into.exported.add(string)

    def _annotation(self, value: cst.BaseExpression) -> None:
        for text in _strings(value):
            try:
                tree = ast.parse(text.strip(), mode="eval")
            except (SyntaxError, ValueError):
                continue
            for node in ast.walk(tree):
                name = ast_dotted_name(node)
                while name:
                    self.into.annotated.add(name)
                    name = name.rpartition(".")[0]


def _called_name(func: cst.BaseExpression) -> Optional[str]:
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


def _strings(node: cst.CSTNode) -> list[str]:
    """The values of the string literals in ``node`` (f-strings aside)."""
    found: list[str] = []

    class Strings(cst.CSTVisitor):
        def visit_SimpleString(self, string: cst.SimpleString) -> None:
            value = string.evaluated_value
            if isinstance(value, str):
                found.append(value)

        def visit_ConcatenatedString(self, string: cst.ConcatenatedString) -> bool:
            value = string.evaluated_value
            if isinstance(value, str):
                found.append(value)
            return False

    node.visit(Strings())
    return found


def _bound(alias: cst.ImportAlias) -> list[str]:
    """The names whose use keeps ``alias``: its ``as`` name, or each prefix of
    ``a.b.c`` (``a.b.c``, ``a.b``, ``a``), as LibCST's unused-import check reads them."""
    asname = alias_asname(alias)
    if asname is not None:
        return [asname]
    name = dotted_name(alias.name) or ""
    found = []
    while name:
        found.append(name)
        name = name.rpartition(".")[0]
    return found


def _merge_whitespace_after(left, right):
    """LibCST's ``RemoveImportsVisitor`` merge: a removed name's comma hands its line
    break (and comment lines) to the name before it."""
    if not isinstance(right, cst.ParenthesizedWhitespace):
        return left
    if not isinstance(left, cst.ParenthesizedWhitespace):
        return right
    return left.with_changes(empty_lines=tuple(line for line in right.empty_lines if line.comment is not None))


class _Remover(cst.CSTTransformer):
    def __init__(self, scheduled: list[Scheduled], kept: list[cst.SimpleStatementLine], protected: _Protected,
                 in_use: Callable[[str, str], bool]) -> None:
        super().__init__()
        self.modules: dict[str, Optional[str]] = {m: a for m, o, a in scheduled if o is None}
        self.objects: dict[str, set[tuple[str, Optional[str]]]] = {}
        for module, obj, asname in scheduled:
            if obj is not None:
                self.objects.setdefault(module, set()).add((obj, asname))
        self.kept = kept
        self.protected = protected
        self.in_use = in_use
        self.depth = 0  # inside a function, class or lambda

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            self.depth += 1
        if isinstance(node, cst.SimpleStatementLine) and self.kept \
                and any(node.deep_equals(k) for k in self.kept):
            return False
        return super().on_visit(node)

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):
        if isinstance(original, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            self.depth -= 1
        return super().on_leave(original, updated)

    def _unused(self, alias: cst.ImportAlias, target: str) -> bool:
        names = _bound(alias)
        if any(name in self.protected for name in names):
            return False
        return not any(self.in_use(name, target) for name in names)

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> Union[cst.Import, cst.RemovalSentinel]:
        if self.depth:
            return updated
        keep = []
        for alias in original.names:
            name = dotted_name(alias.name) or ""
            if name not in self.modules or alias_asname(alias) != self.modules[name] \
                    or not self._unused(alias, name if alias_asname(alias) else name.split(".")[0]):
                keep.append(alias)
        if keep == list(original.names):
            return updated
        if not keep:
            return cst.RemoveFromParent()
        if keep[-1] is not original.names[-1]:
            keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=keep)

    def leave_ImportFrom(self, original: cst.ImportFrom,
                         updated: cst.ImportFrom) -> Union[cst.ImportFrom, cst.RemovalSentinel]:
        names = original.names
        if self.depth or isinstance(names, cst.ImportStar) or original.relative or original.module is None:
            return updated
        module = dotted_name(original.module) or ""
        if module not in self.objects or module == "__future__":
            return updated
        remove = self.objects[module]
        keep: list[cst.ImportAlias] = []
        changes: dict = {}
        for alias in names:
            obj = dotted_name(alias.name) or ""
            if (obj, alias_asname(alias)) not in remove or not self._unused(alias, f"{module}.{obj}"):
                keep.append(alias)
                continue
            comma = alias.comma
            if isinstance(comma, cst.Comma):
                if keep:
                    prev = keep[-1]
                    if isinstance(prev.comma, cst.Comma):
                        prev = prev.with_deep_changes(prev.comma, whitespace_after=_merge_whitespace_after(
                            prev.comma.whitespace_after, comma.whitespace_after))
                    else:
                        prev = prev.with_changes(comma=comma)
                    keep[-1] = prev
                elif isinstance(updated.lpar, cst.LeftParen):
                    changes["lpar"] = updated.lpar.with_changes(whitespace_after=_merge_whitespace_after(
                        updated.lpar.whitespace_after, comma.whitespace_after))
        if len(keep) == len(names) and not changes:
            return updated
        if not keep:
            return cst.RemoveFromParent()
        if keep[-1] is not names[-1]:
            keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return updated.with_changes(names=keep, **changes)
