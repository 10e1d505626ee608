"""What ``porter migrate`` makes of its paths, flags and settings files, before it runs.

- The root: the project that holds every path. Paths from two projects side by side
  are refused with one line naming them (a diff from two roots is one ``git apply``
  can't use from either); a project nested in another one's tree runs as part of the
  outer one; ``--root`` says it explicitly.
- The settings: the nearest settings file (porter.cli.folder_settings), flags on top;
  ``extend-select`` / ``extend-exclude`` add to ``select`` / ``exclude`` (theirs or the
  flags'), as in ruff.
- ``force-exclude``: ``exclude`` also drops the files named on the command line (what
  pre-commit passes), as in ruff; without it a file named is taken as given.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Optional, Sequence

from porter.cli.folder_settings import nested_configs, rooted_globs
from porter.engine.config import Config, ConfigError, check_codes
from porter.engine.discover import find_root, relative_posix
from porter.engine.options import Options
from porter.engine.registry import select_rules
from porter.engine.run import RunConfig


class InputProblem(Exception):
    """An input porter can't use; the message is one line for the user."""


def split(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def project_root(paths: Sequence[Path], given: Optional[Path]) -> Path:
    """The run's root: ``given``, else the project holding every path."""
    if given is not None:
        return given.absolute()
    roots = [find_root([p]) for p in paths]
    outer = [r for r in dict.fromkeys(roots) if not any(r != o and r.is_relative_to(o) for o in roots)]
    if len(outer) > 1:
        names = ", ".join(str(r) for r in outer[:3]) + (", ..." if len(outer) > 3 else "")
        raise InputProblem(f"the paths belong to {len(outer)} projects ({names}); a diff and a runtime are "
                           "per project: run porter once per project, or pass --root with a folder "
                           "above them all")
    return outer[0].absolute()


def excluded(rel: str, globs: Sequence[str]) -> bool:
    """Whether a root-relative path matches an exclude glob (as discovery matches them)."""
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) or fnmatch.fnmatch(rel, g.rstrip("/") + "/*")
               for g in globs)


def force_excluded(paths: Sequence[Path], root: Path, globs: Sequence[str]) -> list[Path]:
    """The paths named on the command line that ``exclude`` does not match."""
    return [p for p in paths if not excluded(relative_posix(p, root), globs)]


def _codes(values: Sequence[str], flag: str) -> Optional[list[str]]:
    if not values:
        return None
    try:
        codes = check_codes(split(values), flag)
    except ConfigError as exc:
        raise InputProblem(str(exc)) from None
    if not codes:
        raise InputProblem(f"{flag}: no rule code given")
    return codes


def choose_rules(settings: Config, select=(), ignore=(), extend_select=()):
    """The rules of ``settings`` with the flags on top (a flag given replaces the key)."""
    flag = _codes(select, "--select")
    extra = _codes(extend_select, "--extend-select") or []
    # as ruff: --select starts over; the settings' select and extend-select apply otherwise
    chosen = flag or settings.select
    more = extra if flag else settings.extend_select + extra
    if chosen and more:
        chosen = chosen + more
    rules = select_rules(chosen or (), _codes(ignore, "--ignore") or settings.ignore or ())
    if not rules:  # a run of no rule would pass --check whatever the code holds
        raise InputProblem("no rule left to run: --ignore (or the settings' ignore) removes every rule "
                           "--select chose")
    return rules


def exclude_globs(settings: Config, exclude=(), extend_exclude=(), root: Optional[Path] = None) -> list[str]:
    """The run's exclude globs, relative to the root: the flags', and the settings file's
    counted from its own folder (``--exclude`` replaces its ``exclude``, not its
    ``extend-exclude``)."""
    return split(exclude) + _own_globs(settings, bool(exclude), _base(settings, root)) + split(extend_exclude)


def _own_globs(config: Config, replaced: bool, base: str) -> list[str]:
    own = ([] if replaced else config.exclude or []) + config.extend_exclude
    return rooted_globs(base, own) if base else own


def _base(settings: Config, root: Optional[Path]) -> str:
    """The settings file's folder relative to the root ("" at the root, or above it)."""
    if settings.source is None or root is None:
        return ""
    rel = relative_posix(settings.source.parent, root)
    return "" if rel == "." or rel.startswith("../") or rel.startswith("/") else rel


def run_config(paths, root: Path, settings: Config, select=(), ignore=(), exclude=(), runtime_dir=None,
               unsafe_fixes=None, jobs: int = 1, extend_select=(), extend_exclude=(),
               nested: bool = True) -> RunConfig:
    """The run's settings: each flag given wins over the settings files' values."""
    excludes = exclude_globs(settings, exclude, extend_exclude, root)
    folders = []
    if nested:
        for folder, sub in nested_configs(paths, root, excludes, settings.source):
            rules = choose_rules(sub, select, ignore, extend_select)
            ignores = tuple((glob, tuple(codes)) for glob, codes in sub.per_file_ignores.items())
            folders.append((folder, tuple(rules), ignores))
            excludes += _own_globs(sub, bool(exclude), folder)
    runtime_dir = runtime_dir or settings.runtime_dir
    options = Options(
        rules=choose_rules(settings, select, ignore, extend_select),
        unsafe_fixes=bool(unsafe_fixes if unsafe_fixes is not None else settings.unsafe_fixes),
        dependencies=settings.dependencies or "marker",
        per_file_ignores=tuple((glob, tuple(codes)) for glob, codes in settings.per_file_ignores.items()),
        folders=tuple(folders),
    )
    return RunConfig(paths=[p.absolute() for p in paths], root=root, options=options, excludes=excludes,
                     runtime_dir=runtime_dir.absolute() if runtime_dir else None, jobs=jobs)
