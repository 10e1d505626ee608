"""SARIF ``fixes`` for porter's rewrites: the file's change as line replacements.

A finding's ``before`` / ``after`` are one-line excerpts (whitespace runs joined, long
ones cut), so they can't be replayed; the change itself can. Each block of changed lines
is one replacement of whole lines (from column 1 of its first line to column 1 of the
line after it), which a SARIF viewer applies as is. A rewrite's fix holds the blocks on
its lines; the first rewrite of a file also holds the blocks no rewrite sits on (the
``import porter_runtime`` the rewrites need), so that fix alone makes valid code.
"""

from __future__ import annotations

import difflib
from typing import Any

from porter.files.sources import source_encoding

Replacement = dict[str, Any]


def replacements(old: bytes, new: bytes) -> list[Replacement]:
    """The changed blocks of lines, as SARIF replacements (1-based lines)."""
    try:
        encoding = source_encoding(old)
        a = old.decode(encoding).splitlines(keepends=True)
        b = new.decode(encoding).splitlines(keepends=True)
    except (UnicodeDecodeError, LookupError, SyntaxError):
        return []
    out = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        region = {"startLine": i1 + 1, "startColumn": 1, "endLine": i2 + 1, "endColumn": 1}
        out.append({"deletedRegion": region, "insertedContent": {"text": "".join(b[j1:j2])}})
    return out


def fixes_for(rewrites: list[dict[str, Any]], blocks: list[Replacement]) -> list[list[Replacement]]:
    """For each rewrite (in order), the replacements its fix makes."""
    owned: list[list[Replacement]] = [[] for _ in rewrites]
    orphans: list[Replacement] = []
    for block in blocks:
        region = block["deletedRegion"]
        last = max(region["startLine"], region["endLine"] - 1)
        owners = [i for i, item in enumerate(rewrites) if region["startLine"] <= item["line"] <= last]
        for i in owners:
            owned[i].append(block)
        if not owners:
            orphans.append(block)
    if rewrites:
        owned[0] = sorted(owned[0] + orphans, key=lambda r: r["deletedRegion"]["startLine"])
    return owned
