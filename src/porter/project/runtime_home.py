"""Where the vendored runtime lives for each file, and how that file imports it.

No ported file changes ``sys.path``: each file imports a copy of the runtime that
Python already finds from where the file runs (README, "How the ported code finds
the runtime"):

- a module of a package, in a repository that builds (pyproject.toml, setup.py or
  setup.cfg) or under ``src/``: a copy inside its top-level package, like pip's own
  ``_vendor`` (``from mypkg import porter_runtime``), shipped by the package's build;
- a package inside folders without ``__init__.py`` that the tree imports by its full
  name (``ldm.models.diffusion``): a copy inside it, ``from ldm.models.diffusion import
  porter_runtime``;
- a script or notebook that imports such a package: the same copy, through the package;
- a script or notebook in a subfolder that imports nothing of the repository: the root
  copy, through a pointer module beside it (``scripts/porter_runtime.py``, a dozen lines
  that load ``../porter_runtime`` by its path: Python puts only the script's own folder
  on ``sys.path``), so a repository of many example folders holds one copy;
- any other file: the copy at the root (``import porter_runtime``). Scripts at the root,
  packages at the root (``python -m pkg.train``) and scripts that import the repository's
  own root modules find it the way they find those.

A folder porter vendored holds ``VENDORED.txt``: porter refreshes only folders with
that marker, never ports a file inside one, and refuses to write into a folder of the
same name that it did not create.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Union

from porter.files.apply import Change, runtime_files
from porter.files.safe_io import read_bounded, text_bounded
from porter.files.vendor_write import is_partial, older_partial

RUNTIME = "porter_runtime"
MARKER = "VENDORED.txt"
_BUILD_FILES = ("setup.py", "setup.cfg")


@dataclass(frozen=True)
class Home:
    """One vendored copy: its folder and the package that holds it ("" for none). With
    ``primary``, no copy: a pointer module (``folder`` + ".py") that loads that copy."""

    folder: Path
    package: str = ""
    primary: Optional["Home"] = None

    @property
    def statement(self) -> str:
        return f"from {self.package} import {RUNTIME}" if self.package else f"import {RUNTIME}"

    @property
    def pointer(self) -> Path:
        return self.folder.with_name(f"{RUNTIME}.py")


class LayoutError(Exception):
    """A runtime folder porter must not use; the message names it and says why."""


@dataclass
class Layout:
    """What porter needs to know of a repository to place the runtime."""

    root: Path
    installable: bool = False
    #: top-level names ruff's isort calls first-party (folders and modules at the root and in src/)
    first_party: frozenset = frozenset()
    #: the top-level packages the repository's build can ship: name -> folder
    packages: dict = field(default_factory=dict)
    #: --runtime-dir / runtime-dir: every file uses this one copy
    fixed: Optional[Home] = None

    @classmethod
    def of(cls, root: Path, runtime_dir: Optional[Path] = None) -> "Layout":
        root = root.absolute()
        names: set[str] = set()
        packages: dict[str, Path] = {}
        for base in (root, root / "src"):
            for entry in _entries(base):
                name = entry.name[:-3] if entry.name.endswith(".py") else entry.name
                if name.isidentifier():
                    names.add(name)
                    if _is_file(entry / "__init__.py") and entry.name != RUNTIME:
                        packages.setdefault(name, entry)
        layout = cls(root, _installable(root), frozenset(names), packages)
        if runtime_dir is not None:
            layout.fixed = layout.check_runtime_dir(runtime_dir)
        return layout

    @property
    def root_home(self) -> Home:
        return Home(self.root / RUNTIME)

    def check_runtime_dir(self, folder: Path) -> Home:
        """The home a ``--runtime-dir`` names, or LayoutError: it must lie inside the root,
        be called porter_runtime, and sit where imports find it (the root or a package)."""
        folder = Path(os.path.normpath(folder.absolute()))
        shown = _shown(folder, self.root)
        try:
            rel = folder.relative_to(self.root)
        except ValueError:
            raise LayoutError(f"{shown}: outside the root {self.root}; porter writes only inside the root") from None
        if folder.name != RUNTIME:
            raise LayoutError(f"{shown}: the ported code imports '{RUNTIME}', so the folder must be named "
                              f"{RUNTIME} (for example {(rel / RUNTIME).as_posix()})")
        parent = folder.parent
        if parent == self.root:
            return Home(folder)
        package = _package_name(parent)
        if package is None:
            raise LayoutError(f"{shown}: {parent.relative_to(self.root).as_posix()}/ is neither the root nor a "
                              "package (no __init__.py), so the ported code could not import the runtime there")
        return Home(folder, package)

    def home_for(self, file: Path, imported: Iterable[str] = ()) -> tuple[Home, str]:
        """The copy ``file`` imports, and a note when it finds it only under conditions."""
        if self.fixed is not None:
            return self.fixed, ""
        file = file.absolute()
        top = _top_package(file)
        nested = _namespace_name(top, self.root) if top is not None else None
        imported = list(imported)
        if nested is not None:
            ships = self.installable and _build_may_ship(self.root, nested)
            return (Home(top / RUNTIME, nested) if ships else self._pointer_or_copy(top / RUNTIME, nested)), ""
        if top is not None and self.installable:
            # the package's build ships its copy; one the module imports serves it too
            own = [top.name] if self.packages.get(top.name) == top else []
            name = self.base_package(own + imported) if own else top.name
            return Home(self.packages[name] / RUNTIME if own else top / RUNTIME, name), ""
        if top is not None and top.parent != self.root:
            return self._pointer_or_copy(top / RUNTIME, top.name), ""
        if top is not None:
            return self.root_home, ""
        if self.installable and any(n in self.packages for n in imported):
            name = self.base_package(imported)
            return Home(self.packages[name] / RUNTIME, name), ""
        for name in imported:
            if name in self.packages and self.packages[name].parent != self.root:
                return self._pointer_or_copy(self.packages[name] / RUNTIME, name), ""
        if file.parent == self.root or any(n in self.first_party and n != RUNTIME for n in imported):
            return self.root_home, ""
        # A script or notebook in a subfolder that imports nothing of the repository:
        # Python puts only its own folder on sys.path (``python scripts/plot.py`` from the
        # root, or from scripts/), so a pointer beside it loads the root copy (a copy an
        # earlier port put beside it stays in use).
        return self._pointer_or_copy(file.parent / RUNTIME, ""), ""

    def base_package(self, names: Iterable[str]) -> str:
        """Of the repository's packages among ``names`` (a file's own package and those it
        imports), the one whose copy the file uses: the one that imports the fewest of
        the others (``utils`` before ``models``, which imports it), then by name. Code
        that imports a package runs only where that package imports, and a package's
        own modules run where it does: every file of a repository whose packages build
        on one another uses the same copy."""
        found = [n for n in dict.fromkeys(names) if n in self.packages]
        if len(found) == 1:
            return found[0]
        graph = _package_imports(tuple(sorted((n, str(f)) for n, f in self.packages.items())))
        return min(found, key=lambda n: (len(_reach(graph, n)), n))

    def _pointer_or_copy(self, folder: Path, package: str) -> Home:
        """Code that can't import the root copy by name (a script in a subfolder, a package
        in a repository that does not build): a pointer module there that loads the root
        copy, so that the repository holds one; a copy an earlier port put there stays."""
        if is_vendored(folder):
            return Home(folder, package)
        return Home(folder, package, primary=self.root_home)

    def first_party_for(self, home: Home) -> frozenset:
        """What isort (ruff's ``src = [".", "src"]``) will call first-party once ``home``
        exists: a copy at the root or inside a package is the repository's own code (a
        pointer means a root copy); one beside a script in a subfolder is not, unless a
        root copy exists too."""
        if home.package or home.primary is not None or home.folder.parent in (self.root, self.root / "src"):
            return self.first_party | {RUNTIME}
        return self.first_party


def home_of_import(layout: "Layout", file: Path, package: str) -> Home:
    """The copy an existing ``from package import porter_runtime`` (or, with no package,
    ``import porter_runtime``) in ``file`` refers to."""
    if not package:
        if layout.fixed is not None and not layout.fixed.package:
            return layout.fixed
        beside = file.absolute().parent / RUNTIME
        if beside.parent != layout.root and is_vendored(beside):
            return Home(beside)  # a standalone script's own copy (first on its sys.path)
        if beside.parent != layout.root and is_pointer(beside.with_name(f"{RUNTIME}.py")):
            return Home(beside, primary=layout.root_home)
        return layout.root_home
    top = _top_package(file.absolute())
    bases = [layout.root, layout.root / "src"] + ([top.parent] if top is not None else [])
    for base in bases:
        folder = base.joinpath(*package.split("."))
        if _is_file(folder / "__init__.py"):
            if is_pointer(folder / f"{RUNTIME}.py") and not is_vendored(folder / RUNTIME):
                return Home(folder / RUNTIME, package, primary=layout.root_home)
            return Home(folder / RUNTIME, package)
    return Home(layout.root.joinpath(*package.split(".")) / RUNTIME, package)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # an unreadable folder: the walk reports it
        return False


def _entries(base: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(base) if e.is_dir(follow_symlinks=False) or e.name.endswith(".py")]
    except OSError:
        return []


def _installable(root: Path) -> bool:
    if any(_is_file(root / name) for name in _BUILD_FILES):
        return True
    try:
        text = text_bounded(root / "pyproject.toml")
    except OSError:
        return False
    return "[project]" in text or "[build-system]" in text or "[tool.poetry]" in text


def _top_package(file: Path) -> Optional[Path]:
    """The topmost package folder holding ``file`` (None for a file outside packages)."""
    top = None
    folder = file.parent
    while _is_file(folder / "__init__.py"):
        top = folder
        folder = folder.parent
    return top


def _namespace_name(top: Path, root: Path) -> Optional[str]:
    """The import name of a package that sits in folders without ``__init__.py`` (PEP 420
    namespace packages: ``ldm/models/diffusion/`` is ``ldm.models.diffusion``), reached
    from the root or ``src/``; None for a package at the top, or when a build script maps
    package folders itself (``package_dir``, ``where``), which then decides the name."""
    for base in (root / "src", root):
        try:
            parts = top.relative_to(base).parts
        except ValueError:
            continue
        if len(parts) < 2:
            return None
        dotted = ".".join(parts)
        if not all(part.isidentifier() for part in parts) or _maps_packages(root):
            return None
        return dotted if _imported_as(root, dotted) else None
    return None


@functools.lru_cache(maxsize=64)
def _imported_as(root: Path, dotted: str) -> bool:
    """Whether some Python file of the tree imports ``dotted`` (or a module in it) by
    that full name: the repository puts the namespace's base on sys.path. A package only
    ever imported by its own name (``d2/detr`` as ``detr``, from scripts in ``d2/``)
    keeps that name."""
    pattern = re.compile(rb"^\s*(?:from|import)\s+" + re.escape(dotted.encode()) + rb"\b", re.M)
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", RUNTIME, "node_modules")]
        for name in files:
            if name.endswith(".py"):
                try:
                    if pattern.search(read_bounded(Path(folder, name), 1 << 20, follow=False)):
                        return True
                except OSError:
                    continue
    return False


#: An import at the start of a line: at module level, where a failure stops the import.
_TOP_IMPORT = re.compile(rb"^(?:from|import)[ \t]+([A-Za-z_]\w*)", re.M)


@functools.lru_cache(maxsize=8)
def _package_imports(packages: tuple) -> dict:
    """Each top-level package -> the others its modules import at module level (once per
    process: a worker gets the layout with each file)."""
    names = {name for name, _ in packages}
    return {name: _top_imports(Path(folder)) & names - {name} for name, folder in packages}


def _top_imports(folder: Path) -> set:
    found = set()
    for base, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", RUNTIME) and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                try:
                    found |= {m.decode() for m in _TOP_IMPORT.findall(read_bounded(Path(base, name), 1 << 20,
                                                                                    follow=False))}
                except OSError:
                    continue
    return found


def _reach(graph: dict, start: str) -> set:
    seen, todo = set(), [start]
    while todo:
        for other in graph.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen - {start}


def _build_may_ship(root: Path, dotted: str) -> bool:
    """Whether the build could install the namespace package ``dotted``, which then needs
    a copy of its own. Not when it names its packages (``find_packages()``, ``find:``, a
    list without it): ``find_packages`` skips folders without ``__init__.py``, so the
    package runs from the tree, its base on sys.path, and the root copy serves it. A build
    porter can't read (pyproject's automatic discovery, ``find_namespace_packages``) may."""
    texts = []
    for name in _BUILD_FILES + ("pyproject.toml",):
        try:
            texts.append(text_bounded(root / name))
        except OSError:
            continue
    text = "\n".join(texts)
    if re.search(r"namespace|packages\.find|\b" + re.escape(dotted) + r"\b", text):
        return True
    return not re.search(r"find_packages\s*\(|packages\s*=\s*(?:find:|\[)", text)


def _maps_packages(root: Path) -> bool:
    for name in ("setup.py", "setup.cfg", "pyproject.toml"):
        try:
            text = text_bounded(root / name)
        except OSError:
            continue
        if re.search(r"package[_-]dir|\bwhere\s*=", text):
            return True
    return False


def _package_name(folder: Path) -> Optional[str]:
    if not _is_file(folder / "__init__.py"):
        return None
    parts = [folder.name]
    here = folder.parent
    while _is_file(here / "__init__.py"):
        parts.insert(0, here.name)
        here = here.parent
    return ".".join(parts)


def _shown(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def is_vendored(folder: Path) -> bool:
    """Whether porter vendored ``folder`` (it holds porter's marker file, which says so:
    a VENDORED.txt of another tool's is not porter's)."""
    if not (_is_file(folder / MARKER) and _is_file(folder / "__init__.py")):
        return False
    try:
        return read_bounded(folder / MARKER, 4096, follow=False).startswith(b"porter_runtime ")
    except OSError:
        return False


#: The first line of a pointer module: how porter knows the file is its own.
POINTER_MARK = b"# porter: the code in this folder uses the repository's one copy of porter_runtime"


def is_pointer(path: Path) -> bool:
    """Whether ``path`` is a pointer module porter wrote (its first line is the mark)."""
    try:
        if not path.is_file() or path.is_symlink():
            return False
        with open(path, "rb") as handle:
            return handle.read(len(POINTER_MARK)) == POINTER_MARK
    except OSError:
        return False


def pointer_source(home: Home) -> bytes:
    """The pointer module for ``home``: it loads the primary copy by its path relative to
    the pointer (no ``sys.path`` change) and stands in for it under the same name."""
    assert home.primary is not None
    rel = os.path.relpath(home.primary.folder, home.pointer.parent).replace(os.sep, "/")
    parts = ", ".join(json.dumps(p) for p in rel.split("/"))
    return (POINTER_MARK.decode() + f" ({rel}).\n"
            '"""porter_runtime for the code in this folder, vendored by porter.\n\n'
            "The code here can't import the repository's copy by name (`python folder/script.py`\n"
            "puts only the script's folder on sys.path), so this module loads that copy by its\n"
            "path and becomes it.\n"
            '"""\n'
            "import importlib.util as _util\n"
            "import os as _os\n"
            "import sys as _sys\n\n"
            f"_folder = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), {parts})\n"
            '_spec = _util.spec_from_file_location(__name__, _os.path.join(_folder, "__init__.py"),\n'
            "                                      submodule_search_locations=[_folder])\n"
            "_module = _util.module_from_spec(_spec)\n"
            "_sys.modules[__name__] = _module\n"
            "_spec.loader.exec_module(_module)\n").encode()


def refuse_pointer(home: Home, root: Path) -> str:
    """Why porter must not write ``home``'s pointer module ("" when it may)."""
    path = home.pointer
    shown = _shown(path, root)
    problem = _unsafe_path(path, root)
    if problem:
        return problem
    if path.exists() and not is_pointer(path):
        return f"{shown} exists and porter did not write it; porter never overwrites it: rename it, or pass --runtime-dir"
    return ""


def _unsafe_path(path: Path, root: Path) -> str:
    """Why porter must not write at ``path``: outside the root, or behind a symbolic link."""
    try:
        rel = path.absolute().relative_to(root.absolute())
    except ValueError:
        return f"{path} is outside the root {root}"
    here = root
    for part in rel.parts:
        here = here / part
        if here.is_symlink():
            return f"{_shown(here, root)} is a symbolic link (porter never writes through links)"
    return ""


def refuse_home(home: Home, root: Path) -> str:
    """Why porter must not write the copy at ``home`` ("" when it may): outside the root,
    behind a symbolic link, or a folder (or file) of that name porter did not create."""
    folder = home.folder
    problem = _unsafe_path(folder, root)
    if problem:
        return problem
    rel = folder.absolute().relative_to(root.absolute())
    if folder.exists() and not folder.is_dir():
        return f"{rel.as_posix()} exists and is not a folder"
    if folder.is_dir() and not is_vendored(folder) and not is_partial(folder) and not older_partial(folder, runtime_files()):
        try:
            empty = not any(folder.iterdir())
        except OSError as exc:
            return f"cannot list {rel.as_posix()}/: {exc.strerror or exc}"
        if not empty:
            return (f"{rel.as_posix()}/ exists and porter did not create it (no {MARKER}); porter never "
                    "overwrites it: rename that folder, or pass --runtime-dir")
    return ""


def manifest_change(root: Path, home: Home, write: bool = True, base: Optional[bytes] = None):
    """For a copy inside a package that pyproject.toml lists by hand
    (``[tool.setuptools] packages = ["mypkg"]``): the change that ships it too, and a
    note; a list in setup.py or setup.cfg gets a note only. None when nothing is needed."""
    if not home.package:
        return None
    wanted = f"{home.package}.{RUNTIME}"
    pyproject = root / "pyproject.toml"
    try:
        data = base if base is not None else read_bounded(pyproject)
    except OSError:
        data = b""
    text = data.decode("utf-8", errors="surrogateescape")
    match = _SETUPTOOLS_PACKAGES.search(text)
    if match and wanted not in match.group("list"):
        entry = re.search(r"""(["'])%s\1\s*,?""" % re.escape(home.package), match.group("list"))
        if entry:
            quote = entry.group(1)
            at = match.start("list") + entry.end()
            listed = match.group("list")
            if "\n" in listed[entry.start():]:
                line_start = text.rfind("\n", 0, match.start("list") + entry.start()) + 1
                indent = text[line_start:match.start("list") + entry.start()]
                addition = ("" if entry.group(0).rstrip().endswith(",") else ",") + f"\n{indent}{quote}{wanted}{quote},"
            else:
                addition = ("" if entry.group(0).rstrip().endswith(",") else ",") + f" {quote}{wanted}{quote}"
                if entry.group(0).rstrip().endswith(","):
                    addition = f" {quote}{wanted}{quote},"
                    at = match.start("list") + entry.end()
            new = text[:at] + addition + text[at:]
            verb = "added" if write else "would add"
            return (Change("pyproject.toml", data, new.encode("utf-8", errors="surrogateescape"), runtime=True),
                    f"pyproject.toml: {verb} {wanted} to [tool.setuptools] packages, so that the build ships it")
    for name in ("setup.py", "setup.cfg"):
        try:
            other = text_bounded(root / name)
        except OSError:
            continue
        if re.search(r"""packages\s*=\s*\[?[^\n]*["']?%s["']?""" % re.escape(home.package), other) and \
                "find_packages" not in other and "find:" not in other and wanted not in other:
            return None, f"{name} lists its packages by hand: add '{wanted}' to them, so that the build ships the runtime"
    return None


#: ``packages = [...]`` in the [tool.setuptools] table, whatever keys (lists, inline
#: tables) come before it in the table: the table ends at the next line starting with "[".
_SETUPTOOLS_PACKAGES = re.compile(
    r"^\[tool\.setuptools\][^\n]*\n(?:(?!\[)(?!packages\s*=).*\n)*?^packages\s*=\s*\[(?P<list>[^\]]*)\]", re.M)


# -- one file at a time ----------------------------------------------------------------

class LazyBootstrap:
    """How one file imports the runtime, worked out only if the file needs the import
    (a few files of a large tree). No ``sys.path`` code: the name is kept for the
    engine's callers."""

    def __init__(self, file: Path, layout: Layout) -> None:
        self.file = file
        self.layout = layout
        self.home: Optional[Home] = None
        self.note = ""

    @property
    def first_party(self) -> frozenset:
        """isort's first-party names, once the copy this file imports exists."""
        return self.layout.first_party_for(self.home) if self.home is not None else self.layout.first_party

    def __call__(self, imported: Iterable[str] = ()) -> Home:
        self.home, self.note = self.layout.home_for(self.file, imported)
        return self.home


def runtime_home_fields(bootstrap: Union[None, str, "LazyBootstrap"], rel: str) -> tuple[str, str, str]:
    """(home folder relative to the root, its package, note) of the copy a file now imports;
    for a pointer module, the module's path (``scripts/porter_runtime.py``)."""
    if not isinstance(bootstrap, LazyBootstrap) or bootstrap.home is None:
        return "", "", ""
    home = bootstrap.home
    where = home.pointer if home.primary is not None else home.folder  # a pointer: its file
    folder = os.path.relpath(where, bootstrap.layout.root).replace(os.sep, "/")
    return folder, home.package, bootstrap.note
