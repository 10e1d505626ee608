"""MkDocs hooks (mkdocs.yml ``hooks:``): the pages generated at build time, so that nothing
generated is committed and each fact has one home.

- ``index.md`` is README.md, ``contributing.md`` CONTRIBUTING.md and ``runtime-api.md`` the
  runtime's own README (src/porter_runtime/README.md, vendored with it), their links to
  other files of the repository pointed at the site's pages;
- ``rules/CODE.md`` is each rule's documentation, the text ``porter explain CODE`` prints
  (porter.report.explain.render: docstring sections, fix safety and the examples the tests
  run), and the ``rules.md`` page gets the table of every rule.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent

#: Generated page -> the repository file it is made from.
COPIES = {
    "index.md": "README.md",
    "contributing.md": "CONTRIBUTING.md",
    "runtime-api.md": "src/porter_runtime/README.md",
}
#: A repository file -> its page on the site (for links written against the repository).
PAGES = {source: page for page, source in COPIES.items()}

_LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")


def _rules():
    from porter.engine.registry import all_rules

    return all_rules()


def on_files(files, config):
    for page, source in COPIES.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=relink(text, posixpath.dirname(source))))
    from porter.report.explain import render

    for rule in _rules():
        files.append(File.generated(config, f"rules/{rule.code}.md", content=render(rule)))
    return files


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "rules.md":
        return markdown + "\n" + rule_table()
    if page.file.src_uri in COPIES:
        return markdown
    return relink(markdown, "docs")


def rule_table() -> str:
    rows = ["| code | name | safety | summary |", "|---|---|---|---|"]
    for rule in _rules():
        summary = rule.summary().replace("|", "\\|")
        rows.append(f"| [{rule.code}](rules/{rule.code}.md) | {rule.name} | {rule.safety.value} | {summary} |")
    return "\n".join(rows) + "\n"


def relink(text: str, folder: str) -> str:
    """Links of a file in ``folder`` (relative to the repository's root) to a repository
    file that is a page of the site, rewritten to that page; ``docs/X`` becomes ``X``."""

    def page_for(match: re.Match) -> str:
        target, anchor = match.group(1), match.group(2) or ""
        if "://" in target:
            return match.group(0)
        path = posixpath.normpath(posixpath.join(folder, target))
        if path in PAGES:
            return f"]({PAGES[path]}{anchor})"
        if path == "docs":
            return f"](index.md{anchor})"
        if path.startswith("docs/"):
            return f"]({path[len('docs/'):]}{anchor})"
        return match.group(0)

    return _LINK.sub(page_for, text)
