"""Deciding, before LibCST, which rules can match a file.

LibCST parses at Python speed; most files of a large repository hold nothing a rule
targets. Two cheap stages, both derived from what each rule declares in its ``needs``
(``porter.rulebase.needs.Needs``: targets, methods, words, strings, byte patterns and finer
filters), so there is one source of truth and a new rule can't be skipped by a stale
filter:

1. bytes: every needle of one of the rule's needle groups occurs in the raw bytes, and
   some rule's needles remain once comments and prose strings are out
   (``porter.rulebase.codeview``: a docstring's example is no use);
2. syntax: the stdlib ``ast`` (C speed) shows a node the rule could match: an import of
   a target's root module plus a use of its last name, a call of a declared method, a
   string constant a declared pattern matches.

Both stages are conservative: they may let through a file no rule changes, never the
other way round (tests/test_prefilter.py checks this against the rules' examples).

The modules: ``byte_stage`` (needles, ``ByteFilter``), ``ast_walk`` (one ``ast`` walk into
``facts``: ``SyntaxFacts`` and ``Unit``), ``syntax_stage`` (the facts against a rule's
``needs``); this module runs them in turn.
"""

from __future__ import annotations

from typing import Optional, Sequence

from porter.engine.prefilter.ast_walk import syntax_facts
from porter.engine.prefilter.byte_stage import ByteFilter, byte_candidates
from porter.engine.prefilter.facts import SyntaxFacts, Unit
from porter.engine.prefilter.syntax_stage import syntax_match, unit_wanted
from porter.rulebase.codeview import code_view, prefilter_enabled
from porter.rulebase.conditions.guards import parse
from porter.rulebase.rule import Rule

__all__ = ["SyntaxFacts", "Unit", "byte_candidates", "candidate_rules", "syntax_facts", "unit_wanted"]


def words_only_in_text(data: bytes, candidates: Sequence[type[Rule]]) -> bool:
    """Whether every word the ``candidates`` (the rules the raw bytes let through)
    need lies in comments and prose strings, where no rule acts (``porter.rulebase.codeview``):
    the file then needs no parse at all."""
    code = code_view(data)
    return code is not None and code is not data and not ByteFilter(candidates).candidates(code)


def candidate_rules(data: bytes, rules: Sequence[type[Rule]]) -> tuple[list[type[Rule]], Optional[SyntaxFacts]]:
    """The rules that may match ``data``, and the file's syntax facts (None when
    Python can't parse the file: it keeps its byte candidates, so that LibCST reports
    the error with its position).

    With ``PORTER_PREFILTER=0`` both stages are off: every rule then sees every file,
    whole (no facts, so no segments either). The output is the same; only the time
    differs (tests/test_prefilter_equivalence.py holds porter to that)."""
    if not prefilter_enabled():
        return list(rules), None
    candidates = byte_candidates(data, rules)
    if not candidates or words_only_in_text(data, candidates):
        return [], None
    tree = parse(data)  # shared with the guard pass and the ledger (porter.rulebase.conditions.guards)
    if tree is None:
        return candidates, None
    facts = syntax_facts(tree)
    return [rule for rule in candidates if syntax_match(rule, facts)], facts
