"""What one ``ast`` walk tells about a file (``SyntaxFacts``) and about each of its
definitions (``Unit``).

Rules read the facts in their ``needs`` filters through ``SyntaxFacts``' helpers
(``passed_names``, ``passed_strings``, ``passes_int``, ``uses_any``), never through an
encoding of their own; what a call passes is typed (``IntArg``, ``StrArg``, ``NameArg``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, fields
from typing import Iterable, Iterator, Optional, Union

from porter.rulebase.matching import ImportFacts


@dataclass(frozen=True, slots=True)
class IntArg:
    """An integer literal passed to a call (``x.to(0)``)."""

    value: int


@dataclass(frozen=True, slots=True)
class StrArg:
    """A string literal passed to a call (``x.to("cuda")``)."""

    value: str


@dataclass(frozen=True, slots=True)
class NameArg:
    """A name or attribute passed to a call, by its last name (``args.gpu`` → ``gpu``)."""

    name: str


Arg = Union[IntArg, StrArg, NameArg]
#: Where an argument was passed: its position (the first two) or its keyword.
Slot = Union[int, str]


@dataclass
class SyntaxFacts:
    """What one ``ast`` walk tells about a file."""

    names: set[str] = field(default_factory=set)  # Name ids, attribute names, imported names
    called_methods: set[str] = field(default_factory=set)
    strings: list[str] = field(default_factory=list)
    imports: ImportFacts = field(default_factory=ImportFacts)
    chains: set[str] = field(default_factory=set)  # dotted names used (``t.cuda.synchronize``)
    called_chains: set[str] = field(default_factory=set)  # dotted names called
    imported: set[str] = field(default_factory=set)  # what import statements name
    used: set[str] = field(default_factory=set)  # resolved qualified names and their prefixes
    called: set[str] = field(default_factory=set)  # the same, for called names only
    #: dotted names of calls whose result is moved at once (``f(x).to(...)``, ``f(x).cuda()``)
    moved_chains: set[str] = field(default_factory=set)
    moved: set[str] = field(default_factory=set)  # ``moved_chains`` resolved, as ``called``
    #: called name (a method's or function's last name; "" for any other callee) →
    #: what its calls pass: (slot, typed value). Read through ``passed`` and friends.
    call_args: dict[str, set[tuple[Slot, Arg]]] = field(default_factory=dict)
    #: keyword argument names of all calls
    keywords: set[str] = field(default_factory=set)
    #: strings compared (== / !=) with ``<x>.device.type`` or ``device.type``
    device_type_compares: set[str] = field(default_factory=set)
    #: a ``global`` / ``nonlocal`` statement: a stub of this unit would lose a binding
    rebinds: bool = False
    #: what the imports inside a top-level ``try`` import (``try: import xformers``)
    tried_imports: set[str] = field(default_factory=set)
    #: the functions and classes at module level (and, inside them, in class bodies)
    units: list["Unit"] = field(default_factory=list)
    #: names bound at the module's top level to a call with no arguments
    #: (``HAS_CUDA = torch.cuda.is_available()``): name -> the dotted names called
    flag_chains: dict[str, set[str]] = field(default_factory=dict)

    def passed(self, call: Optional[str] = None, position: Optional[int] = None,
               keyword: Optional[str] = None) -> Iterator[Arg]:
        """What calls of ``call`` (by last name; None: any call) pass at ``position``
        (0 or 1) or as ``keyword=``."""
        groups = self.call_args.values() if call is None else (self.call_args.get(call, ()),)
        for group in groups:
            for slot, value in group:
                if slot == keyword or slot == position:
                    yield value

    def passed_names(self, call: Optional[str] = None, position: Optional[int] = None,
                     keyword: Optional[str] = None) -> set[str]:
        """The last names of the names and attributes ``passed`` there."""
        return {v.name for v in self.passed(call, position, keyword) if type(v) is NameArg}

    def passed_strings(self, call: Optional[str] = None, position: Optional[int] = None,
                       keyword: Optional[str] = None) -> set[str]:
        """The string literals ``passed`` there."""
        return {v.value for v in self.passed(call, position, keyword) if type(v) is StrArg}

    def passes_int(self, call: Optional[str] = None, position: Optional[int] = None,
                   keyword: Optional[str] = None) -> bool:
        """Whether an integer literal is ``passed`` there."""
        return any(type(v) is IntArg for v in self.passed(call, position, keyword))

    def calls(self, name: str) -> bool:
        """Whether something of this last name is called (``x.to(...)``, ``set_device(...)``)."""
        return name in self.call_args

    def uses_any(self, names: Iterable[str], calls_only: bool = False) -> bool:
        """A use (for ``calls_only``, a call) of one of the qualified ``names`` or of
        something under it (after ``resolve``)."""
        used = self.called if calls_only else self.used
        return any(name in used for name in names)

    def flags_from(self, names: Iterable[str]) -> set[str]:
        """The module's flags (``flag_chains``) set from a call of one of the qualified
        ``names``, resolved through the file's imports as ``resolve`` does."""
        wanted = set(names)
        return {flag for flag, chains in self.flag_chains.items() if wanted & self._qualify(chains)}

    def tries_import_under(self, roots: Iterable[str]) -> bool:
        """Whether a top-level ``try`` imports one of ``roots`` or something under it
        (an import chain, or a probe that sets an availability flag)."""
        return any(name == root or name.startswith(root + ".") for name in self.tried_imports for root in roots)

    def moves_result_of(self, names: Iterable[str]) -> bool:
        """A call of one of the qualified ``names`` whose result is moved at once:
        the receiver of a ``.to(...)`` or ``.cuda(...)`` call."""
        return any(name in self.moved for name in names)

    def merge(self, other: "SyntaxFacts") -> None:
        """Add what ``other`` (a unit of the same file, same ``imports``) holds: every
        set, list and dict of sets, so a new fact can't be left out of the merge."""
        for name in _MERGED:
            mine, theirs = getattr(self, name), getattr(other, name)
            if isinstance(mine, dict):
                for key, values in theirs.items():
                    mine.setdefault(key, set()).update(values)
            elif isinstance(mine, bool):
                setattr(self, name, mine or theirs)
            elif isinstance(mine, list):
                mine.extend(theirs)
            else:
                mine.update(theirs)

    def resolve(self) -> None:
        """Resolve the dotted names through the file's imports, as the engine's
        resolver will (where a name is also bound otherwise, every import it may
        stand for counts: the filter may only over-approximate)."""
        self.used = self._qualify(self.chains)
        for name in self.imported:
            self.used.update(_prefixes(name))
        self.called = self._qualify(self.called_chains)
        self.moved = self._qualify(self.moved_chains)

    def _qualify(self, chains: Iterable[str]) -> set[str]:
        simple = self.imports.simple()
        out: set[str] = set()
        for chain in chains:
            root, _, rest = chain.partition(".")
            targets = {simple[root]} if root in simple else (
                self.imports.module_imports.get(root, set()) | self.imports.nested_imports.get(root, set()))
            for target in targets:
                out.update(_prefixes(f"{target}.{rest}" if rest else target))
        return out


#: The facts a unit adds to its file's (``imports`` is shared, ``units`` is the file's
#: own list; ``used`` / ``called`` / ``moved`` are worked out again by ``resolve``).
_MERGED = tuple(f.name for f in fields(SyntaxFacts) if f.name not in ("imports", "units", "used", "called", "moved"))


@dataclass
class Unit:
    """A function or class definition: its lines (decorators included), and what
    an ``ast`` walk of it shows (for a class, of its own parts and, through
    ``children``, of the definitions in its body)."""

    node: ast.AST
    facts: SyntaxFacts
    children: list["Unit"] = field(default_factory=list)
    resolved: bool = False

    @property
    def first_line(self) -> int:
        decorators = getattr(self.node, "decorator_list", None)
        return min([d.lineno for d in decorators] + [self.node.lineno]) if decorators else self.node.lineno

    @property
    def last_line(self) -> int:
        return self.node.end_lineno  # type: ignore[attr-defined,return-value]

    def resolved_facts(self) -> SyntaxFacts:
        if not self.resolved:
            self.facts.resolve()
            self.resolved = True
        return self.facts


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]

