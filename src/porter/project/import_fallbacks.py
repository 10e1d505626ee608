"""Modules whose failing Triton import another module of the tree catches, and relies on.

TP605 lets a module that imports Triton at its top import without Triton (the kernels
become stand-ins that raise when launched). That is right unless the tree already
handles the failure itself, one or more imports away::

    # model.py
    try:
        from .ops.fused_norm import rms_norm_fn     # fused_norm.py: `import triton` at its top
    except ImportError:
        rms_norm_fn = None                          # ... and the model's PyTorch norm runs

Made importable, ``fused_norm`` would hand ``model.py`` a kernel that raises instead of
None, and the fallback its authors wrote would never run. So a module is left alone
(TP603 reports it) when every chain of imports that reaches it passes through an import
caught by ``except ImportError`` (or ``ModuleNotFoundError``, ``Exception``, a bare
``except``). A module that some file imports without a catch, or that nothing in the
tree imports (a script, an entry point), is needed as it is: the failure stops that
importer whatever the other callers catch, so it is made importable.

Cost: nothing unless a file of the tree imports Triton at its top; then a byte search of
every file's import lines, and an ``ast`` parse of the files that catch an import error.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping

from porter.rulebase.conditions.guards import parse_uncached, statements

#: A module-level (column 0) import of Triton.
_TOP_TRITON = re.compile(rb"^(?:import|from)[ \t]+triton\b", re.MULTILINE)
#: What a handler must name to catch a failed import.
_CATCHES = (b"ImportError", b"ModuleNotFoundError", b"Exception", b"except:")
_CAUGHT_BY = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def triton_importers(sources: Mapping[str, bytes]) -> list[str]:
    return sorted(rel for rel, data in sources.items() if b"triton" in data and _TOP_TRITON.search(data))


def caught_triton_modules(sources: Mapping[str, bytes], modules: Mapping[str, str]) -> frozenset[str]:
    """Files importing Triton at their top that the tree imports only where an import
    error is caught: every import of them, or of a module importing them, up every
    chain, sits in a ``try`` whose handler catches it (see the module's text)."""
    candidates = triton_importers(sources)
    if not candidates:
        return frozenset()
    by_name: dict[str, list[str]] = {}  # every dotted tail: `pkg.a` for src/pkg/a.py, `a` for a script's folder
    for rel, name in modules.items():
        parts = name.split(".") if name else []
        for start in range(len(parts)):
            by_name.setdefault(".".join(parts[start:]), []).append(rel)
    importers: dict[str, set[str]] = {}  # file -> the files that import it where a failure is not caught
    imports: dict[str, set[str]] = {}  # the same edges, forwards
    caught: dict[str, set[str]] = {}  # ... where it is
    for rel, data in sources.items():
        if b"import" not in data:
            continue
        tree = parse_uncached(data) if b"try" in data and any(w in data for w in _CATCHES) else None
        guarded, plain = _split_imports(tree, rel, by_name) if tree is not None else (set(), _all_imports(rel, data, by_name))
        imports[rel] = plain
        for target in plain:
            importers.setdefault(target, set()).add(rel)
        for target in guarded - plain:
            caught.setdefault(target, set()).add(rel)
    # Needed: run directly (nothing in the tree imports it), or imported without a catch by
    # a needed file. The least fixpoint, from the entry points.
    needed = {rel for rel in sources if rel not in importers and rel not in caught}
    stack = list(needed)
    while stack:
        rel = stack.pop()
        for target in imports.get(rel, ()):
            if target not in needed:
                needed.add(target)
                stack.append(target)
    return frozenset(rel for rel in candidates if rel not in needed and _reached_through_catch(rel, importers, caught))


def _reached_through_catch(rel: str, importers: Mapping[str, set[str]], caught: Mapping[str, set[str]]) -> bool:
    """Some chain of importers above ``rel`` holds a caught import (not only a cycle)."""
    seen, stack = {rel}, [rel]
    while stack:
        here = stack.pop()
        if caught.get(here):
            return True
        for up in importers.get(here, ()):
            if up not in seen:
                seen.add(up)
                stack.append(up)
    return False


#: Any import line, at any indentation (inside a function too: it runs when called).
_ANY_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]+\(?([\w., \t]*)|import[ \t]+([\w., \t]*))", re.MULTILINE)


def _all_imports(rel: str, data: bytes, by_name: Mapping[str, list[str]]) -> set[str]:
    """The tree's files a file without a caught import imports (read off its lines)."""
    found: set[str] = set()
    for source, names, plain in _ANY_IMPORT.findall(data):
        if plain:
            dotted = [w.split()[0].decode("utf-8", "replace") for w in plain.split(b",") if w.split()]
            found |= _files(rel, dotted, by_name)
        else:
            base = source.decode("utf-8", "replace")
            subs = [w.split()[0].decode("utf-8", "replace") for w in names.split(b",") if w.split()]
            found |= _files(rel, [base, *(_join(base, s) for s in subs if s != "*")], by_name)
    found.discard(rel)
    return found


def _split_imports(tree: ast.Module, rel: str, by_name: Mapping[str, list[str]]) -> tuple[set[str], set[str]]:
    """(the tree's files imported inside a ``try`` that catches import errors, those
    imported anywhere else) of one parsed file."""
    inside: set[int] = set()
    guarded: set[str] = set()
    for stmt in statements(tree):
        if isinstance(stmt, ast.Try) and any(_catches(h) for h in stmt.handlers):
            for inner in stmt.body:
                for node in [inner, *statements(inner)]:
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        inside.add(id(node))
                        guarded |= _targets(node, rel, by_name)
    plain: set[str] = set()
    for node in statements(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in inside:
            plain |= _targets(node, rel, by_name)
    guarded.discard(rel)
    plain.discard(rel)
    return guarded, plain


def _targets(node: ast.stmt, rel: str, by_name: Mapping[str, list[str]]) -> set[str]:
    if isinstance(node, ast.Import):
        return _files(rel, [a.name for a in node.names], by_name)
    assert isinstance(node, ast.ImportFrom)
    base = "." * node.level + (node.module or "")
    return _files(rel, [base, *(_join(base, a.name) for a in node.names if a.name != "*")], by_name)


def _catches(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(
        (isinstance(k, ast.Name) and k.id in _CAUGHT_BY) or (isinstance(k, ast.Attribute) and k.attr in _CAUGHT_BY)
        for k in kinds)


def _join(base: str, name: str) -> str:
    return f"{base}{name}" if base.endswith(".") else f"{base}.{name}"


def _files(importer: str, dotted_names: Iterable[str], by_name: Mapping[str, list[str]]) -> set[str]:
    """The files an import of each name runs: the module and every package above it."""
    found: set[str] = set()
    here = ".".join(importer.split("/")[:-1])  # the importer's package (an __init__.py's too)
    for dotted in dotted_names:
        if not dotted:
            continue
        if dotted.startswith("."):
            level = len(dotted) - len(dotted.lstrip("."))
            parts = here.split(".") if here else []
            base = parts[: len(parts) - (level - 1)] if level > 1 else parts
            dotted = ".".join([*base, dotted.lstrip(".")]).strip(".")
        parts = dotted.split(".")
        for end in range(1, len(parts) + 1):
            found.update(by_name.get(".".join(parts[:end]), ()))
    return found
