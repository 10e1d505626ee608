"""``porter explain CODE``: a rule's documentation, generated from its docstring and
examples (the same examples the tests run)."""

from __future__ import annotations

import textwrap

from porter.rulebase.rule import Rule

SECTIONS = ("What", "Why", "Fix safety", "Known limits")


def render(rule: type[Rule]) -> str:
    doc = rule.doc()
    out = [f"{rule.code} {rule.name} ({rule.safety.value})", "", doc.summary, ""]
    for heading in SECTIONS:
        if heading in doc.sections:
            out += [f"## {heading}", "", doc.sections[heading], ""]
    rewrites = [e for e in rule.invalid if e.after is not None]
    reports = [e for e in rule.invalid if e.after is None]
    if rewrites:
        out += ["## Examples", ""]
        for example in rewrites:
            where = "" if example.path.endswith(".py") else f" ({example.path})"
            out += [f"Before{where}:", _indent(example.before), "After:", _indent(example.after or ""), ""]
    if reports:
        out += ["## Reported for review (not rewritten)", ""]
        out += [(f"{example.path}:\n" if not example.path.endswith(".py") else "") + _indent(example.before) + "\n"
                for example in reports]
    if rule.valid:
        out += ["## Left alone", ""]
        out += [_indent(getattr(code, "before", code)) + "\n" for code in rule.valid]
    return "\n".join(out).rstrip() + "\n"


def _indent(code: str) -> str:
    return textwrap.indent(code.rstrip("\n"), "    ")
