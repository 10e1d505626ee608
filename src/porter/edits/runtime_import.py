"""The runtime import, added after the rules ran.

In a run, the runtime import goes where the file's own import style (as isort and ruff
sort it) puts it: one import per line, in the first-party group, since the runtime is
vendored into the repository (``import porter_runtime``, or ``from mypkg import
porter_runtime`` for a copy inside a package, merged into an existing ``from mypkg
import ...``), never before a ``from __future__`` import, a docstring or the comments
at the top. No ``sys.path`` bootstrap: porter.project.vendoring.runtime_home picks a copy the file finds.

torch reads ``PYTORCH_ENABLE_MPS_FALLBACK`` once, at ``import torch``, and that import
usually comes first now: the runtime sets the variable when it is imported before torch,
and otherwise says once, on MPS, how to set it (runtime README).
"""

from __future__ import annotations

import sys
from typing import Any, Optional

import libcst as cst

from porter.edits.import_lines import is_import_line
from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import RUNTIME


def runtime_import(statement: str = f"import {RUNTIME}") -> cst.SimpleStatementLine:
    return cst.parse_statement(statement + "\n")  # type: ignore[return-value]


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_future(small: cst.BaseSmallStatement) -> bool:
    return isinstance(small, cst.ImportFrom) and small.module is not None and dotted_name(small.module) == "__future__"


def _has_future_import(stmt: cst.BaseStatement) -> bool:
    """Any ``from __future__`` import on this line (``from __future__ import x; import torch``
    counts: nothing may go before that line)."""
    return isinstance(stmt, cst.SimpleStatementLine) and any(_is_future(s) for s in stmt.body)


def _header_end(body: list) -> int:
    """The index after the docstring and the lines holding ``from __future__`` imports."""
    index = 1 if body and _is_docstring(body[0]) else 0
    last_future = max((i for i, s in enumerate(body) if _has_future_import(s)), default=-1)
    return max(index, last_future + 1)


def add_runtime_import(module: cst.Module, bootstrap: Any = None) -> cst.Module:
    """Add the runtime import: placed in the file's style when ``bootstrap`` (a
    :class:`porter.project.vendoring.runtime_home.LazyBootstrap`) knows the repository, else right after the
    docstring and ``__future__`` imports (the rule examples' form)."""
    if bootstrap is None:
        body = list(module.body)
        star = _last_star_import(body)
        index = _header_end(body)
        if star is not None and star >= index and not any(map(_uses_runtime_at_import, body[index:star + 1])):
            index = star + 1  # a star import could bind porter_runtime: the import comes after it
        return _insert_at(module, index, runtime_import())
    home = bootstrap(_imported_names(module), before_path_edit=_used_before_path_edit(module))
    return place_import(module, home.statement, home.package, bootstrap.first_party)


def _is_path_edit(stmt: cst.BaseStatement) -> bool:
    """``sys.path.insert(0, ...)``, ``sys.path.append(...)``, ``sys.path[0:0] = ...``,
    ``sys.path += [...]``."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            func = small.value.func
            if isinstance(func, cst.Attribute) and dotted_name(func.value) == "sys.path":
                return True
        targets = ([t.target for t in small.targets] if isinstance(small, cst.Assign)
                   else [small.target] if isinstance(small, cst.AugAssign) else [])
        for target in targets:
            if dotted_name(target.value if isinstance(target, cst.Subscript) else target) == "sys.path":
                return True
    return False


def _used_before_path_edit(module: cst.Module) -> bool:
    """Whether module-level code uses the runtime before the file's first ``sys.path``
    edit (``BUF = torch.empty(1, device=porter_runtime.device(...))`` above
    ``sys.path.insert(0, ROOT)``): the import must come before that edit."""
    body = list(module.body)
    edit = next((k for k, stmt in enumerate(body) if _is_path_edit(stmt)), None)
    return edit is not None and any(_uses_runtime_at_import(stmt) for stmt in body[:edit])


def _insert_at(module: cst.Module, index: int, new: cst.SimpleStatementLine) -> cst.Module:
    body = list(module.body)
    if index < len(body):
        # Blank lines before the next statement now separate it from what precedes the
        # new import; comments stay with the statement they describe.
        following = body[index]
        leading = list(following.leading_lines)
        blanks = 0
        while blanks < len(leading) and leading[blanks].comment is None:
            blanks += 1
        new = new.with_changes(leading_lines=leading[:blanks])
        body[index] = following.with_changes(leading_lines=leading[blanks:])
    elif index and body:
        new = new.with_changes(leading_lines=[])
    body.insert(index, new)
    return module.with_changes(body=body)


def _imported_names(module: cst.Module) -> list[str]:
    """The top-level modules a file imports (absolute imports, first component)."""
    names = []
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                names += [(dotted_name(a.name) or "").split(".")[0] for a in small.names]
            elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
                names.append((dotted_name(small.module) or "").split(".")[0])
    return names


# -- placement in the file's import style ------------------------------------------------

_FUTURE, _STDLIB, _THIRD, _FIRST, _LOCAL = range(5)

def _section(small: cst.BaseSmallStatement, first_party: frozenset) -> int:
    if isinstance(small, cst.ImportFrom):
        if small.relative:
            return _LOCAL
        name = dotted_name(small.module) if small.module is not None else ""
    else:
        name = dotted_name(small.names[0].name)  # type: ignore[union-attr]
    top = (name or "").split(".")[0]
    if top == "__future__":
        return _FUTURE
    if top in first_party:
        return _FIRST
    return _STDLIB if top in sys.stdlib_module_names else _THIRD


def _sort_key(small: cst.BaseSmallStatement) -> tuple:
    """isort's default order inside a section: ``import x`` lines, then ``from x import``."""
    if isinstance(small, cst.ImportFrom):
        return (1, (dotted_name(small.module) or "").lower() if small.module is not None else "")
    return (0, (dotted_name(small.names[0].name) or "").lower())  # type: ignore[union-attr]


def _blocks(body: list, start: int) -> list[tuple[int, int]]:
    """Runs [i, j) of top-level lines that hold only imports, from ``start`` on."""
    out = []
    i = start
    while i < len(body):
        if is_import_line(body[i]) and not _has_future_import(body[i]):
            j = i
            while j < len(body) and is_import_line(body[j]) and not _has_future_import(body[j]):
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def place_import(module: cst.Module, statement: str, package: str, first_party: frozenset) -> cst.Module:
    """Insert ``statement`` where isort would put it in the file's import block, and
    always before the first top-level statement that uses the runtime as the module is
    imported (a script's ``torch.empty(1, device=...)`` between its imports), and after
    the last ``from m import *``, which could bind the name ``porter_runtime`` (a star
    import is where isort stops sorting, too)."""
    placed = _sorted_place(module, statement, package, first_party)
    body = list(module.body)
    star = _last_star_import(body)
    if star is None or any(map(_uses_runtime_at_import, body[:star + 1])):
        return placed
    at = next((k for k, (old, new) in enumerate(zip(body, placed.body)) if old is not new), len(body))
    if at > star:
        return placed
    return _insert_before(module, body, star + 1, runtime_import(statement), first_of_section=False)


def _holds_star(node: cst.CSTNode) -> bool:
    """Whether ``node`` runs a ``from m import *`` at import: in its own statements or
    those of its blocks (``if``, ``try``, ``with``), not in a function or class, and
    never looked for inside an expression."""
    if isinstance(node, cst.SimpleStatementLine):
        return any(isinstance(s, cst.ImportFrom) and isinstance(s.names, cst.ImportStar) for s in node.body)
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.BaseExpression)):
        return False
    return any(_holds_star(child) for child in node.children)


def _last_star_import(body: list) -> Optional[int]:
    """The index of the last top-level statement holding a star import, or None."""
    return next((k for k in range(len(body) - 1, -1, -1) if _holds_star(body[k])), None)


def _sorted_place(module: cst.Module, statement: str, package: str, first_party: frozenset) -> cst.Module:
    body = list(module.body)
    start = _header_end(body)
    blocks = _blocks(body, start)
    # only the statements among the import blocks can come before the new import
    last = blocks[-1][1] if blocks else start
    first_use = next((k for k in range(start, last) if _uses_runtime_at_import(body[k])), len(body))
    blocks = [(i, min(j, first_use)) for i, j in blocks if i < first_use]
    # A package the file's own `sys.path.append(os.getcwd())` makes importable (EVA-CLIP's
    # training/main.py, run as `python training/main.py`): the import comes after that edit.
    used = next((k for k in range(start, len(body)) if _uses_runtime_at_import(body[k])), len(body))
    edits = [k for k in range(start, min(first_use, used)) if _is_path_edit(body[k])]
    if edits and package:
        blocks = [(i, j) for i, j in blocks if i > edits[-1]]
        if not blocks:
            return _insert_alone(module, edits[-1] + 1, statement)
    if not blocks:
        return _insert_alone(module, start, statement)

    def sections(block):
        return [_section(body[k].body[0], first_party) for k in range(*block)]

    new = runtime_import(statement)
    kind = _section(new.body[0], first_party)
    # The block holding the repository's own imports (after a sys.path line, if any);
    # else the first block (the usual one block at the top).
    block = next((b for b in blocks if _FIRST in sections(b)), blocks[0])
    i, j = block
    kinds = sections(block)
    same = [k for k, other in zip(range(i, j), kinds) if other == kind]
    if same:
        if package:
            for k in same:
                merged = _merge_into(body[k], package)
                if merged is not None:
                    body[k] = merged
                    return module.with_changes(body=body)
        key = _sort_key(new.body[0])
        for k in same:
            if _sort_key(body[k].body[0]) > key:
                return _insert_before(module, body, k, new, first_of_section=k == same[0])
        return _insert_before(module, body, same[-1] + 1, new, first_of_section=False)
    # A group of its own, between the groups isort puts before and after it.
    at = next((k for k, other in zip(range(i, j), kinds) if other > kind), j)
    if at == i:  # the first group of the block: it takes the block's leading lines
        new = new.with_changes(leading_lines=body[i].leading_lines)
        body[i] = body[i].with_changes(leading_lines=[cst.EmptyLine()])
    else:
        new = new.with_changes(leading_lines=[cst.EmptyLine()])
        if at < j and not any(line.comment is None for line in body[at].leading_lines):
            body[at] = body[at].with_changes(leading_lines=[cst.EmptyLine(), *body[at].leading_lines])
    body.insert(at, new)
    return module.with_changes(body=body)


class _ImportTimeUse(cst.CSTVisitor):
    """Finds ``porter_runtime`` in what runs when a statement is executed at the top
    level: everything but the bodies of functions (their decorators and defaults run)."""

    def __init__(self) -> None:
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or node.value == RUNTIME

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for decorator in node.decorators:
            decorator.visit(self)
        node.params.visit(self)
        return False


def _uses_runtime_at_import(stmt: cst.CSTNode) -> bool:
    if is_import_line(stmt):
        return False
    finder = _ImportTimeUse()
    stmt.visit(finder)
    return finder.found


def _insert_before(module, body, k, new, first_of_section: bool) -> cst.Module:
    if first_of_section and k < len(body):
        # the new line opens the section: it takes the blank lines (and comments) above it
        new = new.with_changes(leading_lines=body[k].leading_lines)
        body[k] = body[k].with_changes(leading_lines=[])
    body.insert(k, new)
    return module.with_changes(body=body)


def _insert_alone(module: cst.Module, index: int, statement: str) -> cst.Module:
    """A file without imports: the import goes after the header, then a blank line
    (two before a ``def`` or ``class``, as isort puts them)."""
    body = list(module.body)
    new = runtime_import(statement)
    if index < len(body):
        following = body[index]
        want = 2 if isinstance(following, (cst.FunctionDef, cst.ClassDef)) else 1
        leading = list(following.leading_lines)
        blanks = 0
        while blanks < len(leading) and leading[blanks].comment is None:
            blanks += 1
        new = new.with_changes(leading_lines=leading[:blanks] if index else [])
        body[index] = following.with_changes(leading_lines=[cst.EmptyLine()] * want + leading[blanks:])
    elif index and body:
        new = new.with_changes(leading_lines=[])
    body.insert(index, new)
    return module.with_changes(body=body)


def _merge_into(stmt: cst.SimpleStatementLine, package: str) -> Optional[cst.SimpleStatementLine]:
    """``from package import a, b`` with ``porter_runtime`` added in isort's order, the
    list's own layout (one name per line, trailing comma) kept; None when not such a line."""
    small = stmt.body[0]
    if (len(stmt.body) != 1 or not isinstance(small, cst.ImportFrom) or small.relative
            or small.module is None or dotted_name(small.module) != package
            or isinstance(small.names, cst.ImportStar)):
        return None
    names = list(small.names)
    position = len(names)
    for n, alias in enumerate(names):
        name = dotted_name(alias.name) or ""
        if _name_key(name) > _name_key(RUNTIME):
            position = n
            break
    if position < len(names):
        new = cst.ImportAlias(name=cst.Name(RUNTIME), comma=_separator(names))
    else:
        last = names[-1]
        new = cst.ImportAlias(name=cst.Name(RUNTIME), comma=last.comma)
        names[-1] = last.with_changes(comma=_separator(names))
    names.insert(position, new)
    return stmt.with_changes(body=[small.with_changes(names=names)])


def _separator(names: list) -> cst.Comma:
    """The comma between two names of this list (one name per line, or ", ")."""
    for alias in names[:-1]:
        if isinstance(alias.comma, cst.Comma):
            return alias.comma
    last = names[-1]
    if isinstance(last.comma, cst.Comma) and isinstance(last.comma.whitespace_after, cst.ParenthesizedWhitespace):
        return last.comma
    return cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def _name_key(name: str) -> tuple:
    """isort's ``order-by-type``: CONSTANTS, then Classes, then everything else."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return (kind, name.lower())

