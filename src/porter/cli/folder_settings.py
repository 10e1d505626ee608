"""Which settings file governs which files, as ruff decides it.

The run's settings are the nearest ``porter.toml`` / ``pyproject.toml`` with
``[tool.porter]`` at or above the first path (up to the file system's root): a
pre-commit run on ``sub/x.py`` reads ``sub/porter.toml`` as a run on ``sub/`` would.
A settings file further down the tree governs the files below its folder: its
``select`` / ``ignore`` / ``extend-select`` / ``per-file-ignores`` choose their rules
(standing alone, as a nested ruff config does), and its ``exclude`` globs count from
its own folder. Command-line flags win over every file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from porter.engine.config import Config, ConfigError, find_config, load_config
from porter.engine.discover import discover, relative_posix

_NAMES = ("porter.toml", "pyproject.toml")


def nearest_config(start: Path) -> Optional[Path]:
    """The settings file nearest at or above ``start`` (a file or folder)."""
    start = start.absolute()
    folder = start if start.is_dir() else start.parent
    for candidate in [folder, *folder.parents]:
        found = find_config(candidate)
        if found is not None:
            return found
    return None


def nested_configs(paths: Sequence[Path], root: Path, excludes: Sequence[str],
                   top: Optional[Path]) -> list[tuple[str, Config]]:
    """The settings files inside the run's folders other than ``top`` (the run's own),
    deepest first: (folder relative to the root, its settings)."""
    folders = [p for p in paths if p.is_dir()]
    if not folders:
        return []
    found = discover(folders, root, excludes, patterns=list(_NAMES))
    out: dict[str, Config] = {}
    for file in found.files:
        folder = file.parent
        rel = relative_posix(folder, root)
        if rel in out or rel == "." or rel.startswith("../") or _settings_file(folder) != file:
            continue
        if top is not None and file.absolute() == top.absolute():
            continue
        out[rel] = load_config(folder)
    return sorted(out.items(), key=lambda item: (-item[0].count("/"), item[0]))


def _settings_file(folder: Path) -> Optional[Path]:
    """The folder's settings file; a pyproject.toml that is not valid TOML holds none
    (a sample project's broken file must not stop the run over the whole tree)."""
    try:
        return find_config(folder)
    except ConfigError:
        return None


def rooted_globs(folder: str, globs: Sequence[str]) -> list[str]:
    """A nested file's ``exclude`` globs as globs relative to the run's root: the path
    below the folder, or a name anywhere below it."""
    out = []
    for glob in globs:
        glob = glob.strip("/")
        out += [f"{folder}/{glob}", f"{folder}/*/{glob}"] if "/" not in glob else [f"{folder}/{glob}"]
    return out
