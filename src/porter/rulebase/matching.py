"""Cheap, exact name resolution for rules.

LibCST's ``QualifiedNameProvider`` answers "what does this name mean" but needs the
full scope analysis, which costs several times the parse itself. Rules only ever ask
about names bound by imports (``torch``, ``t``, ``synchronize``...), so one visitor pass
that records, per scope, which names are bound and how, is enough:

* a name bound only by imports that agree resolves to the imported qualified name;
* a name bound by anything else in the scope that owns it (a parameter, an assignment,
  a ``def``, a ``for`` target...) is shadowed and resolves to nothing;
* a name bound by imports that disagree (``try: import a as x / except: import b as x``)
  is ambiguous: rules must not guess (STYLE.md rule 2).

Python's own scoping is followed: a name assigned anywhere in a function is local to the
whole function, class bodies are skipped by the functions nested in them, ``global`` and
``nonlocal`` redirect bindings, comprehensions have their own scope, and ``:=`` binds in
the enclosing function.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, Union

import libcst as cst

#: A binding that is not an import (parameter, assignment, def, ...).
LOCAL = "<local>"


class Ambiguous(str):
    """The qualified name of a name bound by disagreeing imports."""


@dataclass(eq=False)
class Scope:
    kind: str  # "module" | "function" | "class" | "comprehension"
    parent: Optional["Scope"]
    bindings: dict[str, set[str]] = field(default_factory=dict)
    globals_: set[str] = field(default_factory=set)
    nonlocals: set[str] = field(default_factory=set)

    def bind(self, name: str, target: str) -> None:
        owner = self._owner(name)
        owner.bindings.setdefault(name, set()).add(target)

    def _owner(self, name: str) -> "Scope":
        if name in self.globals_:
            return self.module()
        if name in self.nonlocals and self.parent is not None:
            return self.parent._function_owning(name)
        return self

    def _function_owning(self, name: str) -> "Scope":
        scope: Optional[Scope] = self
        while scope is not None and scope.kind != "module":
            if scope.kind == "function" and name in scope.bindings:
                return scope
            scope = scope.parent
        return self

    def module(self) -> "Scope":
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def lookup(self, name: str) -> Optional[set[str]]:
        """The bindings ``name`` refers to from this scope, or None if unbound."""
        if name in self.globals_:
            return self.module().bindings.get(name)
        scope: Optional[Scope] = self
        first = True
        while scope is not None:
            # Class bodies are visible only to code directly inside them.
            if (first or scope.kind != "class") and name in scope.bindings:
                return scope.bindings[name]
            first = False
            scope = scope.parent
        return None


def ast_dotted_name(node: ast.AST) -> Optional[str]:
    """``a.b.c`` for a stdlib ``ast`` Name/Attribute chain, else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    names.append(node.id)
    return ".".join(reversed(names))


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = dotted_name(node.value)
        return None if base is None else f"{base}.{node.attr.value}"
    return None


class ScopeBuilder(cst.CSTVisitor):
    """One pass over a module recording the scopes and every Name's scope."""

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None  # no per-attribute hooks here: skip LibCST's lookup for each field

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None

    def __init__(self) -> None:
        self.module_scope = Scope("module", None)
        self.stack: list[Scope] = [self.module_scope]
        self.name_scope: dict[cst.Name, Scope] = {}

    # -- helpers -----------------------------------------------------------
    @property
    def scope(self) -> Scope:
        return self.stack[-1]

    def _function_scope(self) -> Scope:
        for scope in reversed(self.stack):
            if scope.kind != "comprehension":
                return scope
        return self.module_scope

    def _bind_target(self, target: cst.BaseExpression, scope: Optional[Scope] = None) -> None:
        scope = scope or self.scope
        if isinstance(target, cst.Name):
            scope.bind(target.value, LOCAL)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind_target(element.value, scope)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value, scope)

    def _visit_in(self, scope: Scope, nodes: Iterable[Optional[cst.CSTNode]]) -> None:
        self.stack.append(scope)
        for node in nodes:
            if node is not None:
                node.visit(self)
        self.stack.pop()

    # -- names ----------------------------------------------------------------
    def visit_Name(self, node: cst.Name) -> bool:
        self.name_scope[node] = self.scope
        return False  # only parentheses below; not stepping in spares LibCST a copy of it

    def _leaf(self, node: cst.CSTNode) -> bool:
        return False  # a string or number: only parentheses below

    visit_SimpleString = visit_Integer = visit_Float = visit_Imaginary = visit_Ellipsis = _leaf

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # ``x.attr``: ``attr`` is no use of a name ``attr``
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # ``f(kw=...)``: ``kw`` is no use of a name ``kw``
        return False

    # -- imports --------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            full = dotted_name(alias.name) or ""
            asname = alias.asname.name if alias.asname is not None else None
            if isinstance(asname, cst.Name):
                self.scope.bind(asname.value, runtime_alias(full))
            else:  # ``import a.b`` binds ``a``
                top = full.split(".")[0]
                self.scope.bind(top, top)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        module = dotted_name(node.module) if node.module is not None else ""
        prefix = "." * len(node.relative) + (module or "")
        if isinstance(node.names, cst.ImportStar):
            return False
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            bound = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                bound = alias.asname.name.value
            self.scope.bind(bound, runtime_alias(f"{prefix}.{name}" if module else f"{prefix}{name}"))
        return False

    # -- plain bindings -------------------------------------------------------
    def visit_Global(self, node: cst.Global) -> None:
        self.scope.globals_.update(n.name.value for n in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.scope.nonlocals.update(n.name.value for n in node.names)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._bind_target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind_target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind_target(node.asname.name)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self._bind_target(node.name.name)

    def visit_ExceptStarHandler(self, node: cst.ExceptStarHandler) -> None:
        if node.name is not None:
            self._bind_target(node.name.name)

    def visit_Del(self, node: cst.Del) -> None:
        self._bind_target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._bind_target(node.target, self._function_scope())

    def visit_MatchAs(self, node: cst.MatchAs) -> None:
        if node.name is not None:
            self._bind_target(node.name)

    def visit_MatchStar(self, node: cst.MatchStar) -> None:
        if node.name is not None:
            self._bind_target(node.name)

    def visit_MatchMapping(self, node: cst.MatchMapping) -> None:
        if node.rest is not None:
            self._bind_target(node.rest)

    # -- scopes ---------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.scope.bind(node.name.value, LOCAL)
        self.name_scope[node.name] = self.scope
        # Decorators, defaults and annotations run in the enclosing scope.
        for decorator in node.decorators:
            decorator.visit(self)
        self._visit_param_outer_parts(node.params)
        if node.returns is not None:
            node.returns.visit(self)
        inner = Scope("function", self.scope)
        self._bind_params(node.params, inner)
        self._visit_in(inner, [node.body])
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        self._visit_param_outer_parts(node.params)
        inner = Scope("function", self.scope)
        self._bind_params(node.params, inner)
        self._visit_in(inner, [node.body])
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.scope.bind(node.name.value, LOCAL)
        self.name_scope[node.name] = self.scope
        for decorator in node.decorators:
            decorator.visit(self)
        for arg in (*node.bases, *node.keywords):
            arg.visit(self)
        self._visit_in(Scope("class", self.scope), [node.body])
        return False

    def _visit_comprehension(
        self, node: Union[cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp]
    ) -> bool:
        # The first iterable is evaluated outside; everything else inside.
        first = node.for_in
        first.iter.visit(self)
        inner = Scope("comprehension", self.scope)
        self.stack.append(inner)
        for_in: Optional[cst.CompFor] = first
        while for_in is not None:
            self._bind_target(for_in.target)
            for_in.target.visit(self)
            if for_in is not first:
                for_in.iter.visit(self)
            for condition in for_in.ifs:
                condition.visit(self)
            for_in = for_in.inner_for_in
        if isinstance(node, cst.DictComp):
            node.key.visit(self)
            node.value.visit(self)
        else:
            node.elt.visit(self)
        self.stack.pop()
        return False

    visit_ListComp = _visit_comprehension
    visit_SetComp = _visit_comprehension
    visit_GeneratorExp = _visit_comprehension
    visit_DictComp = _visit_comprehension

    def _visit_param_outer_parts(self, params: cst.Parameters) -> None:
        for param in _all_params(params):
            if param.default is not None:
                param.default.visit(self)
            if param.annotation is not None:
                param.annotation.visit(self)

    def _bind_params(self, params: cst.Parameters, scope: Scope) -> None:
        for param in _all_params(params):
            scope.bind(param.name.value, LOCAL)
            self.name_scope[param.name] = scope


def _all_params(params: cst.Parameters) -> list[cst.Param]:
    found = [*params.posonly_params, *params.params, *params.kwonly_params]
    for extra in (params.star_arg, params.star_kwarg):
        if isinstance(extra, cst.Param):
            found.append(extra)
    return found


class ScopeResolver:
    """Full resolution: a scope for every name (one LibCST visitor pass)."""

    def __init__(self, module: cst.Module) -> None:
        builder = ScopeBuilder()
        module.visit(builder)
        self._name_scope = builder.name_scope
        self.module_scope = builder.module_scope

    def resolve_name(self, node: cst.Name) -> Optional[str]:
        scope = self._name_scope.get(node)
        if scope is None:
            return None
        return _from_bindings(scope.lookup(node.value))

    def name_for(self, qualname: str, at: cst.Name) -> Optional[str]:
        """A name that means ``qualname`` where ``at`` is used, or None."""
        scope = self._name_scope.get(at)
        if scope is None:
            return None
        for name, bound in self.module_scope.bindings.items():
            if bound == {qualname} and scope.lookup(name) == {qualname}:
                return name
        return None

    def use_counts(self) -> Counter[tuple[str, str]]:
        """How often each (name, imported qualified name) pair is used."""
        counts: Counter[tuple[str, str]] = Counter()
        for name in self._name_scope:
            target = self.resolve_name(name)
            if target is not None and not isinstance(target, Ambiguous):
                counts[(name.value, target)] += 1
        return counts


def runtime_alias(target: str) -> str:
    """What an import's target means: a vendored copy of the runtime imported from a
    package (``from mypkg import porter_runtime``, ``import mypkg.porter_runtime as
    porter_runtime``) is ``porter_runtime`` itself, so porter's own calls resolve to
    ``porter_runtime.X`` wherever the copy lives (and a second run leaves them)."""
    head, _, last = target.rpartition(".")
    return last if head and last == "porter_runtime" else target


def _from_bindings(bindings: Optional[set[str]]) -> Optional[str]:
    if not bindings or LOCAL in bindings:
        return None
    if len(bindings) > 1:
        return Ambiguous(sorted(bindings)[0])
    return next(iter(bindings))


@dataclass
class ImportFacts:
    """What the stdlib ``ast`` already told the pre-filter about a file's bindings.

    ``module_imports``: names bound by module-level imports, with what they import;
    ``nested_imports``: the same for imports inside functions and classes;
    ``other_bindings``: names bound any other way (assignment, parameter, def,
    ``global``, ...) anywhere; ``star``: a ``from x import *`` somewhere.
    """

    module_imports: dict[str, set[str]] = field(default_factory=dict)
    nested_imports: dict[str, set[str]] = field(default_factory=dict)
    other_bindings: set[str] = field(default_factory=set)
    star: bool = False

    @property
    def import_names(self) -> set[str]:
        return set(self.module_imports) | set(self.nested_imports)

    def simple(self) -> dict[str, str]:
        """Names whose meaning is the same everywhere in the file: bound only by
        imports (at any depth) that all import the same thing, never bound otherwise."""
        if self.star:
            return {}
        found = {}
        for name in self.import_names - self.other_bindings:
            targets = self.module_imports.get(name, set()) | self.nested_imports.get(name, set())
            if len(targets) == 1:
                found[name] = next(iter(targets))
        return found


class Resolver:
    """Answers "which imported thing does this expression name?" for one module.

    With the pre-filter's :class:`ImportFacts`, a name that only module-level imports
    bind resolves without any scope analysis; the full :class:`ScopeResolver` pass is
    made only if a rule asks about a name that is also bound some other way.
    """

    def __init__(self, module: cst.Module, facts: Optional[ImportFacts] = None) -> None:
        self._module = module
        self._facts = facts
        self._simple = facts.simple() if facts is not None else {}
        # Where the rule pass is (see enter/leave): inside how many import statements,
        # and which Names it met as an attribute's name.
        self._inside_import = 0
        self._attribute_names: set[cst.Name] = set()
        self._import_names = facts.import_names if facts is not None else set()
        self._scoped: Optional[ScopeResolver] = None if facts is not None else ScopeResolver(module)

    def enter(self, node: cst.CSTNode) -> None:
        """The rule pass steps into ``node`` (before the rules visit it). The Names of
        an import statement are bindings, and the name of an attribute (the ``compile``
        of ``re.compile``) is bound by no import: :meth:`qualname` resolves neither."""
        # Exact type tests: this runs for every node, and isinstance against LibCST's
        # ABC-based classes costs several times more (parsed nodes are never subclasses).
        kind = type(node)
        if kind is cst.Attribute:
            self._attribute_names.add(node.attr)  # type: ignore[attr-defined]
        elif kind is cst.Import or kind is cst.ImportFrom:
            self._inside_import += 1

    def leave(self, node: cst.CSTNode) -> None:
        """The rule pass is done with ``node`` (after the rules left it)."""
        kind = type(node)
        if kind is cst.Import or kind is cst.ImportFrom:
            self._inside_import -= 1

    def _full(self) -> ScopeResolver:
        if self._scoped is None:
            self._scoped = ScopeResolver(self._module)
        return self._scoped

    def qualname(self, node: cst.BaseExpression) -> Optional[str]:
        """The imported qualified name ``node`` stands for, or None.

        Returns an :class:`Ambiguous` string when disagreeing imports bind the base
        name, so callers can report instead of guessing.
        """
        if isinstance(node, cst.Attribute):
            base = self.qualname(node.value)
            if base is None:
                return None
            full = f"{base}.{node.attr.value}"
            return Ambiguous(full) if isinstance(base, Ambiguous) else full
        if not isinstance(node, cst.Name):
            return None
        if self._inside_import or node in self._attribute_names:
            return None
        if node.value in self._simple:
            return self._simple[node.value]
        if self._facts is not None and node.value not in self._import_names:
            return None  # no import binds this name anywhere
        return self._full().resolve_name(node)

    def simple(self, name: str) -> bool:
        """Whether every use of ``name`` in the module means the same import (imports
        alone bind it, all to the same thing): known from the pre-filter's facts."""
        return name in self._simple

    def name_for(self, qualname: str, at: cst.Name) -> Optional[str]:
        """A name that means ``qualname`` where ``at`` is used (e.g. the alias of
        ``torch`` a rewrite can use), or None."""
        for name, target in self._simple.items():
            if target == qualname:
                return name
        return self._full().name_for(qualname, at)

    def use_counts(self) -> Counter[tuple[str, str]]:
        return self._full().use_counts()

    def imports_of(self, qualname: str) -> bool:
        """Whether the module binds ``qualname`` (or a parent module) at top level."""
        return any(t == qualname or qualname.startswith(t + ".") for t in self._module_targets())

    def binds_name_to(self, name: str, module: str) -> bool:
        """Whether the module's top level binds ``name`` itself to ``module`` (or to a
        copy of it inside a package): ``import porter_runtime`` or ``from pkg import
        porter_runtime``, not ``import porter_runtime as pr``, which binds ``pr``."""
        bindings = self._facts.module_imports if self._facts is not None else self._full().module_scope.bindings
        return any(t == module or t.endswith("." + module) for t in bindings.get(name, ()))

    def imports_under(self, package: str) -> bool:
        """Whether a top-level import of the module (in its ``if`` and ``try`` blocks
        too) imports ``package`` or something under it (``from mpi4py import MPI``)."""
        return any(t == package or t.startswith(package + ".") for t in self._module_targets())

    def _module_targets(self) -> Iterator[str]:
        """What the module's top-level bindings stand for."""
        if self._facts is not None:
            bindings = self._facts.module_imports.values()
        else:
            bindings = self._full().module_scope.bindings.values()
        return (t for targets in bindings for t in targets)
