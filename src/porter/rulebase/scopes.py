"""Who binds what, per scope: the scope model behind porter.rulebase.matching.

One LibCST visitor pass (:class:`ScopeBuilder`) records, for every scope of a module,
which names are bound and how (an import's qualified name, or :data:`LOCAL` for any other
binding), following Python's own scoping: a name assigned anywhere in a function is local
to the whole function, class bodies are skipped by the functions nested in them,
``global`` and ``nonlocal`` redirect bindings, comprehensions have their own scope, and
``:=`` binds in the enclosing function. :class:`ScopeResolver` answers from that record.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Optional, Union

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

    def may_mean(self, name: str, target: str) -> bool:
        """Whether some occurrence of ``name`` may stand for the import of ``target``
        (among other bindings too: the safety check before an import is removed)."""
        for node, scope in self._name_scope.items():
            if node.value == name and target in (scope.lookup(name) or ()):
                return True
        return False

    def use_counts(self) -> Counter[tuple[str, str]]:
        """How often each (name, imported qualified name) pair is used."""
        counts: Counter[tuple[str, str]] = Counter()
        for name in self._name_scope:
            target = self.resolve_name(name)
            if target is not None and not isinstance(target, Ambiguous):
                counts[(name.value, target)] += 1
        return counts


def _from_bindings(bindings: Optional[set[str]]) -> Optional[str]:
    if not bindings or LOCAL in bindings:
        return None
    if len(bindings) > 1:
        return Ambiguous(sorted(bindings)[0])
    return next(iter(bindings))


def runtime_alias(target: str) -> str:
    """What an import's target means: a vendored copy of the runtime imported from a
    package (``from mypkg import porter_runtime``, ``import mypkg.porter_runtime as
    porter_runtime``) is ``porter_runtime`` itself, so porter's own calls resolve to
    ``porter_runtime.X`` wherever the copy lives (and a second run leaves them)."""
    head, _, last = target.rpartition(".")
    return last if head and last == "porter_runtime" else target
