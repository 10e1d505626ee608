"""Keeping the repository's formatters and linters off the vendored runtime.

A formatter run over a vendored copy rewrites porter's bytes, and porter then takes the
copy for one edited by hand and stops growing it. ruff reads the copy's own
``pyproject.toml`` (``exclude = ["*"]``); black, isort and flake8 read only the
repository's configuration, so where the repository configures one of them (its section
exists), porter adds the one key that skips the copies and the pointer modules:

- ``[tool.black]``: ``force-exclude``, which black honours for files passed by name too
  (pre-commit passes them so);
- ``[tool.isort]`` and isort's sections of setup.cfg / tox.ini / .isort.cfg: ``extend_skip``
  (isort skips by folder or file name);
- ``[flake8]`` in setup.cfg, tox.ini or .flake8: ``extend-exclude``.

A section that already sets that key is left alone, and the note says what to add.
A repository that configures none of them is not touched.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from porter.files.apply import Change
from porter.files.safe_io import read_bounded

RUNTIME = "porter_runtime"
#: black's regexes match a path from the root, "/" first: the copies and the pointer modules.
BLACK = r'"/porter_runtime(/|\\.py$)"'
#: (file, section, key, value): the key each tool reads to skip paths, and porter's value.
_TOOLS = (
    ("pyproject.toml", "tool.black", "force-exclude", BLACK),
    ("pyproject.toml", "tool.isort", "extend_skip", '["porter_runtime", "porter_runtime.py"]'),
    (".isort.cfg", "settings", "extend_skip", "porter_runtime,porter_runtime.py"),
    ("setup.cfg", "isort", "extend_skip", "porter_runtime,porter_runtime.py"),
    ("setup.cfg", "tool:isort", "extend_skip", "porter_runtime,porter_runtime.py"),
    ("tox.ini", "isort", "extend_skip", "porter_runtime,porter_runtime.py"),
    (".flake8", "flake8", "extend-exclude", "porter_runtime,porter_runtime.py"),
    ("setup.cfg", "flake8", "extend-exclude", "porter_runtime,porter_runtime.py"),
    ("tox.ini", "flake8", "extend-exclude", "porter_runtime,porter_runtime.py"),
)


def exempt_changes(root: Path, write: bool, bases: Optional[dict] = None) -> list[tuple[Optional[Change], str]]:
    """The config changes that keep the tools off the vendored runtime, each with a note
    (a change None: only a note). ``bases``: a file's bytes as this run left them, where
    a dry run changed it already."""
    found: list[tuple[Optional[Change], str]] = []
    texts: dict[str, bytes] = {}
    originals: dict[str, Optional[bytes]] = {}
    for name, section, key, value in _TOOLS:
        if name not in texts:
            originals[name] = _read(root / name, (bases or {}).get(name))
            texts[name] = originals[name] or b""
        text = texts[name].decode("utf-8", errors="surrogateescape")
        edited = _add_key(text, section, key, value)
        if edited is None:
            body = _section_body(text, section)
            if body is not None and RUNTIME not in body:
                found.append((None, f"{name}: [{section}] sets {key} already: add porter_runtime to it, so that "
                                    f"the tool leaves the vendored runtime alone"))
            continue
        texts[name] = edited.encode("utf-8", errors="surrogateescape")
    for name, data in texts.items():
        if originals[name] is not None and data != originals[name]:
            verb = "added" if write else "would add"
            found.append((Change(name, originals[name], data, runtime=True),
                          f"{name}: {verb} the vendored runtime to what the repository's formatters and linters skip"))
    return found


def _read(path: Path, base: Optional[bytes]) -> Optional[bytes]:
    if base is not None:
        return base
    try:
        return read_bounded(path, follow=False) if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


def _header(section: str) -> re.Pattern:
    return re.compile(r"^\[" + re.escape(section) + r"\][ \t]*(?:#[^\n]*)?\r?\n", re.M)


def _section_body(text: str, section: str) -> Optional[str]:
    match = _header(section).search(text)
    if match is None:
        return None
    end = re.compile(r"^\[", re.M).search(text, match.end())
    return text[match.end():end.start() if end else len(text)]


def _add_key(text: str, section: str, key: str, value: str) -> Optional[str]:
    """``text`` with ``key = value`` first in the section; None when the section is
    missing or sets the key (either spelling: ``extend_skip``, ``extend-skip``) already."""
    match = _header(section).search(text)
    body = _section_body(text, section)
    if match is None or body is None:
        return None
    spellings = {key, key.replace("_", "-"), key.replace("-", "_")}
    if any(re.search(r"^[ \t]*" + re.escape(k) + r"[ \t]*[=:]", body, re.M) for k in spellings):
        return None
    newline = "\r\n" if match.group(0).endswith("\r\n") else "\n"
    return text[:match.end()] + f"{key} = {value}{newline}" + text[match.end():]
