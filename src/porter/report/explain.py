"""``porter explain CODE``: a rule's documentation, generated from its docstring and
examples (the same examples the tests run), as Markdown. The same text is the rule's
``help`` in SARIF and its page on the documentation site (mkdocs_hooks.py)."""

from __future__ import annotations

import re

from porter.rulebase.rule import Rule

SECTIONS = ("What", "Why", "Fix safety", "Known limits")


def render(rule: type[Rule]) -> str:
    doc = rule.doc()
    out = [f"# {rule.code} {rule.name} ({rule.safety.value})", "", doc.summary, ""]
    for heading in SECTIONS:
        if heading in doc.sections:
            out += [f"## {heading}", "", doc.sections[heading], ""]
    rewrites = [e for e in rule.invalid if e.after is not None]
    reports = [e for e in rule.invalid if e.after is None]
    if rewrites:
        out += ["## Examples", ""]
        for example in rewrites:
            where = "" if example.path.endswith(".py") else f" ({example.path})"
            out += [f"Before{where}:", "", _fence(example.before, example.path),
                    "After:", "", _fence(example.after or "", example.path)]
    if reports:
        out += ["## Reported for review (not rewritten)", ""]
        for example in reports:
            out += ([f"{example.path}:", ""] if not example.path.endswith(".py") else [])
            out += [_fence(example.before, example.path)]
    if rule.valid:
        out += ["## Left alone", ""]
        for code in rule.valid:
            path = getattr(code, "path", "example.py")
            out += ([f"{path}:", ""] if not path.endswith(".py") else [])
            out += [_fence(getattr(code, "before", code), path)]
    return "\n".join(out).rstrip() + "\n"


#: The fence's language by file suffix (an example's ``path``); others are plain text.
_LANGUAGES = {".py": "python", ".ipynb": "json", ".json": "json", ".yaml": "yaml", ".yml": "yaml",
              ".toml": "toml", ".cfg": "ini", ".ini": "ini", ".sh": "sh", ".txt": "text"}


def _fence(code: str, path: str) -> str:
    """A fenced code block (long enough a fence that the code's own backticks can't close it)."""
    language = next((lang for suffix, lang in _LANGUAGES.items() if path.endswith(suffix)), "text")
    ticks = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", code)), default=0))
    return f"{ticks}{language}\n{code.rstrip(chr(10))}\n{ticks}\n"
