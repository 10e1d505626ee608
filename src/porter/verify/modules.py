"""Which modules ``porter verify`` imports, under which names, from which sys.path roots.

Worked out the way Python would, from the files alone:

* A folder with ``__init__.py`` is a package: its modules are named from the first
  folder above it that is not one (``src/pkg/a.py`` → ``pkg.a`` with ``src`` on sys.path).
* A folder without ``__init__.py`` is a *namespace package* when the tree imports it as
  one (``from models.hrm import HRM`` somewhere, or a relative import in one of its
  files); otherwise it is a folder of scripts, itself the sys.path root of its files
  (``python scripts/evaluate.py`` puts ``scripts/`` first on sys.path).
* The tree's root is a sys.path root (unless it is itself a package).

Every module also gets the tree's root and each folder that holds a top-level package on
sys.path, after its own root: the layout of a project run from its root after
``pip install -e .``.

Skipped: ``setup.py`` (importing it runs the build), ``__main__.py`` (importing it runs
the program: check it with ``--run``), ``noxfile.py``, Sphinx's ``docs/conf.py``, the
vendored runtime, and tests (``test_*.py``, ``*_test.py``, ``conftest.py``, folders named
``tests`` / ``test``) unless asked for: pytest imports those with its own rootdir and
conftest machinery, so check them with ``--run "pytest"``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from porter.project.vendoring.runtime_probes import root_is_package
from porter.rulebase.conditions.test_gates import is_test_path
from porter.verify.scripts import script_header

RUNTIME = "porter_runtime"


@dataclass(frozen=True)
class ModuleSpec:
    name: str  # the import name
    path: Path  # the file
    rel: str  # its path relative to the tree's root
    root: Path  # the sys.path entry it is imported from
    #: "module": importlib.import_module(name); "file": loaded from its location (a
    #: top-level file whose name is not an identifier)
    kind: str = "module"
    #: a script (porter.verify.scripts): the lines of the top-level statements to run
    #: (its imports); None: the whole module is imported
    header: Optional[tuple[int, ...]] = None


@dataclass(frozen=True)
class SkippedFile:
    rel: str
    reason: str


def skip_reason(rel: str, include_tests: bool) -> Optional[str]:
    parts = rel.split("/")
    name = parts[-1]
    if RUNTIME in parts[:-1] or name == f"{RUNTIME}.py":
        return "the vendored porter runtime"
    if name == "setup.py":
        return "importing setup.py runs the build"
    if name == "__main__.py":
        return "importing __main__.py runs the program (check it with --run)"
    if name == "noxfile.py" or (name == "conf.py" and any(p in ("docs", "doc") for p in parts[:-1])):
        return "a tool's configuration, not the project's code"
    if not include_tests and is_test_path(rel):
        return "a test module (--tests imports tests too; or --run \"pytest\")"
    return None


def _parse(files: Sequence[Path]) -> dict[Path, ast.Module]:
    trees = {}
    for file in files:
        try:
            trees[file] = ast.parse(file.read_bytes())
        except (SyntaxError, ValueError, OSError):
            continue
    return trees


def _imports(trees: dict[Path, ast.Module]) -> tuple[set[str], set[Path]]:
    """Dotted names the tree imports, with their prefixes (``models``, ``models.hrm``
    and ``models.hrm.X`` for ``from models.hrm import X``), and the folders of files
    with relative imports."""
    packages: set[str] = set()
    relative: set[Path] = set()
    for file, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    packages.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    relative.add(file.parent)
                elif node.module:
                    parts = node.module.split(".")
                    packages.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                    packages.update(f"{node.module}.{a.name}" for a in node.names if a.name != "*")
    return packages, relative


class _Layout:
    def __init__(self, root: Path, packages: set[str], relative: set[Path]) -> None:
        self.top = root
        self.packages = packages
        self.relative = relative
        self.cache: dict[Path, tuple[Path, str]] = {}

    def folder(self, folder: Path) -> tuple[Path, str]:
        """(sys.path root, dotted prefix) under which ``folder``'s files are imported."""
        if folder in self.cache:
            return self.cache[folder]
        has_init = (folder / "__init__.py").is_file()
        if folder == self.top or not folder.name.isidentifier() or self.top not in folder.parents:
            if folder == self.top and has_init and folder.name.isidentifier() and \
                    (self._namespace(folder, folder.name) or root_is_package(folder)):
                # the tree's root is a package: its code imports itself relatively or by the
                # root's name (a stray root __init__.py alone does not make it one: xlstm)
                answer = (folder.parent, folder.name + ".")
            else:
                answer = (folder, "")
        else:
            parent_root, parent_prefix = self.folder(folder.parent)
            dotted = parent_prefix + folder.name
            if has_init or folder in self.relative or self._namespace(folder, dotted):
                answer = (parent_root, dotted + ".")
            else:
                answer = (folder, "")  # a folder of scripts
        self.cache[folder] = answer
        return answer

    def _namespace(self, folder: Path, dotted: str) -> bool:
        """Whether the tree imports ``dotted.x`` where ``x`` is a file or folder of
        ``folder`` (``from models.hrm import HRM`` and ``models/hrm.py``). A name that
        only matches a package inside it (``act_probe/act_probe/``) does not count."""
        start = len(dotted) + 1
        for name in self.packages:
            if name.startswith(dotted + "."):
                child = name[start:].partition(".")[0]
                if (folder / f"{child}.py").is_file() or (folder / child).is_dir():
                    return True
        return False


def plan(root: Path, files: Sequence[Path], include_tests: bool = False) -> tuple[list[ModuleSpec], list[SkippedFile]]:
    """The modules to import (sorted by sys.path root, then name) and the files skipped."""
    root = root.absolute()
    kept: list[tuple[Path, str]] = []
    skipped: list[SkippedFile] = []
    for file in files:
        rel = _rel(file, root)
        reason = skip_reason(rel, include_tests)
        if reason:
            skipped.append(SkippedFile(rel, reason))
        else:
            kept.append((file.absolute(), rel))
    trees = _parse([f for f, _ in kept])
    packages, relative = _imports(trees)
    layout = _Layout(root, packages, relative)
    modules = []
    for file, rel in kept:
        base, prefix = layout.folder(file.parent)
        stem = file.stem
        if stem == "__init__":
            name, kind = prefix.rstrip("."), "module"
            if not name:  # __init__.py of a folder that is no package (a script folder)
                name, kind = "__init__", "file"
        elif stem.isidentifier():
            name, kind = prefix + stem, "module"
        else:  # "train-gpt.py": only ever run as a script
            base, name, kind = file.parent, stem, "file"
        header = None
        if file in trees and stem != "__init__":
            # a sibling's relative import may reach it (from . import x): then it is a module
            imported = name in packages or file.parent in relative
            header = script_header(trees[file], imported)
        modules.append(ModuleSpec(name, file, rel, base, kind, header))
    modules.sort(key=lambda m: (str(m.root), m.name))
    return modules, skipped


def search_path(module: ModuleSpec, modules: Sequence[ModuleSpec], root: Path) -> list[str]:
    """sys.path for ``module``: its own root, the tree's root, then every folder that
    holds a top-level package of the tree."""
    package_roots = sorted({str(m.root) for m in modules if "." in m.name or m.path.name == "__init__.py"},
                           key=lambda p: (p.count("/"), p))
    return list(dict.fromkeys([str(module.root), str(root.absolute()), *package_roots]))


def _rel(path: Path, root: Path) -> str:
    try:
        return path.absolute().relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
