"""Settings kept with the code: ``[tool.porter]`` in pyproject.toml, or ``porter.toml``.

Like ruff, the settings of a file are in the nearest folder at or above it that holds
``porter.toml`` (keys at the top level, wins) or a ``pyproject.toml`` with ``[tool.porter]``
(porter.cli.folder_settings). Command-line flags win over both. A key porter does not know, or a value of the wrong kind, is an error
that names the file and the key: a typo must never silently switch a rule back on.

    [tool.porter]
    select = ["PT", "TP1"]          # rule code prefixes to run (default: every rule)
    extend-select = ["PT9"]         # more prefixes on top of select
    ignore = ["PT801"]              # rule code prefixes to skip
    exclude = ["experiments/*"]     # path globs to skip, relative to the settings file
    extend-exclude = ["legacy/*"]   # more globs on top of exclude
    force-exclude = false           # true: exclude files named on the command line too
    runtime-dir = "src/porter_runtime"   # where --write vendors the runtime
    unsafe-fixes = false
    full-runtime = false            # vendor every runtime module, not only those the port uses
    dependencies = "marker"         # CUDA-only requirements: "marker" or "extra"
    [tool.porter.per-file-ignores]
    "tests/*" = ["PT201"]
"""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from porter.engine.registry import all_rules
from porter.files.safe_io import read_bounded

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 has no tomllib
    import tomli as tomllib

DEPENDENCY_MODES = ("marker", "extra")


class ConfigError(Exception):
    """A settings file porter cannot use; the message names the file and the key."""


@dataclass
class Config:
    """The settings of one run; ``None`` means "not set" (the default applies)."""

    source: Optional[Path] = None
    select: Optional[list[str]] = None
    extend_select: list[str] = field(default_factory=list)
    ignore: Optional[list[str]] = None
    exclude: Optional[list[str]] = None
    extend_exclude: list[str] = field(default_factory=list)
    force_exclude: Optional[bool] = None
    runtime_dir: Optional[Path] = None
    unsafe_fixes: Optional[bool] = None
    full_runtime: Optional[bool] = None
    dependencies: Optional[str] = None
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)


def find_config(root: Path) -> Optional[Path]:
    """The settings file at ``root``: porter.toml, else a pyproject.toml with [tool.porter]."""
    own = root / "porter.toml"
    if own.is_file():
        return own
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and _porter_table(pyproject, _read(pyproject)) is not None:
        return pyproject
    return None


def load_config(root: Path, explicit: Optional[Path] = None) -> Config:
    """The settings for a run rooted at ``root`` (or from ``explicit``); empty when none."""
    path = explicit or find_config(root)
    if path is None:
        return Config()
    table = _porter_table(path, _read(path)) or {}
    return _parse(path, table)


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(read_bounded(path).decode("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path.name}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path.name}: cannot decode as utf-8: byte 0x{exc.object[exc.start]:02x} "
                          "(TOML files are UTF-8)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path.name}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per level of nesting
        raise ConfigError(f"{path.name}: arrays or tables nested too deep to read (Python's recursion limit, "
                          f"{sys.getrecursionlimit()})") from None


def _porter_table(path: Path, data: dict[str, Any]) -> Optional[dict[str, Any]]:
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        if path.name == "pyproject.toml":
            raise ConfigError(f"{path.name}: 'tool' must be a table, not {type(tool).__name__}")
        tool = {}
    if path.name == "pyproject.toml" or "porter" in tool:
        table = tool.get("porter")
        if table is not None and not isinstance(table, dict):
            raise ConfigError(f"{path.name}: [tool.porter] must be a table")
        return table
    return data


def _parse(path: Path, table: dict[str, Any]) -> Config:
    where = f"{path.name}: [tool.porter]" if path.name == "pyproject.toml" else f"{path.name}:"
    config = Config(source=path)
    for key, value in table.items():
        parse = _KEYS.get(key)
        if parse is None:
            known = ", ".join(sorted(_KEYS))
            raise ConfigError(f"{where} unknown key {key!r} (known keys: {known})")
        parse(config, value, f"{where} {key}", path.parent)
    return config


def _codes(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of rule codes, like [\"PT001\", \"TP\"]")
    return check_codes(value, where)


def check_codes(values: list[str], where: str) -> list[str]:
    """The codes, upper-cased; ConfigError for one that selects no rule (flags and
    settings alike: a typo must never run nothing and pass)."""
    codes = [v.strip().upper() for v in values]
    known = [rule.code for rule in all_rules()]
    for code in codes:
        if not any(k.startswith(code) for k in known):
            raise ConfigError(f"{where}: no rule code starts with {code!r} (`porter rules` lists them)")
    return codes


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return list(value)


def _set_select(config: Config, value: Any, where: str, base: Path) -> None:
    config.select = _codes(value, where)


def _set_ignore(config: Config, value: Any, where: str, base: Path) -> None:
    config.ignore = _codes(value, where)


def _set_exclude(config: Config, value: Any, where: str, base: Path) -> None:
    config.exclude = _strings(value, where)


def _set_extend_select(config: Config, value: Any, where: str, base: Path) -> None:
    config.extend_select = _codes(value, where)


def _set_extend_exclude(config: Config, value: Any, where: str, base: Path) -> None:
    config.extend_exclude = _strings(value, where)


def _set_force_exclude(config: Config, value: Any, where: str, base: Path) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false")
    config.force_exclude = value


def _set_runtime_dir(config: Config, value: Any, where: str, base: Path) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: expected a folder path (a string)")
    # Relative to the settings file, like every path in it, and inside its folder: a
    # repository's settings never make porter write elsewhere.
    folder = Path(os.path.normpath(base.absolute() / value))
    if Path(value).is_absolute() or not folder.is_relative_to(base.absolute()):
        raise ConfigError(f"{where}: {value!r} is outside the folder of {where.split(':')[0]}; "
                          "a settings file names only paths inside its own folder")
    config.runtime_dir = folder


def _set_unsafe(config: Config, value: Any, where: str, base: Path) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false")
    config.unsafe_fixes = value


def _set_full_runtime(config: Config, value: Any, where: str, base: Path) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false")
    config.full_runtime = value


def _set_dependencies(config: Config, value: Any, where: str, base: Path) -> None:
    if value not in DEPENDENCY_MODES:
        raise ConfigError(f"{where}: expected \"marker\" or \"extra\", got {value!r}")
    config.dependencies = value


def _set_per_file(config: Config, value: Any, where: str, base: Path) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a table of \"glob\" = [\"CODE\", ...]")
    config.per_file_ignores = {glob: _codes(codes, f"{where}.{glob!r}") for glob, codes in value.items()}


_KEYS = {
    "select": _set_select,
    "extend-select": _set_extend_select,
    "ignore": _set_ignore,
    "exclude": _set_exclude,
    "extend-exclude": _set_extend_exclude,
    "force-exclude": _set_force_exclude,
    "runtime-dir": _set_runtime_dir,
    "unsafe-fixes": _set_unsafe,
    "full-runtime": _set_full_runtime,
    "dependencies": _set_dependencies,
    "per-file-ignores": _set_per_file,
}


def ignored_codes(per_file_ignores, rel: str) -> tuple[str, ...]:
    """The code prefixes that ``per-file-ignores`` turns off for the root-relative ``rel``:
    a glob matches the whole path, the file name, or a folder above the file."""
    name = rel.rsplit("/", 1)[-1]
    codes: list[str] = []
    for glob, prefixes in per_file_ignores:
        if (fnmatch.fnmatch(rel, glob) or fnmatch.fnmatch(name, glob)
                or fnmatch.fnmatch(rel, glob.rstrip("/") + "/*")):
            codes += prefixes
    return tuple(codes)
