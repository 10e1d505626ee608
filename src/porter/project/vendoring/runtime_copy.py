"""A vendored copy of porter_runtime and the pointer modules that load one: how porter
knows them as its own, what it refuses to write, and the build config that ships a copy
(porter.project.vendoring.runtime_home places them)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from porter.files.apply import Change, runtime_files
from porter.project.vendoring.pyproject_packages import add_packages, missing_packages
from porter.files.safe_io import read_bounded, text_bounded
from porter.files.vendor_write import is_partial, older_partial

RUNTIME = "porter_runtime"
MARKER = "VENDORED.txt"


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


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # an unreadable folder: the walk reports it
        return False



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
            "path and becomes it: the one module of the process, under the name porter_runtime too,\n"
            "so a script that imported porter_runtime first and this folder's code share it.\n"
            '"""\n'
            "import importlib.util as _util\n"
            "import os as _os\n"
            "import sys as _sys\n\n"
            f"_folder = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), {parts})\n"
            '_init = _os.path.join(_folder, "__init__.py")\n'
            '_module = _sys.modules.get("porter_runtime")\n'
            'if _module is None or _os.path.realpath(getattr(_module, "__file__", None) or "") != _os.path.realpath(_init):\n'
            '    _name = "porter_runtime" if _module is None else __name__  # another copy holds the name: keep apart\n'
            "    _spec = _util.spec_from_file_location(_name, _init, submodule_search_locations=[_folder])\n"
            "    _module = _util.module_from_spec(_spec)\n"
            "    _sys.modules[_name] = _module\n"
            "    _spec.loader.exec_module(_module)\n"
            "_sys.modules[__name__] = _module\n").encode()


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


def manifest_change(root: Path, home: Home, write: bool = True, base: Optional[bytes] = None,
                    subpackages: Iterable[str] = ()):
    """For a copy inside a package that pyproject.toml lists by hand
    (``[tool.setuptools] packages = ["mypkg"]``): the change that ships it too, with the
    sub-packages it holds (``twins``: ``mypkg.porter_runtime.twins``), and a note; a list
    in setup.py or setup.cfg gets a note only. None when nothing is needed."""
    wanted = f"{home.package}.{RUNTIME}" if home.package else RUNTIME
    names = [wanted] + [f"{wanted}.{s}" for s in sorted(subpackages)]
    pyproject = root / "pyproject.toml"
    try:
        data = base if base is not None else read_bounded(pyproject)
    except OSError:
        data = b""
    text = data.decode("utf-8", errors="surrogateescape")
    if not home.package:  # a copy at the root: shipped only beside root modules listed by name
        return _listed_change(data, text, names, "", write)
    match = _SETUPTOOLS_PACKAGES.search(text)
    missing = [n for n in names if not re.search(r"""(["'])%s\1""" % re.escape(n), match.group("list"))] if match else []
    if missing:
        entry = re.search(r"""(["'])%s\1\s*,?""" % re.escape(home.package), match.group("list"))
        if entry:
            quote = entry.group(1)
            at = match.start("list") + entry.end()
            listed = match.group("list")
            comma = "" if entry.group(0).rstrip().endswith(",") else ","
            if "\n" in listed[entry.start():]:
                line_start = text.rfind("\n", 0, match.start("list") + entry.start()) + 1
                indent = text[line_start:match.start("list") + entry.start()]
                addition = comma + "".join(f"\n{indent}{quote}{n}{quote}," for n in missing)
            elif comma:
                addition = "".join(f", {quote}{n}{quote}" for n in missing)
            else:
                addition = "".join(f" {quote}{n}{quote}," for n in missing)
            new = text[:at] + addition + text[at:]
            verb = "added" if write else "would add"
            return (Change("pyproject.toml", data, new.encode("utf-8", errors="surrogateescape"), runtime=True),
                    f"pyproject.toml: {verb} {', '.join(missing)} to [tool.setuptools] packages, so that the build ships it")
    if not match:  # a quoted key, an inline table, a dotted key: the same list, spelt otherwise
        change = _listed_change(data, text, names, home.package, write)
        if change is not None:
            return change
    for name in ("setup.py", "setup.cfg"):
        try:
            other = text_bounded(root / name)
        except OSError:
            continue
        if re.search(r"""packages\s*=\s*\[?[^\n]*["']?%s["']?""" % re.escape(home.package), other) and \
                "find_packages" not in other and "find:" not in other and wanted not in other:
            listed = "', '".join(names)
            return None, f"{name} lists its packages by hand: add '{listed}' to them, so that the build ships the runtime"
    return None


#: ``packages = [...]`` in the [tool.setuptools] table, whatever keys (lists, inline
#: tables) come before it in the table: the table ends at the next line starting with "[".
_SETUPTOOLS_PACKAGES = re.compile(
    r"^\[tool\.setuptools\][^\n]*\n(?:(?!\[)(?!packages\s*=).*\n)*?^packages\s*=\s*\[(?P<list>[^\]]*)\]", re.M)


def _listed_change(data: bytes, text: str, names: list[str], package: str, write: bool):
    """The change (or, when no exact edit exists, the note) that adds ``names`` to the
    setuptools package list pyproject.toml spells in any TOML form; None when the build
    needs nothing (porter.project.vendoring.pyproject_packages)."""
    missing = missing_packages(text, names, package)
    if not missing:
        return None
    new = add_packages(text, missing)
    if new is None:
        listed = "', '".join(missing)
        return None, f"pyproject.toml lists what the build ships by hand: add '{listed}' to [tool.setuptools] packages"
    verb = "added" if write else "would add"
    return (Change("pyproject.toml", data, new.encode("utf-8", errors="surrogateescape"), runtime=True),
            f"pyproject.toml: {verb} {', '.join(missing)} to [tool.setuptools] packages, so that the build ships it")
