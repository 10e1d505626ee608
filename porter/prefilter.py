"""Deciding, before LibCST, which rules can match a file.

LibCST parses at Python speed; most files of a large repository hold nothing a rule
targets. Two cheap stages, both derived from what each rule declares (``targets``,
``methods``, ``words``, ``strings``), so there is one source of truth and a new rule
can't be skipped by a stale filter:

1. bytes: every needle of one of the rule's needle groups occurs in the raw bytes;
2. syntax: the stdlib ``ast`` (C speed) shows a node the rule could match: an import of
   a target's root module plus a use of its last name, a call of a declared method, a
   string constant a declared pattern matches.

Both stages are conservative: they may let through a file no rule changes, never the
other way round (tests/test_prefilter.py checks this against the rules' examples).
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from typing import Optional, Sequence

from porter.rule import Rule


def needles(rule: type[Rule]) -> list[tuple[bytes, ...]]:
    """Byte strings that must all occur in a file for ``rule`` to possibly match.

    Any use of ``a.b.c`` needs ``a`` (in its import) and ``c`` (in the use or in a
    ``from a.b import c``) somewhere in the file.
    """
    extra = tuple(w.encode() for w in sorted(rule.words))
    found: list[tuple[bytes, ...]] = []
    for target in sorted(rule.targets):
        parts = target.split(".")
        found.append(tuple(dict.fromkeys((parts[0].encode(), parts[-1].encode()))) + extra)
    for method in sorted(rule.methods):
        found.append((method.encode(),) + extra)
    if not found:
        found.append(extra)
    return found


def byte_candidates(data: bytes, rules: Sequence[type[Rule]]) -> list[type[Rule]]:
    return [rule for rule in rules if any(all(n in data for n in group) for group in needles(rule))]


@dataclass
class SyntaxFacts:
    """What one ``ast`` walk tells about a file."""

    imported_roots: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)  # Name ids, attribute names, imported names
    called_methods: set[str] = field(default_factory=set)
    strings: list[str] = field(default_factory=list)


def syntax_facts(tree: ast.AST) -> SyntaxFacts:
    facts = SyntaxFacts()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            facts.names.add(node.attr)
        elif isinstance(node, ast.Name):
            facts.names.add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            facts.called_methods.add(node.func.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            facts.strings.append(node.value)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                facts.imported_roots.add(alias.name.split(".")[0])
                facts.names.update(alias.name.split("."))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            facts.imported_roots.add(node.module.split(".")[0])
            facts.names.update(node.module.split("."))
            facts.names.update(alias.name for alias in node.names)
    return facts


def syntax_match(rule: type[Rule], facts: SyntaxFacts) -> bool:
    if rule.strings is not None and not any(rule.strings.search(s) for s in facts.strings):
        return False
    if not rule.targets and not rule.methods:
        return True
    for target in rule.targets:
        parts = target.split(".")
        if parts[0] in facts.imported_roots and parts[-1] in facts.names:
            return True
    return bool(rule.methods & facts.called_methods)


def parse_for_filter(data: bytes) -> Optional[ast.AST]:
    """The stdlib AST of ``data``, or None when Python can't parse it (LibCST then
    gives the per-file error)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def candidate_rules(data: bytes, rules: Sequence[type[Rule]]) -> tuple[list[type[Rule]], bool]:
    """The rules that may match ``data``, and whether the file parses as Python.

    A file that passes the byte stage but not ``ast.parse`` keeps its byte candidates,
    so that LibCST reports the error with its position.
    """
    candidates = byte_candidates(data, rules)
    if not candidates:
        return [], True
    tree = parse_for_filter(data)
    if tree is None:
        return candidates, False
    facts = syntax_facts(tree)
    return [rule for rule in candidates if syntax_match(rule, facts)], True
