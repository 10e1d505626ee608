"""Finding the Python files of a run: skip what is not the user's code.

Skipped: ``.git`` and other VCS folders, virtual environments (any folder holding a
``pyvenv.cfg``, or named like one), build and cache folders, the vendored runtime, paths
matching ``--exclude`` globs, and whatever ``.gitignore`` files ignore, except what git
tracks (a vendored package a ``.gitignore`` names but the repository commits, as git
itself reads it: ignore rules are for untracked files). Symbolic links
are never followed: a link is reported and skipped, so porter can't write outside the
tree or walk in a loop.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

from porter.files.apply import runtime_files
from porter.files.safe_io import text_bounded
from porter.files.vendor_write import is_leftover_name, is_partial, older_partial
from porter.project.vendoring.runtime_copy import is_pointer, is_vendored

SKIP_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".env", ".tox", ".nox", ".eggs",
    "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis",
    "node_modules", "site-packages", ".ipynb_checkpoints",
})
#: Skipped only when it is what the name says (a virtual environment): ``env/`` in
#: research code is as often a package of RL environments.
VENV_NAMES = frozenset({"env"})
#: Build output by name: skipped, and said so when they hold Python files (name one on
#: the command line to port it).
OUTPUT_DIRS = frozenset({"build", "dist"})


@dataclass
class Skipped:
    path: str
    reason: str
    #: True when porter could not look (an unreadable folder), as opposed to a
    #: deliberate skip (a symbolic link): it makes the run exit 2.
    error: bool = False


@dataclass
class Discovery:
    files: list[Path] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


class GitIgnore:
    """The subset of gitignore semantics that matters for source trees.

    The last rule that matches a path decides. A path is checked against every rule only
    where it must be: rules that are a plain name (``build_12/``), a plain path
    (``/docs/out``) or ``*`` and a plain ending (``*.tmp``) are looked up by the path's
    name, the path itself or the name's endings; only the other rules are tried one by
    one (a 100,000-line ``.gitignore`` made every file cost 100,000 regex matches)."""

    _WILD = re.compile(r"[*?\[\\]")

    def __init__(self, base: Path, lines: Sequence[str]) -> None:
        self.base = base
        self.rules: list[tuple[re.Pattern[str], bool, bool]] = []
        self._names: dict[str, list[int]] = {}
        self._paths: dict[str, list[int]] = {}
        self._endings: dict[str, list[int]] = {}
        self._others: list[int] = []
        for raw in lines:
            line = raw.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            line = line[1:] if negate else line
            dir_only = line.endswith("/")
            line = line.strip("/") if dir_only else line
            anchored = "/" in line.rstrip("/")
            line = line.lstrip("/")
            index = len(self.rules)
            self.rules.append((_glob_regex(line, anchored), negate, dir_only))
            if not line:
                self._others.append(index)
            elif not self._WILD.search(line):
                (self._paths if anchored else self._names).setdefault(line, []).append(index)
            elif not anchored and line.startswith("*") and not self._WILD.search(line[1:]) and line[1:]:
                self._endings.setdefault(line[1:], []).append(index)
            else:
                self._others.append(index)

    @classmethod
    def load(cls, folder: Path) -> Optional["GitIgnore"]:
        path = folder / ".gitignore"
        try:
            return cls(folder, text_bounded(path).splitlines())
        except OSError:
            return None

    def ignored(self, path: Path, is_dir: bool) -> Optional[bool]:
        rel = path.relative_to(self.base).as_posix()
        name = rel.rsplit("/", 1)[-1]
        candidates = [*self._names.get(name, ()), *self._paths.get(rel, ()),
                      *(i for k in range(len(name)) for i in self._endings.get(name[k:], ()))]
        last = max((i for i in candidates if is_dir or not self.rules[i][2]), default=-1)
        for index in reversed(self._others):
            if index < last:
                break
            pattern, _, dir_only = self.rules[index]
            if (is_dir or not dir_only) and pattern.match(rel):
                last = index
                break
        return None if last < 0 else not self.rules[last][1]


def _glob_regex(pattern: str, anchored: bool) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "\\" and i + 1 < len(pattern):  # an escaped character: itself
            out += re.escape(pattern[i + 1])
            i += 2
        elif pattern[i] == "[" and _class_end(pattern, i) > 0:
            end = _class_end(pattern, i)
            body = pattern[i + 1:end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out += "[" + ("^/" if negate else "") + "".join("\\" + c if c in "\\^[]" else c for c in body) + "]"
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    prefix = "" if anchored else "(?:.*/)?"
    return re.compile(f"^{prefix}{out}$")


def _class_end(pattern: str, start: int) -> int:
    """Where the character class opened at ``start`` closes (a "]" right after "[" or
    "[!" is a member), or -1: an unclosed "[" is a plain character, as in git."""
    i = start + 1
    if pattern[i:i + 1] in ("!", "^"):
        i += 1
    if pattern[i:i + 1] == "]":
        i += 1
    end = pattern.find("]", i)
    return end


def _excluded(rel: str, excludes: Sequence[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) or fnmatch.fnmatch(rel, g.rstrip("/") + "/*")
               for g in excludes)


def _is_venv(folder: Path) -> bool:
    try:
        return (folder / "pyvenv.cfg").exists() or (folder / "conda-meta").is_dir() or (
            folder.name in VENV_NAMES and ((folder / "bin" / "python").exists()
                                           or (folder / "Scripts" / "python.exe").exists()))
    except OSError:  # an unreadable folder: the walk reports it
        return False


def _holds_python(folder: Path) -> bool:
    try:
        for _, _, names in os.walk(folder):
            if any(n.endswith((".py", ".ipynb")) for n in names):
                return True
    except OSError:
        pass
    return False


def discover(
    paths: Sequence[Path], root: Path, excludes: Sequence[str] = (), skip: Sequence[Path] = (),
    patterns: Sequence[str] = ("*.py",),
) -> Discovery:
    """The files under ``paths`` whose names match ``patterns`` (files named directly
    are taken as given)."""
    found = Discovery()
    skip_resolved = _identities(skip)
    seen: set[Path] = set()
    for path in paths:
        if path.is_symlink():
            found.skipped.append(Skipped(relative_posix(path, root), "symbolic link, not followed"))
        elif path.is_dir():
            for file in _walk(path, root, excludes, skip_resolved, found, patterns):
                if file not in seen:
                    seen.add(file)
                    found.files.append(file)
        elif not path.is_file():
            found.skipped.append(Skipped(relative_posix(path, root), "not a regular file or folder"))
        elif path not in seen:
            if not any(fnmatch.fnmatch(path.name, p) for p in patterns):
                found.skipped.append(Skipped(relative_posix(path, root), "not a Python file or a file any rule reads"))
                continue
            seen.add(path)
            found.files.append(path)
    return found


def _walk(top: Path, root: Path, excludes, skip_resolved, found: Discovery, patterns) -> Iterator[Path]:
    ignores: list[GitIgnore] = []
    try:
        between = top.resolve().relative_to(root.resolve())
    except ValueError:  # a path outside the root: only its own .gitignore files count
        between = Path(".")
    for folder in [*reversed(between.parents), Path(".")][:-1]:
        loaded = GitIgnore.load(root / folder)
        if loaded:
            ignores.append(loaded)
    yield from _walk_dir(top, root, excludes, skip_resolved, found, ignores, patterns, _Tracked(root))


class _Tracked:
    """What git tracks under the root, asked once and only when a ``.gitignore`` rule
    first matches: a tracked file, and a folder holding one, is never ignored. Empty
    where git or a repository is not there (a tarball: the rules alone decide)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._paths: Optional[frozenset[str]] = None
        #: ignored folders walked because git tracks files in them
        self.ignored_dirs: set[str] = set()

    def inside_ignored(self, rel: str) -> bool:
        if not self.ignored_dirs:
            return False
        parent = rel.rpartition("/")[0]
        while parent:
            if parent in self.ignored_dirs:
                return True
            parent = parent.rpartition("/")[0]
        return False

    def holds(self, rel: str) -> bool:
        if self._paths is None:
            self._paths = _git_tracked(self.root)
        return rel in self._paths


def _git_tracked(root: Path) -> frozenset[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "."], cwd=root, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    if listed.returncode != 0:
        return frozenset()
    found: set[str] = set()
    for raw in listed.stdout.split(b"\0"):
        rel = raw.decode("utf-8", "surrogateescape")
        while rel and rel not in found:
            found.add(rel)
            rel = rel.rpartition("/")[0]
    return frozenset(found)


def _walk_dir(top: Path, root, excludes, skip_resolved, found, ignores, patterns, tracked: _Tracked) -> Iterator[Path]:
    """The files under ``top`` in sorted order, depth first, with an explicit stack of
    folders being listed: a tree 1,200 folders deep is no deeper for Python's stack."""
    stack = [_listing(top, root, found, ignores)]
    while stack:
        entries, ignores = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        path = Path(entry.path)
        rel = relative_posix(path, root)
        is_dir = entry.is_dir(follow_symlinks=False)
        if _excluded(rel, excludes):
            continue
        if _gitignored(path, is_dir, ignores) or tracked.inside_ignored(rel):
            if not tracked.holds(rel):
                continue
            if is_dir:
                tracked.ignored_dirs.add(rel)  # what git does not track inside it stays ignored
        if entry.is_symlink():
            # a link to a file the run would read is said so (and --out copies it as a link)
            if any(fnmatch.fnmatch(entry.name, p) for p in patterns) or entry.name.endswith(".py") or _links_to_dir(entry):
                found.skipped.append(Skipped(rel, "symbolic link, not followed"))
            continue
        if is_dir:
            if entry.name in SKIP_DIRS or entry.name.endswith(".egg-info") or _is_venv(path):
                continue
            if entry.name in OUTPUT_DIRS:
                if _holds_python(path):
                    found.skipped.append(Skipped(rel, f"skipped: a folder named {entry.name}/ is taken for build "
                                                      "output; name it on the command line to port it"))
                continue
            if (skip_resolved and _identity(entry) in skip_resolved) or _porters(path):
                continue  # porter's own runtime (or a stopped run's half copy), wherever it was vendored: never ported
            stack.append(_listing(path, root, found, ignores))
        elif entry.is_file(follow_symlinks=False) and any(fnmatch.fnmatch(entry.name, p) for p in patterns):
            if entry.name == "porter_runtime.py" and is_pointer(path):
                continue  # porter's pointer to the root copy: never ported
            yield path


def _identities(folders: Sequence[Path]) -> set[tuple[int, int]]:
    """(device, inode) of each folder that exists: what a folder met in the walk is
    compared with. A ``resolve()`` per folder met cost a ``lstat`` per part of its path:
    quadratic in a tree's depth."""
    out = set()
    for folder in folders:
        try:
            info = folder.stat()
        except OSError:
            continue
        out.add((info.st_dev, info.st_ino))
    return out


def _identity(entry: os.DirEntry) -> tuple[int, int]:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return (-1, -1)
    return (info.st_dev, info.st_ino)


def _listing(folder: Path, root, found, ignores):
    """(the folder's entries in name order, the .gitignore rules that apply inside it)."""
    own = GitIgnore.load(folder)
    ignores = ignores + [own] if own else ignores
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        found.skipped.append(Skipped(relative_posix(folder, root), f"cannot list folder: {exc.strerror}", error=True))
        entries = []
    return iter(entries), ignores


def _porters(folder: Path) -> bool:
    """A copy of porter's runtime, or one a stopped run left half-written (porter.files.vendor_write)."""
    if is_vendored(folder) or is_partial(folder) or is_leftover_name(folder.name):
        return True
    return folder.name == "porter_runtime" and older_partial(folder, runtime_files())


def _links_to_dir(entry: os.DirEntry) -> bool:
    """Whether a link points at a folder; a dangling link or a loop does not."""
    try:
        return entry.is_dir()
    except OSError:  # ELOOP: a link cycle
        return False


def _gitignored(path: Path, is_dir: bool, ignores: Sequence[GitIgnore]) -> bool:
    verdict = False
    for ignore in ignores:
        result = ignore.ignored(path, is_dir)
        if result is not None:
            verdict = result
    return verdict


def relative_posix(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` with forward slashes (as written in reports), or as given."""
    try:
        return path.absolute().relative_to(root.absolute()).as_posix()
    except ValueError:
        return path.as_posix()


#: Files that mark the top of a Python project.
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", "requirements.txt")
#: A named folder holding one of these is a repository's top, even without project files.
README_NAMES = ("README.md", "README.rst", "README.txt", "README", "readme.md", "Readme.md")


def find_root(paths: Sequence[Path]) -> Path:
    """The project holding the first path: the nearest folder at or above it with a
    project file (pyproject.toml, setup.py, setup.cfg, requirements.txt) or a ``.git``;
    in a tree with none of them, the outermost folder with a ``porter.toml`` (a nested
    one governs its folder's files, as a nested settings file does); else the path's
    own folder. A project inside another repository (a vendored package, an example
    folder) is its own root, and so is a folder named on the command line that holds a
    README: a repository downloaded without ``.git`` or project files (GitHub's "Download
    ZIP" of a research repository) inside another project must not have its runtime
    written above it, where its scripts would not find it."""
    first = paths[0].absolute()
    start = first if first.is_dir() else first.parent
    settings = None
    for folder in [start, *start.parents]:
        if (folder / ".git").exists() or any((folder / m).is_file() for m in PROJECT_MARKERS):
            return folder
        if folder == first and any((folder / m).is_file() for m in README_NAMES):
            return folder
        if (folder / "porter.toml").is_file():
            settings = folder
    return settings or start
