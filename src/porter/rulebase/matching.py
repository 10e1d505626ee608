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

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, Optional

import libcst as cst

# The scope model lives in porter.rulebase.scopes; its names are imported from here too.
from porter.rulebase.scopes import (  # noqa: F401 (re-exported)
    LOCAL,
    Ambiguous,
    Scope,
    ScopeBuilder,
    ScopeResolver,
    _from_bindings,
    ast_dotted_name,
    dotted_name,
    runtime_alias,
)


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

    def may_mean(self, name: str, target: str) -> bool:
        """Whether some occurrence of ``name`` may stand for the import of ``target``."""
        return self._full().may_mean(name, runtime_alias(target))

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
