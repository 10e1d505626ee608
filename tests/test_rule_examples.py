"""Every example of every rule is a test: the examples are the specification."""

import pytest

from porter.engine.process import Options, ledger_source, migrate_source, migrate_text
from porter.report.explain import render
from porter.project.model import build_from
from porter.engine.registry import all_rules
from porter.rulebase.rule import Example, Rule, Safety, TextRule

RULES = all_rules()
VALID = [(rule, i, code) for rule in RULES for i, code in enumerate(rule.valid)]
INVALID = [(rule, i, example) for rule in RULES for i, example in enumerate(rule.invalid)]


def migrate(rule, code: str, path: str = "example.py", project=()):
    options = Options(rules=[rule], unsafe_fixes=True)
    if project:  # the example's repository: its other modules (and texts: a README), and the example itself
        sources = {**{p: c.encode() for p, c in project if p.endswith(".py")}, path: code.encode()}
        texts = {p: c.encode() for p, c in project if not p.endswith(".py")}
        options = Options(rules=[rule], unsafe_fixes=True, project=build_from(sources, texts or None))
    if issubclass(rule, TextRule):
        return migrate_text(code.encode(), options, path=path)
    if not issubclass(rule, Rule):  # the ledger's catch-all, PT999 (porter.project.touchpoints.ledger)
        return ledger_source(code.encode(), path)
    return migrate_source(code.encode(), options, path=path)


@pytest.mark.parametrize("rule,index,code", VALID, ids=[f"{r.code}-valid-{i}" for r, i, _ in VALID])
def test_valid_example_is_left_alone(rule, index, code):
    example = code if isinstance(code, Example) else Example(code)
    result = migrate(rule, example.before, example.path, example.project)
    assert result.new.decode() == example.before
    assert result.findings == []


@pytest.mark.parametrize("rule,index,example", INVALID, ids=[f"{r.code}-invalid-{i}" for r, i, _ in INVALID])
def test_invalid_example_gives_its_output_and_a_finding(rule, index, example):
    result = migrate(rule, example.before, example.path, example.project)
    expected = example.before if example.after is None else example.after
    assert result.new.decode() == expected
    assert any(f.code == rule.code for f in result.findings)
    if example.line is not None or example.message:
        assert any(f.code == rule.code and example.line in (None, f.line) and example.message in f.message
                   for f in result.findings), [(f.line, f.message) for f in result.findings]
    if example.path.endswith(".py"):
        compile(result.new, "example.py", "exec")
    again = migrate(rule, expected, example.path, example.project)
    assert again.new.decode() == expected, "a second run must change nothing"
    if example.after is not None:
        assert not again.rewrites


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_rule_is_documented(rule):
    doc = rule.doc()
    assert doc.summary
    for section in ("What", "Why", "Fix safety", "Known limits"):
        assert doc.sections.get(section), f"{rule.code} lacks a {section} section"
    assert rule.valid and rule.invalid
    text = render(rule)
    assert rule.code in text and doc.sections["Fix safety"].splitlines()[0] in text
    if rule.safety is Safety.REVIEW:
        assert all(e.after is None for e in rule.invalid)


def test_codes_and_names_are_unique():
    codes = [r.code for r in RULES]
    names = [r.name for r in RULES]
    assert len(set(codes)) == len(codes)
    assert len(set(names)) == len(names)
