"""What of porter_runtime a port needs: the runtime sized to the port.

A 20-line port should not vendor 4,000 lines. ``porter_runtime/__init__.py`` maps each
public name to the module that defines it (``_EXPORTS``) and imports that module on
first use, so a vendored copy holding only some modules still imports. A port vendors
the core (``__init__``) and the names its code uses (``porter_runtime.NAME``), as
*parts* that porter.files.runtime_shake closes over the runtime's own references and
cuts each module to.

The names are read from the ported sources as text. Code that reaches the runtime in a
way this reading can't follow (``import porter_runtime as rt``, ``from porter_runtime
import x``, ``getattr(porter_runtime, ...)``) gets the whole runtime: a missing module
would be an ``AttributeError`` at run time, and size is never worth that.

Two tools of porter run the user's code with runtime modules no port calls: ``porter fit``
records peak memory (``tools/peak``) and ``porter verify --emulate mps`` emulates a Mac
(``tools/emulate``, ``tools/mps_coverage``). The runtime imports them by name only when the tool's
variable is set, and the tool hands them to the child (:func:`supply`): a copy holds them
only with ``--full-runtime``, and every copy holds what they use of it (:func:`tool_parts`).
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

from porter.files.apply import runtime_source
from porter.files.runtime_shake import references, shake
from porter.project.unreached import notebook_code

#: ``porter_runtime.NAME`` (spaces allowed around the dot, as code formatters never add them).
_ATTRIBUTE = re.compile(rb"\bporter_runtime\s*\.\s*([A-Za-z_]\w*)")
#: The imports porter itself writes: ``import porter_runtime``, ``from pkg import porter_runtime``,
#: also merged into the package's own list (``from pkg import (dist_util, porter_runtime)``).
_IMPORT = re.compile(rb"^[ \t]*(?:import porter_runtime[ \t\r]*(?:#[^\n]*)?$|from ([\w.]+) import[ \t]*"
                     rb"(?:\([^)]*\)|[^\n]*))", re.M)
_WORD = re.compile(rb"\bporter_runtime\b")
_COMMENT = re.compile(rb"#[^\n]*")

#: Modules every copy holds: the package, and what it imports while being imported.
_CORE = ("__init__",)
#: The runtime modules each tool that runs the user's code supplies (see the docstring).
TOOL_MODULES = {"fit": ("tools/peak",), "emulate": ("tools/emulate", "tools/mps_coverage", "tools/mps_names")}
#: The variable naming the folder of supplied modules (porter_runtime/__init__.py reads it).
EXTRA_VARIABLE = "PORTER_RUNTIME_EXTRA"


def used_names(source: bytes) -> Optional[frozenset[str]]:
    """The runtime names ``source`` (Python, or a notebook's JSON) uses, or None when some
    use can't be read as text."""
    if source.lstrip()[:1] == b"{":
        source = notebook_code(source)
    names = frozenset(m.decode() for m in _ATTRIBUTE.findall(source))
    rest = _COMMENT.sub(b"", _IMPORT.sub(_ours, _ATTRIBUTE.sub(b"", source)))
    return None if _WORD.search(rest) else names


def _ours(match: re.Match) -> bytes:
    """An import of a copy, as porter writes it, reads as nothing; any other import
    (``from porter_runtime import device``, ``... porter_runtime as rt``) stays."""
    module, text = match.group(1) or b"", match.group(0)
    if module.split(b".")[0] == b"porter_runtime" or re.search(rb"\bporter_runtime\s+as\b", text):
        return text
    return b""


def parts_for(names: Optional[Iterable[str]], source: Path) -> Optional[frozenset[str]]:
    """The parts of the runtime (porter.files.runtime_shake) a copy needs for ``names``
    (None: the whole runtime)."""
    if names is None:
        return None
    exports, present = _exports(source), _module_stems(source)
    wanted = set(_CORE) | tool_parts(source)
    for name in names:
        if name in exports:
            module = exports[name].replace(".", "/")  # thirdparty.bnb: thirdparty/bnb.py
            wanted.add(f"{module}.*" if name in _module_exports(source) else f"{module}.{name}")
        elif name in present:  # porter_runtime._device._reset and the like: the module, whole
            wanted.add(f"{name}.*")
        elif name in _init_bindings(source):  # __version__, MPS_FALLBACK_SET
            wanted.add(f"__init__.{name}")
        else:
            return None  # a name the runtime doesn't define: don't guess
    return frozenset(wanted)


def modules_for(names: Optional[Iterable[str]], source: Path) -> Optional[frozenset[str]]:
    """The module stems a copy needs for ``names`` (None: the whole runtime)."""
    parts = parts_for(names, source)
    return None if parts is None else frozenset(shake(source, parts))


@lru_cache(maxsize=4)
def tool_parts(source: Path) -> frozenset[str]:
    """What the modules porter's tools hand a copy (:func:`supply`) use of it: every copy
    holds it, so that ``porter fit`` and ``porter verify --emulate mps`` run any port."""
    stems = {stem for tool in TOOL_MODULES.values() for stem in tool}
    return references(source, stems & _module_stems(source))


@lru_cache(maxsize=4)
def _module_stems(source: Path) -> frozenset[str]:
    return frozenset(p.relative_to(source).with_suffix("").as_posix() for p in source.rglob("*.py")
                     if "__pycache__" not in p.relative_to(source).parts)


@lru_cache(maxsize=4)
def _exports(source: Path) -> dict[str, str]:
    """``_EXPORTS`` of the runtime's ``__init__``, read without importing it (and torch)."""
    return dict(_init_literal(source, "_EXPORTS"))


@lru_cache(maxsize=4)
def _module_exports(source: Path) -> frozenset[str]:
    """``_MODULES``: the public names that are a module, used whole."""
    return frozenset(_init_literal(source, "_MODULES"))


def _init_literal(source: Path, name: str):
    for node in _tree(source / "__init__.py").body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError(f"{source / '__init__.py'} defines no {name}")


@lru_cache(maxsize=4)
def _init_bindings(source: Path) -> frozenset[str]:
    names = set()
    for node in _tree(source / "__init__.py").body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return frozenset(names)


def supply(folder: Path, tool: str) -> dict[str, str]:
    """Copy the installed runtime's modules that ``tool`` needs into ``folder`` (made if
    missing); the environment that hands them to a child process."""
    folder.mkdir(parents=True, exist_ok=True)
    source = runtime_source()
    for stem in TOOL_MODULES[tool]:
        # the module and its sub-package (a sized copy holds no tools/, so Python finds this one)
        for rel in (f"{stem.rpartition('/')[0]}/__init__.py", f"{stem}.py"):
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes((source / rel).read_bytes())
    return {EXTRA_VARIABLE: str(folder)}


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), str(path))
