"""The pre-filter's syntax stage: whether a file's (or a unit's) ``SyntaxFacts`` show
what a rule's ``needs`` declare."""

from __future__ import annotations

from porter.engine.prefilter.evidence_check import holds
from porter.engine.prefilter.facts import SyntaxFacts, Unit
from porter.rulebase.needs import Needs
from porter.rulebase.rule import Rule


def syntax_match(rule: type[Rule], facts: SyntaxFacts) -> bool:
    """Whether the file has what ``rule`` declares it needs: a use (or, for
    ``calls_only`` rules, a call) of a target or of something under it, a call of one
    of its methods, a string constant its pattern matches, its evidence."""
    needs = rule.needs
    if needs.strings is not None and not any(needs.strings.search(s) for s in facts.strings):
        return False
    if needs.evidence is not None and not holds(needs.evidence, facts, facts):
        return False
    if not needs.targets and not needs.methods:
        return True
    return uses_target(needs, facts)


def uses_target(needs: Needs, facts: SyntaxFacts) -> bool:
    """A use (for ``calls_only``, a call) of one of the targets or of something under
    it, or a call of one of the methods."""
    return facts.uses_any(needs.targets, needs.calls_only) or bool(needs.methods & facts.called_methods)


def unit_wanted(rule: type[Rule], unit: Unit, file: SyntaxFacts) -> bool:
    """Whether ``rule`` may act inside ``unit`` (its facts resolved), a function or
    class of the file whose facts are ``file``: the rule's ``unit`` clause, else a
    use of a target or a call of a method in the unit, else (for a rule with
    neither) its string pattern and evidence in the unit."""
    needs = rule.needs
    if needs.unit is not None:
        return holds(needs.unit, unit.facts, file, unit)
    if needs.targets or needs.methods:
        return uses_target(needs, unit.facts)
    return syntax_match(rule, unit.facts)

