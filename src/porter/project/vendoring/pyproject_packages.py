"""The runtime's packages added to the package list pyproject.toml writes by hand, in any
of the spellings TOML allows for it.

setuptools ships only what ``[tool.setuptools]`` names when it names anything:
``packages = [...]`` (the key bare or quoted, in a ``[tool.setuptools]`` table, in an
inline table ``setuptools = {packages = [...]}`` under ``[tool]``, or as a dotted key)
and ``py-modules = [...]``. A copy of the runtime the build does not ship is missing from
the wheel, and the ported code fails where it is installed. The file is read with
``tomllib``; an edit is a few characters of text, kept only when ``tomllib`` reads the
edited file as the same settings with the names added to ``packages`` and nothing else
changed (otherwise porter leaves the file and says what to add).
"""

from __future__ import annotations

import re
import tomllib
from typing import Iterator, Optional

#: ``packages = [ ... ]`` with the key bare or quoted (a candidate: tomllib decides).
_LIST = re.compile(r"""(?:^|(?<=[{,\s.]))(["']?)packages\1\s*=\s*\[(?P<list>[^\]]*)\]""", re.M)
_TABLE = re.compile(r"""^[ \t]*\[[ \t]*tool[ \t]*\.[ \t]*(["']?)setuptools\1[ \t]*\][^\n]*\n""", re.M)
_INLINE = re.compile(r"""(?:^|(?<=\s))(["']?)setuptools\1\s*=\s*\{""", re.M)
_DOTTED = re.compile(r"""^[ \t]*(["']?)setuptools\1[ \t]*\.[ \t]*(["']?)py-modules\2[ \t]*=""", re.M)


def setuptools_settings(text: str) -> Optional[dict]:
    """The ``[tool.setuptools]`` settings, or None (none, or a file tomllib can't read)."""
    try:
        table = tomllib.loads(text).get("tool", {}).get("setuptools")
    except (tomllib.TOMLDecodeError, RecursionError, ValueError):
        return None
    return table if isinstance(table, dict) else None


def missing_packages(text: str, names: list[str], package: str) -> list[str]:
    """Of ``names``, those the hand-written setuptools package list must gain: for a copy
    inside ``package``, when the list ships that package; for a copy at the root
    (``package`` ""), when the build ships root modules by name (``py-modules``)."""
    table = setuptools_settings(text)
    if table is None:
        return []
    listed = table.get("packages")
    if listed is not None and not isinstance(listed, list):
        return []  # find: / find_namespace: discovery, which porter can't edit by hand
    listed = listed or []
    if package and package not in listed:
        return []
    if not package and not isinstance(table.get("py-modules"), list):
        return []
    return [n for n in names if n not in listed]


def add_packages(text: str, missing: list[str]) -> Optional[str]:
    """``text`` with ``missing`` appended to setuptools' ``packages`` (the key added beside
    ``py-modules`` when there is none), or None when no edit reads back exactly so."""
    before = tomllib.loads(text)
    table = before["tool"]["setuptools"]
    listed = list(table.get("packages") or [])
    for candidate in _candidates(text, missing, "packages" in table):
        try:
            after = tomllib.loads(candidate)
        except (tomllib.TOMLDecodeError, RecursionError, ValueError):
            continue
        if _same_but_packages(before, after, listed + missing):
            return candidate
    return None


def _same_but_packages(before: dict, after: dict, wanted: list[str]) -> bool:
    new = after.get("tool", {}).get("setuptools")
    if not isinstance(new, dict) or new.get("packages") != wanted:
        return False
    old_rest = {k: v for k, v in before["tool"]["setuptools"].items() if k != "packages"}
    new_rest = {k: v for k, v in new.items() if k != "packages"}
    strip = lambda data, table: {**data, "tool": {**data["tool"], "setuptools": table}}  # noqa: E731
    return old_rest == new_rest and strip(before, {}) == strip(after, {})


def _candidates(text: str, missing: list[str], has_list: bool) -> Iterator[str]:
    if has_list:
        for match in _LIST.finditer(text):
            yield text[:match.start("list")] + _extended(match.group("list"), missing) + text[match.end("list"):]
        return
    quoted = ", ".join(f'"{n}"' for n in missing)
    for match in _TABLE.finditer(text):
        yield text[:match.end()] + f"packages = [{quoted}]\n" + text[match.end():]
    for match in _INLINE.finditer(text):
        yield text[:match.end()] + f"packages = [{quoted}], " + text[match.end():]
    for match in _DOTTED.finditer(text):
        yield text[:match.start()] + f"setuptools.packages = [{quoted}]\n" + text[match.start():]


def _extended(listed: str, missing: list[str]) -> str:
    """The inside of a list with ``missing`` appended, in the list's own layout."""
    quote = next((c for c in listed if c in "\"'"), '"')
    items = [f"{quote}{n}{quote}" for n in missing]
    body = listed.rstrip()
    tail = listed[len(body):]
    if not body:
        return ", ".join(items) + tail
    comma = "" if body.endswith(",") else ","
    if "\n" in listed:
        last_line = body[body.rfind("\n") + 1:]
        indent = last_line[:len(last_line) - len(last_line.lstrip())]
        return body + comma + "".join(f"\n{indent}{item}," for item in items) + tail
    return body + comma + " " + ", ".join(items) + tail
