"""Availability probes that the port left dead, and their removal.

Research code probes for a CUDA-only package and keeps the answer in a flag::

    try:
        import xformers.ops as xops

        XFORMERS_AVAILABLE = True
    except ImportError:
        XFORMERS_AVAILABLE = False

Once the rules have ported every use of ``xops`` and the stop on the flag (TP201 removes
``if not XFORMERS_AVAILABLE: raise ...``), the statement binds names that nothing reads:
ruff reports the import (F401), and a maintainer would delete the whole statement, just
as porter.edits.unused_imports deletes a plain import whose last use a rule rewrote. The import
clean-up can't do it: it only removes top-level imports, and removing the import alone
would leave a ``try`` that sets a flag nobody reads.

The statement goes only when all of these hold, so nothing that could read it loses it:

- it is only a probe: its body imports CUDA-only modules (porter.rulebase.cuda_packages) and
  sets constant flags; each handler catches ImportError, ModuleNotFoundError or
  Exception and only sets flags or passes;
- a rewrite made it dead: before the port the file used one of its names, after the
  port it uses none (a probe that was already unused stays, like an unused import);
- no other file of the scanned tree may read its names: none mentions a flag, none
  mentions an imported name together with this module's name, none star-imports this
  module (a byte search over the tree's sources, run only for a dead probe, cached);
- no ``# porter: ignore`` comment is on its lines.

The removal is reported under the rule whose rewrite used the probe's names last.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Optional

import libcst as cst

from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.matching import dotted_name
from porter.rulebase.syntax import block_statements, bound_names, small_statements

if TYPE_CHECKING:  # pragma: no cover
    from porter.engine.stages.context import FileContext
    from porter.project.touchpoints.ledger import TreeContext


class Probe(NamedTuple):
    """A top-level availability probe and the names it binds."""

    node: cst.Try
    imported: tuple[str, ...]  # names its imports bind (``xops``)
    flags: tuple[str, ...]  # names it sets to a constant (``XFORMERS_AVAILABLE``)
    modules: tuple[str, ...]  # what it imports, for the report

    @property
    def names(self) -> tuple[str, ...]:
        return self.imported + self.flags


def remove_dead(new_module: cst.Module, ctx: "FileContext", tree: Optional["TreeContext"]) -> cst.Module:
    """``new_module`` without the probes that the port left dead (see the module doc)."""
    # A notebook is migrated one cell at a time: a later cell may read the flag.
    if ctx.path.endswith(".ipynb"):
        return new_module
    probes = [p for p in map(probe, ctx.module.body) if p is not None]
    if not probes:
        return new_module
    for found in probes:
        new_node = next((s for s in new_module.body if isinstance(s, cst.Try) and _unmarked(s).deep_equals(found.node)),
                        None)
        if new_node is None or not _dead(found, new_node, new_module, ctx, tree):
            continue
        new_module = new_module.with_changes(body=_without(list(new_module.body), new_node))
        _report(found, ctx)
    return new_module


def probe(stmt: cst.BaseStatement) -> Optional[Probe]:
    """The probe ``stmt`` is, or None when it is anything more."""
    if not isinstance(stmt, cst.Try) or not stmt.handlers or stmt.orelse is not None or stmt.finalbody is not None:
        return None
    imported: list[str] = []
    flags: list[str] = []
    modules: list[str] = []
    for small in _small_statements(stmt.body):
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            bound = _cuda_only_import(small, modules)
            if bound is None:
                return None
            imported += bound
        elif _is_flag(small):
            flags += _targets(small)  # type: ignore[arg-type]
        else:
            return None
    if not imported:
        return None
    for handler in stmt.handlers:
        if not _catches_import_error(handler):
            return None
        for small in _small_statements(handler.body):
            if _is_flag(small):
                flags += _targets(small)  # type: ignore[arg-type]
            elif not isinstance(small, cst.Pass):
                return None
    return Probe(stmt, tuple(dict.fromkeys(imported)), tuple(dict.fromkeys(flags)), tuple(dict.fromkeys(modules)))


# -- what a probe is --------------------------------------------------------------

#: What a probe's handler may catch: the import failing (Exception: some packages raise
#: other errors at import time without CUDA).
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception"})


def _small_statements(body: cst.BaseSuite) -> list[cst.BaseSmallStatement]:
    """The block's small statements; a compound statement shows as ``...`` (no probe part)."""
    found: list[cst.BaseSmallStatement] = []
    for line in block_statements(body):
        found += small_statements(line) if isinstance(line, cst.SimpleStatementLine) else [cst.Expr(cst.Ellipsis())]
    return found


def _cuda_only_import(small: cst.BaseSmallStatement, modules: list[str]) -> Optional[list[str]]:
    """The names an absolute import of CUDA-only modules binds, else None."""
    if isinstance(small, cst.Import):
        imported = [dotted_name(alias.name) or "" for alias in small.names]
    elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None \
            and not isinstance(small.names, cst.ImportStar):
        imported = [dotted_name(small.module) or ""]
    else:
        return None
    if not all(is_cuda_only_module(name) for name in imported):
        return None
    modules += imported
    return bound_names(small)


def _is_flag(small: cst.BaseSmallStatement) -> bool:
    """``HAS_APEX = True``, ``FLASH_VERSION = 2``: a constant that records the outcome."""
    if not isinstance(small, cst.Assign) or not all(isinstance(t.target, cst.Name) for t in small.targets):
        return False
    value = small.value
    if isinstance(value, cst.Name):
        return value.value in ("True", "False", "None")
    return isinstance(value, (cst.Integer, cst.Float, cst.SimpleString))


def _targets(small: cst.Assign) -> list[str]:
    return [t.target.value for t in small.targets]  # type: ignore[attr-defined]


def _catches_import_error(handler: cst.ExceptHandler) -> bool:
    kinds = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    values = [k.value if isinstance(k, cst.Element) else k for k in kinds]
    return bool(values) and all(isinstance(v, cst.Name) and v.value in _IMPORT_ERRORS for v in values)


# -- whether it is dead -----------------------------------------------------------

def _dead(found: Probe, new_node: cst.Try, new_module: cst.Module, ctx: "FileContext",
          tree: Optional["TreeContext"]) -> bool:
    names = set(found.names)
    if _uses(new_module, names, new_node) or not _uses(ctx.module, names, found.node):
        return False  # still read, or already unused before the port (not the port's to clean)
    if ctx.reduced is not None and any(_word(n).search(s.original) for s in ctx.reduced.stubs for n in names):
        return False  # read in a definition the engine stubbed (porter.engine.stages.segments), which stays as it was
    if ctx.ignored(found.node):
        return False
    return tree is None or not read_elsewhere(tree, ctx.path, found)


class _NameUses(cst.CSTVisitor):
    """Counts the mentions of ``names`` outside ``skip``: a Name that is a variable (a
    store, a ``global``, an import too: a cautious count; not ``obj.name`` or
    ``f(name=...)``), and a word in a string (``__all__``, ``globals()["HAS_APEX"]``)."""

    def __init__(self, names: set[str], skip: cst.CSTNode) -> None:
        self.names, self.skip, self.count = names, skip, 0
        self.words = [re.compile(rf"\b{re.escape(n)}\b") for n in names]

    def on_visit(self, node: cst.CSTNode) -> bool:
        if node is self.skip:
            return False
        if isinstance(node, cst.Attribute):  # its attribute name is no variable
            node.value.visit(self)
            return False
        if isinstance(node, cst.Arg) and node.keyword is not None:
            node.value.visit(self)
            return False
        variable = isinstance(node, cst.Name) and node.value in self.names
        if variable or (isinstance(node, cst.SimpleString) and any(w.search(node.value) for w in self.words)):
            self.count += 1
        return True


def _uses(module: cst.Module, names: set[str], skip: cst.CSTNode) -> int:
    visitor = _NameUses(names, skip)
    module.visit(visitor)
    return visitor.count


def _word(name: str) -> re.Pattern:
    return re.compile(rb"\b" + re.escape(name.encode()) + rb"\b")


# -- whether another file may read it ---------------------------------------------

def read_elsewhere(tree: "TreeContext", path: str, found: Probe) -> bool:
    """Whether a file of ``tree`` other than ``path`` may read a name the probe binds:
    it mentions a flag; or it mentions an imported name and this module's name
    (``from ops.attention import xops``); or it star-imports this module."""
    others = tree.sources - {path}
    if not others:
        return False
    module = _module_name(path)
    star = rb"\bfrom[ \t]+[\w.]*\b" + re.escape(module.encode()) + rb"[ \t]+import[ \t(]*\*"
    stars = [star, _STAR_PACKAGE] if path.rsplit("/", 1)[-1] == "__init__.py" else [star]
    words = {name: _word(name).pattern for name in (*found.names, module)}
    hits = files_matching(tree, {**{p: b"*" for p in stars}, **{p: n.encode() for n, p in words.items()}})

    def files(pattern: bytes) -> frozenset[str]:
        return hits[pattern] & others

    if any(files(p) for p in stars) or any(files(words[flag]) for flag in found.flags):
        return True
    return any(files(words[name]) & files(words[module]) for name in found.imported)


#: ``from . import *`` in a package's module reads the package's ``__init__``.
_STAR_PACKAGE = rb"\bfrom[ \t]+\.+[ \t]+import[ \t(]*\*"


def _module_name(path: str) -> str:
    """The name other modules import this file by (its stem, or its package's name)."""
    parts = path.rsplit("/", 2)
    stem = parts[-1].rsplit(".", 1)[0]
    return parts[-2] if stem == "__init__" and len(parts) > 1 else stem


#: One run's answers: the tree object of the run (one per run, one per worker
#: process), and pattern → its sources that match. A pattern costs one pass over the
#: tree, however many files ask (``apex`` probed in several modules).
_CACHE: dict = {"tree": None, "found": {}}


def files_matching(tree: "TreeContext", searches: dict[bytes, bytes]) -> dict[bytes, frozenset[str]]:
    """For each pattern of ``searches`` (pattern → a substring of every match, a cheap
    test first), the sources of ``tree`` it matches, in one pass over the tree for
    those not asked before; an unreadable source matches (in doubt, a probe stays)."""
    if _CACHE["tree"] is not tree:
        _CACHE["tree"], _CACHE["found"] = tree, {}
    found: dict[bytes, frozenset[str]] = _CACHE["found"]
    missing = {pattern: (needle, re.compile(pattern)) for pattern, needle in searches.items() if pattern not in found}
    if missing:
        hits: dict[bytes, set[str]] = {pattern: set() for pattern in missing}
        for rel in tree.sources:
            try:
                data = (Path(tree.root) / rel).read_bytes()
            except OSError:
                data = None
            for pattern, (needle, regex) in missing.items():
                if data is None or (needle in data and regex.search(data)):
                    hits[pattern].add(rel)
        found.update((pattern, frozenset(files)) for pattern, files in hits.items())
    return {pattern: found[pattern] for pattern in searches}


# -- removal and report -----------------------------------------------------------

def _without(body: list, removed: cst.BaseStatement) -> list:
    """``body`` less ``removed``, the blank lines between top-level blocks kept: the next
    statement keeps the larger of its own separation and the removed one's; comments
    right above the probe go with it, a comment set apart by a blank line stays."""
    index = next(i for i, s in enumerate(body) if s is removed)
    del body[index]
    if index == len(body):
        return body
    leading = list(removed.leading_lines)
    attached = 0
    while attached < len(leading) and leading[len(leading) - 1 - attached].comment is not None:
        attached += 1
    kept = leading[:len(leading) - attached]
    following = body[index]
    own = _blank_prefix(following.leading_lines)
    theirs = 0
    while theirs < len(kept) and kept[len(kept) - 1 - theirs].comment is None:
        theirs += 1
    above = kept[:len(kept) - theirs]  # detached comments (a section heading)
    blanks = max(own, theirs)
    if index == 0 and not above:
        blanks = 0  # the file's first statement now: no blank line at the top
    lines = [*above, *[cst.EmptyLine()] * blanks, *following.leading_lines[own:]]
    body[index] = following.with_changes(leading_lines=lines)
    return body


def _blank_prefix(lines) -> int:
    count = 0
    for line in lines:
        if line.comment is not None:
            break
        count += 1
    return count


def _report(found: Probe, ctx: "FileContext") -> None:
    """Record the removal under the rule whose rewrite used the probe's names last
    (TP201 for ``xops.memory_efficient_attention(...)``), else the last rewrite's."""
    names = set(found.names)
    rewrites = ctx.rewrites()
    if not rewrites:  # the port changed nothing, so nothing went dead
        return
    rule = next((rule for rule, node in reversed(rewrites) if _mentions(node, names)), rewrites[-1][0])
    bound = ", ".join(f"`{n}`" for n in found.names)
    ctx.record(rule, found.node, "rewrite",
               f"this try/except only probed for {', '.join(found.modules)} ({bound}); every use of its "
               f"names was ported and no other module reads them, so it goes like an unused import")


def _mentions(node: cst.CSTNode, names: set[str]) -> bool:
    visitor = _NameUses(names, skip=_NOTHING)
    node.visit(visitor)
    return visitor.count > 0


_NOTHING = cst.Module(body=[])


class _Unmark(cst.CSTTransformer):
    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> cst.SimpleStatementLine:
        comment = updated.trailing_whitespace.comment
        if comment is not None and comment.value == PROBE_MARK:
            return updated.with_changes(trailing_whitespace=cst.TrailingWhitespace())
        return updated


#: What the rules write after a probe's import whose last use they ported
#: (porter.rulebase.families.thirdparty.twin_flags.mark_probe_imports): a probe that goes
#: anyway is matched without it.
PROBE_MARK = "# noqa: F401"


def _unmarked(node: cst.Try) -> cst.Try:
    if PROBE_MARK not in cst.Module(body=[node]).code:
        return node
    return node.visit(_Unmark())  # type: ignore[return-value]
