"""The documentation: the README a user reads, and the MkDocs site built from docs/ with a
page per rule generated from the rule classes (mkdocs_hooks.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from porter.engine.registry import all_rules
from porter_test_utils import ROOT

RULES = all_rules()


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `mkdocs build --strict` makes it: any broken link, missing page or
    anchor fails the build."""
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def _text(html: str) -> str:
    import html as lib

    return lib.unescape(re.sub(r"<[^>]+>", "", html))


def test_each_rule_has_a_page_with_its_documentation_and_examples(site):
    for rule in RULES:
        page = site / "rules" / rule.code / "index.html"
        assert page.is_file(), f"no page for {rule.code}"
        text = _text(page.read_text())
        assert f"{rule.code} {rule.name} ({rule.safety.value})" in text
        assert rule.doc().sections["Fix safety"].split()[0] in text
    # one page in full: its sections and examples, as `porter explain` shows them
    text = _text((site / "rules" / "PT102" / "index.html").read_text())
    for heading in ("What", "Why", "Fix safety", "Known limits", "Examples", "Left alone"):
        assert f"\n{heading}\n" in text, heading
    [example] = [e for e in next(r for r in RULES if r.code == "PT102").invalid if "as t" in e.before]
    assert example.before.strip() in text and example.after.strip() in text
    assert '<code class="language-python">' in (site / "rules" / "PT102" / "index.html").read_text()


def test_the_rules_page_links_every_rule_and_the_home_page_is_the_readme(site):
    index = (site / "rules" / "index.html").read_text()
    for rule in RULES:
        assert f'href="{rule.code}/"' in index, rule.code
    home = _text((site / "index.html").read_text())
    assert "python -m pip install -e \".[test]\" && porter migrate fixtures/repos/multipkg --diff" in home
    # the README's links into docs/ point at the site's pages
    assert 'href="commands/#errors"' in (site / "index.html").read_text()
    for page in ("commands", "settings", "runtime", "runtime-api", "how-porter-works", "gauntlet",
                 "first-contact", "benchmarks", "history", "contributing", "layout"):
        assert (site / page / "index.html").is_file(), page


def test_nothing_generated_is_committed():
    assert not (ROOT / "docs" / "index.md").exists() and not (ROOT / "docs" / "rules").exists()


def test_readme_is_short_and_counts_the_rules_truly():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) < 15 * 1024
    assert f"Porter has {len(RULES)} rules" in text
    # reference lives in docs/: the rule table and the internals are not in the README
    assert "| PT001 | cuda-method |" not in text and "PORTER_SEGMENTS" not in text


def test_sarif_docs_url_is_the_sites_address():
    from porter.report.sarif import DOCS_URL

    [site_url] = re.findall(r"^site_url:\s*(\S+)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert DOCS_URL == site_url and DOCS_URL.endswith("/")
