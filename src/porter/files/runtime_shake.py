"""Tree shaking the vendored runtime: each module keeps the definitions the port reaches.

A copy holds, of each runtime module it needs, only the top-level statements that define
what the ported code uses, closed over the runtime's own references (a kept function's
names, the names it imports from a sibling, ``_device.resolve`` through a module alias).
What it needs is a set of *parts*, each one of:

- ``"_amp.autocast"``: one top-level name of a module (and all it reaches);
- ``"_device"``: the module itself, with only the statements every copy of it keeps;
- ``"thirdparty/bnb.*"``: the whole module.

A module is named by its path inside the package, without ``.py`` (``thirdparty/bnb``);
a copy that holds a module of a sub-package holds the sub-package's ``__init__`` too.

A statement is dropped only when it is a pure definition no kept code names: a
``def``, a ``class``, an import, or an assignment to plain names whose value calls no
code of the runtime. Everything else (a docstring, an ``if``, a ``for``, a call,
``X = _setup()``) runs at import and is kept. A kept statement keeps every statement
that defines a name it defines (``try``/``except`` pairs, re-bindings), so shaking a
copy again with the names it holds gives the same bytes: that is how porter tells its
own copy from one edited by hand, and grows a copy without losing what it holds.

Protocol names (dunders, ``_reset``) stay in every vendored module that defines them.
``__init__``'s ``_EXPORTS`` table is cut to the names the copy holds.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

#: Names every vendored module that defines them keeps: the module protocol, and the
#: ``_reset`` that ``porter_runtime._reset()`` calls on each module it finds imported.
PROTOCOL = frozenset({"__getattr__", "__dir__", "__all__", "__version__", "_reset"})
#: ``__init__``'s table of public names, cut to what a copy holds; names in ``_MODULES``
#: are modules themselves, kept only with the whole module.
EXPORTS, MODULE_EXPORTS = "_EXPORTS", "_MODULES"
WHOLE = "*"


@dataclass
class _Statement:
    start: int  # first line of its span (the comments and blank lines above it), 1-based
    end: int  # last line
    defines: frozenset
    refs: frozenset  # parts
    always: bool  # runs at import (or can't be told apart): kept in every copy of the module


@dataclass
class _Module:
    stem: str
    lines: list
    statements: list
    names: frozenset  # every top-level name
    exports: Optional[ast.Assign] = None  # __init__'s _EXPORTS
    module_exports: frozenset = frozenset()  # __init__'s _MODULES
    docstring: Optional[tuple] = None  # (its lines, its first paragraph) when longer


@dataclass
class _State:
    modules: dict  # stem -> _Module
    kept: dict = field(default_factory=dict)  # stem -> set of statement indexes
    names: dict = field(default_factory=dict)  # stem -> names the kept statements define
    whole: set = field(default_factory=set)


def shake(source: Path, parts: Iterable[str]) -> dict[str, bytes]:
    """Each module a copy with ``parts`` holds (its stem -> its bytes)."""
    modules = _modules(source)
    state = _close(modules, parts)
    return {stem: _render(modules[stem], state) for stem in sorted(state.kept)}


def held(folder: Path, source: Path, renamed: Optional[dict] = None) -> frozenset[str]:
    """The parts a copy on disk holds: each of its modules and the top-level names they
    define (names porter's runtime doesn't define are not porter's: left out).
    ``renamed``: a module of the copy -> the module it is now (an older layout's)."""
    modules = _modules(source)
    parts = set()
    for path in _python_files(folder):
        stem = _stem(path, folder)
        stem = (renamed or {}).get(stem, stem)
        module = modules.get(stem)
        if module is None:
            continue
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError, OSError):
            parts.add(f"{stem}.{WHOLE}")  # never what porter writes: the copy reads as edited
            continue
        parts.add(stem)
        parts.update(f"{stem}.{n}" for s in tree.body for n in _defines(s) if n in module.names)
    return frozenset(parts)


def references(source: Path, stems: Iterable[str]) -> frozenset[str]:
    """Every part the whole of ``stems`` refers to in other modules."""
    modules = _modules(source)
    mine = set(stems)
    return frozenset(r for stem in mine for s in modules[stem].statements for r in s.refs
                     if r.split(".")[0] not in mine)


# -- the closure -----------------------------------------------------------------------

def _close(modules: dict, parts: Iterable[str]) -> _State:
    state = _State(modules)
    todo = list(parts)
    while todo:
        part = todo.pop()
        stem, _, name = part.partition(".")
        module = modules.get(stem)
        if module is None:
            continue
        if stem not in state.kept:
            state.kept[stem], state.names[stem] = set(), set()
            todo += [f"{stem}.{n}" for n in PROTOCOL & module.names]
            todo += _packages_of(stem)  # importing thirdparty/bnb runs thirdparty/__init__ first
            todo += _keep(module, state, [i for i, s in enumerate(module.statements) if s.always])
        if name == WHOLE and stem not in state.whole:
            state.whole.add(stem)
            todo += _keep(module, state, range(len(module.statements)))
        elif name and name != WHOLE and name not in state.names[stem]:
            state.names[stem].add(name)
            todo += _keep(module, state, [i for i, s in enumerate(module.statements) if name in s.defines])
    return state


def _keep(module: _Module, state: _State, indexes: Iterable[int]) -> list[str]:
    """Keep these statements; the parts they bring in."""
    found = []
    kept = state.kept[module.stem]
    for i in indexes:
        if i in kept:
            continue
        kept.add(i)
        statement = module.statements[i]
        found += statement.refs
        found += [f"{module.stem}.{n}" for n in statement.defines]
    return found


# -- the text --------------------------------------------------------------------------

def _render(module: _Module, state: _State) -> bytes:
    """The kept statements with their comments; the module docstring cut to its first
    paragraph (the rest is in porter's runtime, and in a copy vendored whole); a dropped
    statement's blank lines stay where the next kept one has fewer, so groups stay apart."""
    kept = state.kept[module.stem]
    exports = None if module.exports is None or _all_exported(module, state) else module.exports
    out: list[str] = []
    blanks = 0  # blank lines owed by dropped statements
    for i, statement in enumerate(module.statements):
        span = module.lines[statement.start - 1:statement.end]
        lead = len(span) - len(_lstrip_blank(span))
        if i not in kept:
            blanks = max(blanks, lead)
            continue
        out += ["\n"] * max(0, min(blanks, 2) - lead) if out else []
        blanks = 0
        if i == 0 and module.docstring:
            out += span[:len(span) - len(module.docstring[0])] + module.docstring[1]
        elif exports is not None and statement.start <= exports.lineno <= statement.end:
            out += module.lines[statement.start - 1:exports.lineno - 1]
            out.append(_exports_text(module, state))
        else:
            out += span
    last = module.statements[-1].end if module.statements else 0
    out += module.lines[last:]
    return "".join(out).encode()


def _lstrip_blank(lines: list) -> list:
    at = 0
    while at < len(lines) and not lines[at].strip():
        at += 1
    return lines[at:]


def _short_docstring(lines: list, node: ast.stmt) -> Optional[tuple[list, list]]:
    """(the docstring's lines, its first paragraph closed), or None when it has one."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
        return None
    text = lines[node.lineno - 1:node.end_lineno]
    quote = next((q for q in ('"""', "'''") if q in text[0]), None)
    blank = next((i for i, line in enumerate(text) if not line.strip()), None)
    if quote is None or blank is None or node.col_offset != 0:
        return None
    short = text[:blank]
    short[-1] = short[-1].rstrip() + quote + "\n"
    try:
        parsed = ast.parse("".join(short))
    except SyntaxError:
        return None
    if len(parsed.body) != 1 or ast.get_docstring(parsed) is None:
        return None
    return text, short


def _exported(module: _Module, state: _State) -> list[tuple[str, str]]:
    table = ast.literal_eval(module.exports.value)
    only_whole = module.module_exports
    return [(name, dotted) for name, dotted in table.items()
            if _is_whole(_path(dotted), state) or (name not in only_whole and name in state.names.get(_path(dotted), ()))]


def _path(dotted: str) -> str:
    """``thirdparty.bnb`` (how ``__init__`` names a module) -> ``thirdparty/bnb``."""
    return dotted.replace(".", "/")


def _packages_of(stem: str) -> list[str]:
    """The ``__init__`` of each sub-package above a module (``thirdparty/__init__``)."""
    folders = stem.split("/")[:-1]
    return [f"{'/'.join(folders[:i])}/__init__" for i in range(1, len(folders) + 1)]


def _is_whole(stem: str, state: _State) -> bool:
    module = state.modules.get(stem)
    return module is not None and len(state.kept.get(stem, ())) == len(module.statements)


def _all_exported(module: _Module, state: _State) -> bool:
    return len(_exported(module, state)) == len(ast.literal_eval(module.exports.value))


def _exports_text(module: _Module, state: _State) -> str:
    """``_EXPORTS = {...}`` with the entries the copy holds, wrapped at 100 columns."""
    entries = [f"{name!r}: {stem!r}".replace("'", '"') for name, stem in _exported(module, state)]
    lines, line = [], "   "
    for entry in entries:
        if len(line) + len(entry) + 2 > 100:
            lines.append(line.rstrip())
            line = "   "
        line += f" {entry},"
    lines.append(line.rstrip())
    body = "\n".join(x for x in lines if x.strip())
    return f"{EXPORTS} = {{\n{body}\n}}\n" if body else f"{EXPORTS}: dict = {{}}\n"


# -- reading the runtime ---------------------------------------------------------------

@lru_cache(maxsize=4)
def _modules(source: Path) -> dict[str, _Module]:
    stems = frozenset(_stem(p, source) for p in _python_files(source))
    return {stem: _read(source / f"{stem}.py", stem, stems) for stem in stems}


def _python_files(folder: Path) -> list[Path]:
    """The package's modules, its sub-packages' included (not their ``__pycache__``)."""
    return [p for p in sorted(folder.rglob("*.py")) if "__pycache__" not in p.relative_to(folder).parts]


def _stem(path: Path, folder: Path) -> str:
    """A module's name in a copy: its path inside the package, without ``.py``."""
    return path.relative_to(folder).with_suffix("").as_posix()


def _read(path: Path, stem: str, stems: frozenset) -> _Module:
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    names = frozenset(n for node in tree.body for n in _defines(node))
    walks = [list(ast.walk(node)) for node in tree.body]  # each statement's nodes, walked once
    aliases = _module_aliases([n for nodes in walks for n in nodes], stem, stems)
    code = _own_code(tree)
    module = _Module(stem, text.splitlines(keepends=True), [], names)
    module.docstring = _short_docstring(module.lines, tree.body[0]) if tree.body else None
    previous_end = 0
    for node, nodes in zip(tree.body, walks):
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
        refs = _refs(nodes, stem, names, aliases, stems)
        always = _runs_at_import(node, nodes, code, aliases)
        if first <= previous_end and module.statements:  # ``a = 1; b = 2``: one line, kept together
            always = module.statements[-1].always = True
        if stem == "__init__" and _assigns(node, EXPORTS) and isinstance(node.value, ast.Dict):
            module.exports, always = node, True
        if _assigns(node, MODULE_EXPORTS):
            module.module_exports = frozenset(ast.literal_eval(node.value))
        if _assigns(node, "__all__"):  # from m import *: every name listed must be there
            refs |= {f"{stem}.{c.value}" for c in nodes if isinstance(c, ast.Constant) and c.value in names}
        module.statements.append(_Statement(previous_end + 1, node.end_lineno, frozenset(_defines(node)),
                                            frozenset(refs), always))
        previous_end = node.end_lineno
    return module


def _assigns(node: ast.stmt, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return node.value is not None and any(isinstance(t, ast.Name) and t.id == name for t in targets) \
        if targets else False


def _own_code(tree: ast.Module) -> frozenset:
    """Top-level names bound to the runtime's own code: its functions and classes, and
    names imported from a sibling module."""
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.ImportFrom) and node.level >= 1 and node.module:
            found |= {a.asname or a.name for a in node.names}
    return frozenset(found)


def _defines(node: ast.stmt) -> set[str]:
    """The top-level names a statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Import):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom):
        return {a.asname or a.name for a in node.names if a.name != "*"}
    found = set()
    for child in _walk_top(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            found.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(child.name)
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            found |= _defines(child)
    return found


def _walk_top(node: ast.AST):
    """The nodes of a statement that bind in the module's scope (not inside functions,
    classes, lambdas or comprehensions)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
        elif not isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            yield from _walk_top(child)


def _runs_at_import(node: ast.stmt, nodes: list, code: frozenset, aliases: dict) -> bool:
    """Whether dropping the statement (``nodes``: its walk) could change what importing
    the module does."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False  # decorators are the runtime's own (dataclass, lru_cache, contextmanager)
    if isinstance(node, ast.ImportFrom):
        return node.module == "__future__"
    if isinstance(node, ast.Import):
        return False
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not all(isinstance(t, (ast.Name, ast.Tuple)) for t in targets):
            return True  # torch.backends.x = ..., table[key] = ...: changes another object
        return any(_calls_runtime(c, code, aliases) for c in nodes if isinstance(c, ast.Call))
    return True


def _calls_runtime(call: ast.Call, code: frozenset, aliases: dict) -> bool:
    """A call of the runtime's own code (``X = _setup()``, ``_log.install()``), which
    may act at import; a library's constructor (``torch.device``, ``TypeVar``) does not."""
    func = call.func
    while isinstance(func, ast.Attribute):
        func = func.value
    return isinstance(func, ast.Name) and (func.id in aliases or func.id in code)


def _module_aliases(nodes: list, stem: str, stems: frozenset) -> dict[str, str]:
    """Names bound anywhere in the module (``nodes``: all of its nodes) to a sibling
    module: ``from . import _log``, ``from ..thirdparty import libs as _libs``."""
    aliases = {}
    for node in nodes:
        base = _import_base(node, stem) if isinstance(node, ast.ImportFrom) else None
        if base is not None:
            aliases.update({a.asname or a.name: _join(base, a.name) for a in node.names if _join(base, a.name) in stems})
    return aliases


def _import_base(node: ast.ImportFrom, stem: str) -> Optional[str]:
    """The folder (inside the package, "" for its top) that ``from BASE import ...`` names
    in module ``stem``, or None when it is not the runtime: ``from .. import _log`` in
    ``attn/core`` is "", ``from ._compat import x`` is "_compat"."""
    if node.level:
        folders = stem.split("/")[:-1]
        if node.level - 1 > len(folders):
            return None
        base = folders[:len(folders) - node.level + 1]
    elif node.module == "porter_runtime" or (node.module or "").startswith("porter_runtime."):
        base = []
        node = ast.ImportFrom(module=node.module.partition(".")[2] or None, names=node.names, level=1)
    else:
        return None
    return "/".join(base + (node.module.split(".") if node.module else []))


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


def _refs(nodes: list, stem: str, names: frozenset, aliases: dict, stems: frozenset) -> set[str]:
    """The parts a statement (``nodes``: its walk) refers to: its module's names,
    siblings' names and modules."""
    refs = set()
    attribute_values = set()
    for child in nodes:
        if isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name) and child.value.id in aliases:
            refs.add(f"{aliases[child.value.id]}.{child.attr}")
            attribute_values.add(id(child.value))
        elif isinstance(child, ast.ImportFrom):
            refs |= _import_refs(child, stem, stems)
    for child in nodes:
        if isinstance(child, ast.Name):
            if child.id in names:
                refs.add(f"{stem}.{child.id}")
            if child.id in aliases and id(child) not in attribute_values:
                refs.add(f"{aliases[child.id]}.{WHOLE}")  # the module object itself: all of it
        elif isinstance(child, (ast.Global, ast.Nonlocal)):
            refs |= {f"{stem}.{n}" for n in child.names if n in names}
    return refs


def _import_refs(node: ast.ImportFrom, stem: str, stems: frozenset) -> set[str]:
    """``from . import _log`` needs the module; ``from ._device import resolve`` the name;
    ``from .. import __version__`` a name of a package's ``__init__``."""
    base = _import_base(node, stem)
    if base is None:
        return set()
    refs = set()
    module = base if base in stems else _join(base, "__init__")
    for alias in node.names:
        if _join(base, alias.name) in stems:
            refs.add(_join(base, alias.name))
        elif module in stems:
            refs.add(f"{module}.{WHOLE}" if alias.name == "*" else f"{module}.{alias.name}")
    return refs
