"""Where the vendored runtime lives for each file, and how that file imports it.

No ported file changes ``sys.path``: each file imports a copy of the runtime that
Python already finds from where the file runs (README, "How the ported code finds
the runtime"):

- a module of a package, in a repository that builds (pyproject.toml, setup.py or
  setup.cfg) or under ``src/``: a copy inside its top-level package, like pip's own
  ``_vendor`` (``from mypkg import porter_runtime``), shipped by the package's build;
- a package of a project inside the repository with a build of its own (``GroundingDINO/``
  and its setup.py): a copy inside the package, imported by the name pip installs it as
  (``from groundingdino import porter_runtime``), where the package imports itself by it,
  and relatively where it never does (InternImage's ``ops_dcnv3/functions``, installed as
  ``functions`` and imported by the tree as ``ops_dcnv3.functions``);
- a package inside folders without ``__init__.py`` that the tree imports by its full
  name (``ldm.models.diffusion``): a copy inside it, ``from ldm.models.diffusion import
  porter_runtime``;
- a script or notebook that imports such a package: the same copy, through the package;
- a script (not a test) in a package folder that imports neither that package nor
  anything relatively (``eval/needle/needle_in_haystack.py``, run from its folder): the copy of
  the build's package it imports, else a pointer beside it, as for any script;
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

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional, Union

from porter.project.vendoring.runtime_copy import RUNTIME, Home, _is_file, _shown, is_pointer, is_vendored
from porter.project.vendoring.runtime_probes import (_build_may_ship, _entries, _imported_as, _installable, _namespace_name, _package_imports,
                                           _script, reached_in_full,
                                           _package_name, _reach, _top_package, nested_project, own_name)


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
        package = _package_name(parent, self.root)
        if package is None:
            raise LayoutError(f"{shown}: {parent.relative_to(self.root).as_posix()}/ is neither the root nor a "
                              "package (no __init__.py), so the ported code could not import the runtime there")
        return Home(folder, package)

    def home_for(self, file: Path, imported: Iterable[str] = (), before_path_edit: bool = False) -> tuple[Home, str]:
        """The copy ``file`` imports, and a note when it finds it only under conditions.
        ``before_path_edit``: the import must run before the file's own ``sys.path`` edit
        (module-level code uses the runtime first), so a script in a subfolder can't yet
        reach the root copy through the folder it adds."""
        if self.fixed is not None:
            return self.fixed, ""
        file = file.absolute()
        top = _top_package(file, self.root)
        nested = _namespace_name(top, self.root) if top is not None else None
        imported = list(imported)
        own = own_name(top) if top is not None and top.parent != self.root else None
        both = top is not None and top.parent != self.root and nested is None and reached_in_full(top, self.root) \
            and not _script(file)
        # ``both``: a package its folder's scripts (or its own build) import by its own name
        # (``functions``) that the tree also reaches by its full one (``models.ops.functions``,
        # through a sibling it imports by that name): only a relative import finds the copy
        # under both names (Deformable-DETR's models/ops)
        if top is not None and top.parent != self.root and (own is not None or nested is None) \
                and nested_project(top, self.root) is not None:
            if own is None and not _script(file):
                # its modules never import it by name: pip installs it as ``functions``
                # while the tree reaches it through the project's folder
                # (``ops_dcnv3.functions``, InternImage, blind round 18); only a
                # relative import finds the copy under every name it has
                return Home(top / RUNTIME, _relative(file, top)), ""
            # a package of a project that builds on its own inside the repository: pip
            # installs it by its own name, and may copy it away from the tree (a pointer's
            # path would not follow), so a copy of its own, imported by that name
            return Home(top / RUNTIME, own or top.name), ""
        if own is not None and "." in own and own != nested:
            # its modules import it by a longer name (LAVIS's annotator.uniformer): so does the runtime
            return self._pointer_or_copy(top / RUNTIME, own), ""
        if nested is not None:
            ships = self.installable and _build_may_ship(self.root, nested)
            return (Home(top / RUNTIME, nested) if ships else self._pointer_or_copy(top / RUNTIME, nested)), ""
        if top is not None and top.parent != self.root and own is None and top.name not in imported \
                and _script(file) and not _relative_imports(file) and not _test_module(file):
            # a script that sits in a package folder but imports neither it nor its
            # siblings through it (duo-attention's ``cd eval/needle && python
            # needle_in_haystack.py``): Python puts only the script's folder on sys.path,
            # where ``from needle import porter_runtime`` fails, on CUDA too (blind round 18).
            # The build's package it imports carries a copy; else a pointer beside it.
            found = [n for n in imported if n in self.packages and not _beside(file.parent, n)]
            if self.installable and found:
                name = self.base_package(found)
                return Home(self.packages[name] / RUNTIME, name), ""
            return self._pointer_or_copy(file.parent / RUNTIME, ""), ""
        if top is not None and self.installable:
            # the package's build ships its copy; one the module imports serves it too
            own = [top.name] if self.packages.get(top.name) == top else []
            name = self.base_package(own + imported) if own else top.name
            return Home(self.packages[name] / RUNTIME if own else top / RUNTIME, name), ""
        if both:
            return self._pointer_or_copy(top / RUNTIME, _relative(file, top)), ""
        if top is not None and top.parent != self.root:
            return self._pointer_or_copy(top / RUNTIME, top.name), ""
        if top is not None:
            return self.root_home, ""
        # a package of that name beside the file is the one it imports (its folder comes first
        # on sys.path): LLaMA-Adapter's alpaca_finetuning_v1/llama, not the root's llama
        imported = [n for n in imported if not _beside(file.parent, n) or file.parent == self.root]
        if self.installable and any(n in self.packages for n in imported):
            name = self.base_package(imported)
            return Home(self.packages[name] / RUNTIME, name), ""
        for name in imported:
            if name in self.packages and self.packages[name].parent != self.root:
                return self._pointer_or_copy(self.packages[name] / RUNTIME, name), ""
        if file.parent == self.root:
            return self.root_home, ""
        if any(n in self.first_party and n != RUNTIME and not _beside(file.parent, n) for n in imported) \
                and not before_path_edit:
            return self.root_home, ""  # it reaches the repository's code, so the root copy
        base = file.parent.parent
        if file.parent != self.root and not _is_file(file.parent / "__init__.py") and not _script(file) \
                and file.parent.name.isidentifier() and _imported_as(self.root, f"{file.parent.name}.{file.stem}"):
            # a module of a folder without __init__.py that the scripts above it import as
            # ``util.misc`` (LLaMA-Adapter's llama_adapter_v2_multimodal7b/util/misc.py, blind
            # round 18): the folder above is on sys.path, not this one
            return (self.root_home if base == self.root else self._pointer_or_copy(base / RUNTIME, "")), ""
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


def _relative(file: Path, top: Path) -> str:
    """The dots of a relative import of ``top``'s copy from ``file`` (``.`` beside it)."""
    return "." * len(file.absolute().parent.relative_to(top).parts) + "."


def _relative_imports(file: Path) -> bool:
    """Whether ``file`` imports relatively (``from .utils import x``): it then runs only as a
    module of its package (``python -m``), never as a script."""
    try:
        return re.search(rb"^[ \t]*from[ \t]+\.", file.read_bytes(), re.M) is not None
    except OSError:
        return False


def _test_module(file: Path) -> bool:
    """A test file (``test_*.py``, ``*_test.py``): a runner imports it as a module of its
    package (``python -m unittest tests.test_x`` from the folder above), whatever its own
    ``__main__`` says (detectron2's ``projects/TensorMask/tests``)."""
    return file.name.startswith("test_") or file.name.endswith("_test.py")


def _beside(folder: Path, name: str) -> bool:
    """Whether ``import name`` in a file of ``folder`` finds a module of that folder (first on
    a script's ``sys.path``) rather than the root's namesake: gpt-fast's ``mixtral-moe/quantize.py``
    imports ``model``, which is ``mixtral-moe/model.py``, not the root's ``model.py``."""
    return _is_file(folder / f"{name}.py") or (folder / name).is_dir()


def home_of_import(layout: "Layout", file: Path, package: str) -> Home:
    """The copy an existing ``from package import porter_runtime`` (or, with no package,
    ``import porter_runtime``) in ``file`` refers to."""
    if package.startswith("."):  # a package reached under two names (Layout.home_for)
        base = file.absolute().parent
        for _ in range(len(package) - 1):
            base = base.parent
        folder = base / RUNTIME
        return Home(folder, package, primary=layout.root_home) \
            if is_pointer(folder.with_name(f"{RUNTIME}.py")) and not is_vendored(folder) else Home(folder, package)
    if not package:
        if layout.fixed is not None and not layout.fixed.package:
            return layout.fixed
        beside = file.absolute().parent / RUNTIME
        if beside.parent != layout.root and is_vendored(beside):
            return Home(beside)  # a standalone script's own copy (first on its sys.path)
        if beside.parent != layout.root and is_pointer(beside.with_name(f"{RUNTIME}.py")):
            return Home(beside, primary=layout.root_home)
        return layout.root_home
    top = _top_package(file.absolute(), layout.root)
    bases = [layout.root, layout.root / "src"] + ([top.parent] if top is not None else [])
    parts = package.split(".")
    if top is not None and len(parts) > 1 and top.parts[-len(parts):] == tuple(parts):
        bases.insert(0, top.parents[len(parts) - 1])  # the package's own longer name (annotator.uniformer)
    if top is not None and top.name == package.split(".")[0]:
        # the file's own package, as the first --write placed its copy: detectron2's
        # projects/TensorMask/tests imports `from tests import porter_runtime`, which must
        # not become the repository's top-level tests package on a second --write
        bases.insert(0, top.parent)
    for base in bases:
        folder = base.joinpath(*package.split("."))
        if _is_file(folder / "__init__.py"):
            if is_pointer(folder / f"{RUNTIME}.py") and not is_vendored(folder / RUNTIME):
                return Home(folder / RUNTIME, package, primary=layout.root_home)
            return Home(folder / RUNTIME, package)
    return Home(layout.root.joinpath(*package.split(".")) / RUNTIME, package)



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

    def __call__(self, imported: Iterable[str] = (), before_path_edit: bool = False) -> Home:
        self.home, self.note = self.layout.home_for(self.file, imported, before_path_edit)
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
