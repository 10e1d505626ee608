"""Import changes after the rules ran: add the runtime import, drop dead imports.

In a run, the runtime import goes where the file's own import style (as isort and ruff
sort it) puts it: one import per line, in the first-party group, since the runtime is
vendored into the repository (``import porter_runtime``, or ``from mypkg import
porter_runtime`` for a copy inside a package, merged into an existing ``from mypkg
import ...``), never before a ``from __future__`` import, a docstring or the comments
at the top. No ``sys.path`` bootstrap: porter.project.runtime_home picks a copy the file finds.

torch reads ``PYTORCH_ENABLE_MPS_FALLBACK`` once, at ``import torch``, and that import
usually comes first now: the runtime sets the variable when it is imported before torch,
and otherwise says once, on MPS, how to set it (runtime README).

Imports that a rewrite left unused (``from torch import device`` once every
``device("cuda")`` became ``porter_runtime.device()``) are removed with LibCST's
``RemoveImportsVisitor``, and only those: an import the user had and did not use
before stays, so nothing the rules did not touch changes. The blank lines around a
removed import and the trailing comma of an edited import list are kept.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, Optional, Protocol

import libcst as cst

from porter.rulebase.cuda_packages import IMPORT_ROOTS
from porter.rulebase.guards import parse
from porter.rulebase.matching import Resolver, dotted_name
from porter.rulebase.rule import RUNTIME, WholeFile

if TYPE_CHECKING:  # pragma: no cover
    from porter.engine.segments import Reduced
    from porter.project.model import ProjectModel


class RulePass(Protocol):
    """What the import clean-up needs of the rule pass that ran over a file (the
    engine's ``porter.engine.context.FileContext`` is one)."""

    #: The module as the rules saw it, before their rewrites.
    module: cst.Module
    #: Its names, resolved before the rewrites.
    resolver: Resolver
    #: Set when ``module`` has some definitions stubbed (porter.engine.segments).
    reduced: Optional["Reduced"]

    #: The file's bytes (before migration).
    source: bytes
    #: The file's path, and the repository-wide model (porter.project) or None.
    path: str
    project: Optional["ProjectModel"]
    #: (original node, what replaced it) for each node the rule pass replaced: a node,
    #: a ``FlattenSentinel`` or a ``RemovalSentinel``.
    replaced: list

    def recorded(self) -> bool:
        """Whether any rule recorded a rewrite or a finding."""
        ...

    def ignored(self, node: cst.CSTNode) -> bool:
        """Whether a ``# porter: ignore`` comment sits on one of the node's lines."""
        ...


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
    :class:`porter.project.runtime_home.LazyBootstrap`) knows the repository, else right after the
    docstring and ``__future__`` imports (the rule examples' form)."""
    if bootstrap is None:
        return _insert_at(module, _header_end(list(module.body)), runtime_import())
    home = bootstrap(_imported_names(module))
    return place_import(module, home.statement, home.package, bootstrap.first_party)


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


def _is_import_line(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(
        isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


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
        if _is_import_line(body[i]) and not _has_future_import(body[i]):
            j = i
            while j < len(body) and _is_import_line(body[j]) and not _has_future_import(body[j]):
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def place_import(module: cst.Module, statement: str, package: str, first_party: frozenset) -> cst.Module:
    """Insert ``statement`` where isort would put it in the file's import block, and
    always before the first top-level statement that uses the runtime as the module is
    imported (a script's ``torch.empty(1, device=...)`` between its imports)."""
    body = list(module.body)
    start = _header_end(body)
    blocks = _blocks(body, start)
    # only the statements among the import blocks can come before the new import
    last = blocks[-1][1] if blocks else start
    first_use = next((k for k in range(start, last) if _uses_runtime_at_import(body[k])), len(body))
    blocks = [(i, min(j, first_use)) for i, j in blocks if i < first_use]
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
    if _is_import_line(stmt):
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


def _has_comma(alias: cst.ImportAlias) -> bool:
    return isinstance(alias.comma, cst.Comma)


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


def remove_unused(new_module: cst.Module, ctx: RulePass) -> cst.Module:
    """Remove the top-level imports whose every use a rule rewrote."""
    if not ctx.recorded() or not _may_lose_a_use(ctx):
        return new_module
    # libcst.codemod is slow to import; only files that lost an import's last use need it.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import RemoveImportsVisitor

    before = ctx.resolver.use_counts()
    after = Resolver(new_module).use_counts()
    context = CodemodContext()
    scheduled = False
    kept = _ignored_imports(ctx)
    for stmt in ctx.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine) or stmt in kept:
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                scheduled |= _remove_dead_module_imports(small, before, after, context, ctx)
                continue
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            if small.relative or small.module is None:
                continue
            module_name = dotted_name(small.module) or ""
            for alias in small.names:
                obj = dotted_name(alias.name) or ""
                asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
                key = (asname or obj, f"{module_name}.{obj}")
                if before[key] and not after[key] and not _read_elsewhere(ctx, key[0]):
                    _not_used_in_stubs(ctx, key[0])
                    RemoveImportsVisitor.remove_unused_import(context, module_name, obj, asname)
                    scheduled = True
    if not scheduled:
        return new_module
    return keep_layout(new_module, _remover(context, kept).transform_module(new_module))


def _read_elsewhere(ctx: RulePass, name: str) -> bool:
    """Whether another module of the repository imports ``name`` from this one (a
    re-export: ``from pkg import GradScaler`` elsewhere): then the import stays."""
    project = getattr(ctx, "project", None)
    return project is not None and project.read_elsewhere(ctx.path, name)


def _may_lose_a_use(ctx: RulePass) -> bool:
    """Whether an import may have lost its last use: the two full scope passes below
    (over the module before and after the rewrites) answer exactly, this cheaply says
    when they can only find nothing. Only a replaced node can take a use of a name a
    top-level import binds; a replacement adds uses (which can't empty a count) unless
    it binds a name; the runtime's import binds ``porter_runtime``. So nothing is lost
    when no replacement binds a name and each import-bound name of the replaced nodes
    is bound by imports alone (``Resolver.simple``) and loaded more often in the file
    (the ``ast`` of its bytes: stubbed definitions count) than in the replaced nodes."""
    bound = _top_level_import_names(ctx.module)
    if not bound:
        return False
    if RUNTIME in bound:
        return True
    taken = _Names()
    for original, replacement in ctx.replaced:
        original.visit(taken)
        for node in getattr(replacement, "nodes", (replacement,)):  # a FlattenSentinel holds several
            if isinstance(node, cst.CSTNode) and _binds(node):
                return True
    at_risk = [name for name in taken.counts if name in bound]
    if not at_risk:
        return False
    if not all(ctx.resolver.simple(name) for name in at_risk):
        return True
    tree = parse(ctx.source)
    if tree is None:
        return True
    loads = Counter(node.id for node in ast.walk(tree) if type(node) is ast.Name and node.id in at_risk)
    return any(loads[name] <= taken.counts[name] for name in at_risk)


class _Names(cst.CSTVisitor):
    """How often each name occurs (as any ``Name`` node) in the nodes visited."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def visit_Name(self, node: cst.Name) -> None:
        self.counts[node.value] += 1


#: The nodes that bind a name (or open a scope whose bindings a count can't follow).
_BINDERS = (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.For, cst.With, cst.FunctionDef,
            cst.ClassDef, cst.Lambda, cst.CompFor, cst.Import, cst.ImportFrom, cst.Global, cst.Nonlocal,
            cst.ExceptHandler, cst.MatchAs, cst.MatchStar, cst.MatchMapping, cst.Del,
            *(getattr(cst, name) for name in ("TypeAlias", "TypeParam") if hasattr(cst, name)))


class _BinderFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, _BINDERS):
            self.found = True
        return not self.found


def _binds(node: cst.CSTNode) -> bool:
    finder = _BinderFinder()
    node.visit(finder)
    return finder.found


def _top_level_import_names(module: cst.Module) -> set[str]:
    """The names the module's top-level import statements bind."""
    names = set()
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not isinstance(small, (cst.Import, cst.ImportFrom)) or isinstance(small.names, cst.ImportStar):
                continue
            for alias in small.names:
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    names.add(alias.asname.name.value)
                else:
                    names.add((dotted_name(alias.name) or "").split(".")[0])
    return names


def _ignored_imports(ctx: RulePass) -> list[cst.SimpleStatementLine]:
    """The import lines with a ``# porter: ignore`` comment (any codes): the user asked
    porter to leave them, so the clean-up neither removes nor edits them, even once a
    rewrite on another line took their names' last use."""
    return [stmt for stmt in ctx.module.body
            if _is_import_line(stmt) and ctx.ignored(stmt)]  # type: ignore[arg-type]


def _remover(context, kept: list[cst.SimpleStatementLine]):
    """LibCST's RemoveImportsVisitor that leaves the ``kept`` lines as they are: it
    removes a scheduled name from every import binding it, a kept line among them."""
    from libcst.codemod.visitors import RemoveImportsVisitor

    class KeepIgnored(RemoveImportsVisitor):
        def leave_SimpleStatementLine(self, original, updated):
            return original if any(original.deep_equals(k) for k in kept) else updated

    return KeepIgnored(context)


def keep_layout(before: cst.Module, after: cst.Module) -> cst.Module:
    """``after`` (``before`` less some imports) with the layout LibCST's removal loses:
    no blank line left at the top of the file, the blank line that separated a removed
    import's group kept for the next import, and an edited list's trailing comma kept."""
    old, new = list(before.body), list(after.body)
    out: list = []
    i = 0
    for stmt in new:
        removed = []
        while i < len(old) and not _same_statement(old[i], stmt):
            removed.append(old[i])
            i += 1
        if i < len(old):
            stmt = _keep_trailing_comma(old[i], stmt)
            i += 1
        if removed or not out:
            stmt = _after_removal(stmt, removed[0] if removed else None, at_start=not out)
        out.append(stmt)
    return after.with_changes(body=out)


def _same_statement(old: cst.BaseStatement, new: cst.BaseStatement) -> bool:
    """``new`` is ``old`` itself, or ``old`` with some imported names removed."""
    if old.deep_equals(new):
        return True
    if not (_is_import_line(old) and _is_import_line(new)) or len(old.body) != len(new.body):  # type: ignore[attr-defined]
        return False
    for a, b in zip(old.body, new.body):  # type: ignore[attr-defined]
        if type(a) is not type(b):
            return False
        if isinstance(a, cst.ImportFrom) and not (
                a.module is not None and b.module is not None and a.module.deep_equals(b.module)
                and a.relative == b.relative):
            return False
        if isinstance(b.names, cst.ImportStar) or isinstance(a.names, cst.ImportStar):
            return False
        if not {_alias_key(n) for n in b.names} <= {_alias_key(n) for n in a.names}:
            return False
    return True


def _alias_key(alias: cst.ImportAlias) -> tuple:
    return (dotted_name(alias.name), alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name)
            else None)


def _blank_prefix(stmt: cst.BaseStatement) -> int:
    count = 0
    for line in stmt.leading_lines:
        if line.comment is not None:
            break
        count += 1
    return count


def _after_removal(stmt, removed, at_start: bool):
    own = _blank_prefix(stmt)
    if at_start:
        want = 0 if removed is not None else own
    elif removed is not None and _is_import_line(stmt):
        want = max(own, _blank_prefix(removed))
    else:
        want = own
    if want == own:
        return stmt
    return stmt.with_changes(leading_lines=[cst.EmptyLine()] * want + list(stmt.leading_lines[own:]))


def _keep_trailing_comma(old: cst.BaseStatement, new: cst.BaseStatement) -> cst.BaseStatement:
    if not (_is_import_line(old) and _is_import_line(new)) or old.deep_equals(new):
        return new
    body = []
    for a, b in zip(old.body, new.body):  # type: ignore[attr-defined]
        if (isinstance(a, cst.ImportFrom) and isinstance(b, cst.ImportFrom) and isinstance(a.names, (list, tuple))
                and isinstance(b.names, (list, tuple)) and b.names and isinstance(a.names[-1].comma, cst.Comma)
                and not isinstance(b.names[-1].comma, cst.Comma)):
            names = list(b.names)
            names[-1] = names[-1].with_changes(comma=a.names[-1].comma)
            b = b.with_changes(names=names)
        body.append(b)
    return new.with_changes(body=body)  # type: ignore[attr-defined]


#: Packages that do not install without CUDA (porter.rulebase.cuda_packages). A plain ``import``
#: of one of them that a rewrite left without a use would still fail on the port, so it
#: goes too; so does a
#: standard-library module (``import sys`` once ``sys.exit`` became
#: ``porter_runtime.require_device``). Other plain imports (``import torch``) stay even
#: when unused: importing a library may register backends or ops.
CUDA_ONLY_PACKAGES = IMPORT_ROOTS


def _not_used_in_stubs(ctx: RulePass, name: str) -> None:
    """A use inside a definition the engine stubbed (porter.engine.segments) is invisible
    to the counts: only the whole file can tell whether the import is dead."""
    if ctx.reduced is not None and name in ctx.reduced.stub_names:
        raise WholeFile(name)


#: Submodules that ``import torch`` itself imports: dropping ``import torch.distributed as
#: dist`` once PT301 rewrote its last use (``dist.init_process_group``) changes nothing.
_LOADED_BY_TORCH = frozenset({
    "torch.distributed", "torch.cuda", "torch.cuda.amp", "torch.amp", "torch.nn", "torch.nn.functional",
    "torch.nn.parallel", "torch.utils.data", "torch.backends.cuda", "torch.backends.cudnn",
})


def _remove_dead_module_imports(stmt: cst.Import, before, after, context, ctx) -> bool:
    """Schedule ``import a.b`` / ``import a.b as c`` of a CUDA-only package, a
    standard-library module or a submodule ``import torch`` loads anyway, whose every
    use a rule rewrote (``import flash_attn`` once
    each ``flash_attn.flash_attn_func(...)`` was, ``import sys`` once ``sys.exit(...)``
    became ``porter_runtime.require_device(...)``)."""
    from libcst.codemod.visitors import RemoveImportsVisitor

    scheduled = False
    for alias in stmt.names:
        full = dotted_name(alias.name) or ""
        if full.split(".")[0] not in CUDA_ONLY_PACKAGES | sys.stdlib_module_names and full not in _LOADED_BY_TORCH:
            continue
        asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
        key = (asname, full) if asname else (full.split(".")[0], full.split(".")[0])
        if before[key] and not after[key] and not _read_elsewhere(ctx, key[0]):
            _not_used_in_stubs(ctx, key[0])
            RemoveImportsVisitor.remove_unused_import(context, full, asname=asname)
            scheduled = True
    return scheduled
