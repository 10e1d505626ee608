"""Imports a rewrite left unused, removed after the rules ran.

Imports that lost their last use to a rewrite (``from torch import device`` once every
``device("cuda")`` became ``porter_runtime.device()``) are removed (``porter.edits.import_removal``, which edits the lines as LibCST's
``RemoveImportsVisitor`` would), and only those: an import the user had and did not use
before stays, so nothing the rules did not touch changes. The blank lines around a
removed import and the trailing comma of an edited import list are kept.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from typing import TYPE_CHECKING, Optional, Protocol

import libcst as cst

from porter.edits.import_lines import alias_asname, is_import_line
from porter.edits.import_removal import Scheduled, remove_imports
from porter.edits.local_imports import Names, drop_names_in_lines, remove_dead_local_imports
from porter.edits.removal_layout import keep_layout
from porter.rulebase.cuda_packages import IMPORT_ROOTS
from porter.rulebase.conditions.guards import parse
from porter.rulebase.matching import Resolver, dotted_name
from porter.rulebase.rule import RUNTIME, WholeFile
from porter.rulebase.syntax import bound_names

if TYPE_CHECKING:  # pragma: no cover
    from porter.engine.stages.segments import Reduced
    from porter.project.model import ProjectModel


class RulePass(Protocol):
    """What the import clean-up needs of the rule pass that ran over a file (the
    engine's ``porter.engine.stages.context.FileContext`` is one)."""

    #: The module as the rules saw it, before their rewrites.
    module: cst.Module
    #: Its names, resolved before the rewrites.
    resolver: Resolver
    #: Set when ``module`` has some definitions stubbed (porter.engine.stages.segments).
    reduced: Optional["Reduced"]

    #: The file's bytes (before migration).
    source: bytes
    #: The file's path, and the repository-wide model (porter.project) or None.
    path: str
    project: Optional["ProjectModel"]
    #: Names read outside this source (a notebook's other cells: ``Options.read_outside``).
    read_outside: frozenset[str]
    #: (original node, what replaced it) for each node the rule pass replaced: a node,
    #: a ``FlattenSentinel`` or a ``RemovalSentinel``.
    replaced: list

    def recorded(self) -> bool:
        """Whether any rule recorded a rewrite or a finding."""
        ...

    def ignored(self, node: cst.CSTNode) -> bool:
        """Whether a ``# porter: ignore`` comment sits on one of the node's lines."""
        ...


def remove_unused(new_module: cst.Module, ctx: RulePass) -> cst.Module:
    """Remove the top-level imports whose every use a rule rewrote, and the imports of a
    CUDA-only package inside a function whose every use there a rule rewrote."""
    if not ctx.recorded():
        return new_module
    new_module = remove_dead_local_imports(new_module, ctx)
    if not _may_lose_a_use(ctx):
        return new_module
    before = ctx.resolver.use_counts()
    resolver = Resolver(new_module)
    after = resolver.use_counts()
    context: list[Scheduled] = []
    scheduled = False
    kept = _ignored_imports(ctx)
    top = {id(stmt) for stmt in ctx.module.body}
    if ctx.reduced is not None and _cuda_imports_in_ifs(ctx.source):
        raise WholeFile("an import in a module-level if block")  # a stubbed block would hide it
    nested: dict[int, set[str]] = {}  # an import line in a module-level `if`: its dead names, by the line
    for stmt in _module_scope_lines(ctx.module.body):
        if stmt in kept:
            continue
        into: list[Scheduled] = context if id(stmt) in top else []
        for small in stmt.body:
            if isinstance(small, cst.Import):
                scheduled |= _remove_dead_module_imports(small, before, after, into, ctx) and into is context
            elif isinstance(small, cst.ImportFrom):
                scheduled |= _remove_dead_names(small, before, after, into, ctx) and into is context
        if into is not context:
            into = [entry for entry in into if entry[0].split(".")[0] in CUDA_ONLY_PACKAGES]
            if into:
                nested[id(stmt)] = {asname or (obj or module).split(".")[0] for module, obj, asname in into}
    if nested:
        new_module = drop_names_in_lines(ctx.module, new_module, nested, _module_scope_lines)
    if not scheduled:
        return new_module
    return keep_layout(new_module, remove_imports(new_module, context, kept, resolver.may_mean))


def _cuda_imports_in_ifs(source: bytes) -> bool:
    """Whether a module-level ``if`` block (at any depth of ``if``s) imports a CUDA-only package."""
    tree = parse(source)
    todo = [s for s in getattr(tree, "body", ()) if isinstance(s, ast.If)]
    while todo:
        branch = todo.pop()
        for stmt in branch.body + branch.orelse:
            if isinstance(stmt, ast.If):
                todo.append(stmt)
            elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
                if stmt.module.split(".")[0] in CUDA_ONLY_PACKAGES:
                    return True
            elif isinstance(stmt, ast.Import) and any(a.name.split(".")[0] in CUDA_ONLY_PACKAGES for a in stmt.names):
                return True
    return False


def _module_scope_lines(body) -> list[cst.SimpleStatementLine]:
    """The module's own lines: at its top level and in its ``if`` blocks (an ``if __name__ ==
    "__main__":`` block's imports bind the module's names too: EasyContext's ``from
    flash_attn.flash_attn_interface import _flash_attn_backward`` there). Those in an ``if``
    lose their dead names line by line (``drop_names_in_lines``): the removal by name would edit
    the same import in a top-level ``try`` too, which is porter.edits.probes'."""
    found: list[cst.SimpleStatementLine] = []
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            found.append(stmt)
        elif isinstance(stmt, (cst.If, cst.Else)):
            found += _module_scope_lines(getattr(stmt.body, "body", ()))
            if getattr(stmt, "orelse", None) is not None:
                found += _module_scope_lines([stmt.orelse])
    return found


def _remove_dead_names(stmt: cst.ImportFrom, before, after, context, ctx) -> bool:
    """Schedule each name of ``from a.b import c`` / ``from a.b import c as d`` (absolute,
    no ``*``) whose every use a rule rewrote; from a CUDA-only package, with those the module
    never used (the line is edited anyway, and a name left alone would keep it failing)."""
    if isinstance(stmt.names, cst.ImportStar) or stmt.relative or stmt.module is None:
        return False
    module_name = dotted_name(stmt.module) or ""
    dead, idle = [], []
    for alias in stmt.names:
        obj = dotted_name(alias.name) or ""
        asname = alias_asname(alias)
        key = (asname or obj, f"{module_name}.{obj}")
        if after[key] or _read_elsewhere(ctx, key[0]):
            continue
        (dead if before[key] else idle).append((key[0], (module_name, obj, asname)))
    if dead and module_name.split(".")[0] in CUDA_ONLY_PACKAGES:
        dead += idle
    for name, scheduled in dead:
        _not_used_in_stubs(ctx, name)
        context.append(scheduled)
    return bool(dead)


def _read_elsewhere(ctx: RulePass, name: str) -> bool:
    """Whether another module of the repository imports ``name`` from this one (a
    re-export: ``from pkg import GradScaler`` elsewhere), or another cell of the notebook
    reads it (``import torch`` in cell 3 serves cell 5): then the import stays."""
    if name in getattr(ctx, "read_outside", ()):
        return True
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
    taken = Names()
    rebound = _replaced_import_names(ctx.replaced)
    for original, replacement in ctx.replaced:
        original.visit(taken)
        for node in getattr(replacement, "nodes", (replacement,)):  # a FlattenSentinel holds several
            if isinstance(node, cst.CSTNode) and _binds(node) and not _rebinds_only(node, rebound):
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


class _ImportBindings(cst.CSTVisitor):
    """The names a statement binds, when it binds only by imports and plain ``name = ...``
    assignments (``known`` is False once anything else binds)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        self.known = True

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            self.names.update(bound_names(node))
            self.known &= not isinstance(node.names, cst.ImportStar)
            return False
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
            self.known &= all(isinstance(t, cst.Name) for t in targets)
            self.names.update(t.value for t in targets if isinstance(t, cst.Name))
            return True
        if isinstance(node, _BINDERS) and not (isinstance(node, cst.ExceptHandler) and node.name is None):
            self.known = False
        return self.known


def _bindings(node: cst.CSTNode) -> Optional[set[str]]:
    found = _ImportBindings()
    node.visit(found)
    return found.names if found.known else None


def _replaced_import_names(replaced) -> set[str]:
    """The names the replaced import lines bound (a run of them can become one ``try``)."""
    names: set[str] = set()
    for original, _ in replaced:
        if is_import_line(original):
            names |= _bindings(original) or set()
    return names


def _rebinds_only(replacement: cst.CSTNode, rebound: set[str]) -> bool:
    """Import lines wrapped in ``try`` / ``except ImportError`` that bind the same names in
    the handler (TP604's ``= None``, TP605's stand-ins): no name the replaced import lines
    did not bind is bound, so no use moves off an import."""
    after = _bindings(replacement)
    return bool(rebound) and after is not None and after <= rebound


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
                names.add(alias_asname(alias) or (dotted_name(alias.name) or "").split(".")[0])
    return names


def _ignored_imports(ctx: RulePass) -> list[cst.SimpleStatementLine]:
    """The import lines with a ``# porter: ignore`` comment (any codes): the user asked
    porter to leave them, so the clean-up neither removes nor edits them, even once a
    rewrite on another line took their names' last use."""
    return [stmt for stmt in _module_scope_lines(ctx.module.body)
            if is_import_line(stmt) and ctx.ignored(stmt)]  # type: ignore[arg-type]


#: Packages that do not install without CUDA (porter.rulebase.cuda_packages). A plain ``import``
#: of one of them that a rewrite left without a use would still fail on the port, so it
#: goes too; so does a
#: standard-library module (``import sys`` once ``sys.exit`` became
#: ``porter_runtime.require_device``). Other plain imports stay even when unused:
#: importing a library may register backends or ops. ``import torch`` itself goes only
#: where the port calls porter_runtime, which imports torch before its first call
#: returns (so ``porter_runtime.synchronize()`` in place of the file's last
#: ``torch.cuda.synchronize()`` leaves no unused ``import torch`` for flake8 to flag).
CUDA_ONLY_PACKAGES = IMPORT_ROOTS


def _not_used_in_stubs(ctx: RulePass, name: str) -> None:
    """A use inside a definition the engine stubbed (porter.engine.stages.segments) is invisible
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
    standard-library module, a submodule ``import torch`` loads anyway or torch itself
    where the port calls porter_runtime, whose every use a rule rewrote (``import flash_attn`` once
    each ``flash_attn.flash_attn_func(...)`` was, ``import sys`` once ``sys.exit(...)``
    became ``porter_runtime.require_device(...)``)."""
    scheduled = False
    calls_runtime = any(target == RUNTIME or target.startswith(RUNTIME + ".") for _, target in after)
    for alias in stmt.names:
        full = dotted_name(alias.name) or ""
        loaded_anyway = full in _LOADED_BY_TORCH or (full == "torch" and calls_runtime)
        if full.split(".")[0] not in CUDA_ONLY_PACKAGES | sys.stdlib_module_names and not loaded_anyway:
            continue
        asname = alias_asname(alias)
        key = (asname, full) if asname else (full.split(".")[0], full.split(".")[0])
        if before[key] and not after[key] and not _read_elsewhere(ctx, key[0]):
            _not_used_in_stubs(ctx, key[0])
            context.append((full, None, asname))
            scheduled = True
    return scheduled
