"""The rules' evidence clauses (``porter.rulebase.evidence``) against what the pre-filter
knows: the ``ast`` facts of a file or unit (``holds``) and the file's raw bytes
(``byte_words``). Both may only over-approximate what the clause says."""

from __future__ import annotations

import ast
import itertools
import re
from typing import Callable, Optional

from porter.engine.prefilter.facts import SyntaxFacts, Unit
from porter.rulebase.evidence import (
    AllOf, AnyOf, CalledByName, Calls, CallsMethod, Clause, ComparesDeviceType, Imports, InFile, Keyword, MovesResultOf, Name,
    Passes, ReadsFlag, String, TriesImport, Uses,
)


def holds(clause: Clause, facts: SyntaxFacts, file: SyntaxFacts, unit: Optional[Unit] = None) -> bool:
    """Whether ``clause`` holds in ``facts``: the file's own (``facts is file``) or
    those of ``unit``, a function or class of the file whose facts are ``file``."""
    return _CHECKS[type(clause)](clause, facts, file, unit)


def _string(clause: String, facts: SyntaxFacts, file, unit) -> bool:
    pattern = clause.pattern
    return any(s in clause.exact or (pattern is not None and pattern.search(s)) for s in facts.strings)


def _passes(clause: Passes, facts: SyntaxFacts, file: SyntaxFacts, unit) -> bool:
    slot = (clause.call, clause.position, clause.keyword)
    if clause.string is not None and any(clause.string.search(s) for s in facts.passed_strings(*slot)):
        return True
    if clause.integer and facts.passes_int(*slot):
        return True
    if clause.name is None and not clause.name_also_at:
        return False
    names = facts.passed_names(*slot)
    if clause.name is not None and any(clause.name.search(name) for name in names):
        return True
    return bool(names) and any(names & file.passed_names(*other) for other in clause.name_also_at)


def _called_by_name(clause, facts, file: SyntaxFacts, unit: Optional[Unit]) -> bool:
    return unit is not None and not isinstance(unit.node, ast.ClassDef) and unit.node.name in file.called_chains


_CHECKS: dict[type, Callable[..., bool]] = {
    Uses: lambda c, facts, file, unit: facts.uses_any(c.names, c.calls_only),
    ReadsFlag: lambda c, facts, file, unit: bool(file.flags_from(c.names) & facts.names),
    CallsMethod: lambda c, facts, file, unit: bool(c.names & facts.called_methods),
    Keyword: lambda c, facts, file, unit: bool(c.names & facts.keywords),
    Name: lambda c, facts, file, unit: bool(c.names & facts.names),
    String: _string,
    Passes: _passes,
    Calls: lambda c, facts, file, unit: any(facts.calls(name) for name in c.names),
    MovesResultOf: lambda c, facts, file, unit: facts.moves_result_of(c.names),
    ComparesDeviceType: lambda c, facts, file, unit: c.value in facts.device_type_compares,
    TriesImport: lambda c, facts, file, unit: facts.tries_import_under(c.names),
    Imports: lambda c, facts, file, unit: any(
        name == root or name.startswith(root + ".") for name in facts.imported for root in c.names),
    CalledByName: _called_by_name,
    InFile: lambda c, facts, file, unit: holds(c.clause, file, file),
    AllOf: lambda c, facts, file, unit: all(holds(part, facts, file, unit) for part in c.clauses),
    AnyOf: lambda c, facts, file, unit: any(holds(part, facts, file, unit) for part in c.clauses),
}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def byte_words(clause: Clause) -> list[frozenset[bytes]]:
    """What a file's bytes must hold for ``clause`` to hold there: groups of whole
    identifiers, each group needing one of its words (empty: nothing known).

    A keyword, a method or a name is spelled where it is used; a qualified name at least
    by its last part (in the use, or in the ``from ... import`` that binds it)."""
    kind = type(clause)
    if kind is AllOf:
        return [group for part in clause.clauses for group in byte_words(part)]
    if kind is AnyOf:
        # (a and b) or c = (a or c) and (b or c); past a few groups, one group of all
        # the words (looser than the clause, never tighter).
        alternatives = [byte_words(part) for part in clause.clauses]
        if any(not groups for groups in alternatives):
            return []
        if _product_size(alternatives) > _MAX_GROUPS:
            return [frozenset().union(*(group for groups in alternatives for group in groups))]
        return [frozenset().union(*choice) for choice in itertools.product(*alternatives)]
    if kind is InFile:
        return byte_words(clause.clause)
    words = _words(clause)
    return [words] if words else []


_MAX_GROUPS = 16


def _product_size(alternatives: list[list[frozenset[bytes]]]) -> int:
    size = 1
    for groups in alternatives:
        size *= len(groups)
    return size


def _words(clause: Clause) -> frozenset[bytes]:
    kind = type(clause)
    if kind in (Uses, MovesResultOf, ReadsFlag):
        names = {name.rsplit(".", 1)[-1] for name in clause.names}
    elif kind in (Calls, CallsMethod, Keyword, Name):
        names = set(clause.names)
    elif kind in (TriesImport, Imports):
        names = {root.split(".", 1)[0] for root in clause.names}
    elif kind is Passes:
        # a call of `call` spells it; with no call named and no position, the keyword
        names = {clause.call} if clause.call is not None else (
            {clause.keyword} if clause.position is None and clause.keyword is not None else set())
    elif kind is ComparesDeviceType:
        names = {"type"}
    elif kind is String:
        names = {clause.word} - {None}
    else:  # a unit called by its name: that name is the unit's own
        names = set()
    if not names or not all(_IDENTIFIER.match(name) for name in names):
        return frozenset()
    return frozenset(name.encode() for name in names)
