"""Import changes after the rules ran: add the runtime import, drop dead imports.

The runtime import goes right after the module docstring and ``from __future__``
imports, before ``import torch``: importing ``porter_runtime`` first lets it set
``PYTORCH_ENABLE_MPS_FALLBACK`` while that still has an effect (torch reads it once,
at import). LibCST's ``AddImportsVisitor`` would append it after the last import, so
the placement is done here, in this one function.

Imports that a rewrite left unused (``from torch import device`` once every
``device("cuda")`` became ``porter_runtime.device()``) are removed with LibCST's
``RemoveImportsVisitor``, and only those: an import the user had and did not use
before stays, so nothing the rules did not touch changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from porter.cuda_packages import IMPORT_ROOTS
from porter.matching import Resolver, dotted_name
from porter.rule import RUNTIME

if TYPE_CHECKING:  # pragma: no cover
    from porter.engine import FileContext

_BOOTSTRAP = '''\
try:
    import {runtime}
except ModuleNotFoundError:  # run as a script: put the folder of the vendored runtime on sys.path
    import os as _os, sys as _sys

    _sys.path.insert(0, _os.path.normpath(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "{rel}")))
    import {runtime}
'''


def runtime_import(bootstrap: Optional[str]) -> cst.BaseStatement:
    if bootstrap is None:
        return cst.parse_statement(f"import {RUNTIME}\n")
    return cst.parse_statement(_BOOTSTRAP.format(runtime=RUNTIME, rel=bootstrap))


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_future_import(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and all(
            isinstance(s, cst.ImportFrom) and s.module is not None and dotted_name(s.module) == "__future__"
            for s in stmt.body
        )
    )


def add_runtime_import(module: cst.Module, bootstrap: Optional[str]) -> cst.Module:
    """Insert the runtime import after the docstring and ``__future__`` imports."""
    body = list(module.body)
    index = 0
    if body and _is_docstring(body[0]):
        index = 1
    while index < len(body) and _is_future_import(body[index]):
        index += 1
    new = runtime_import(bootstrap)
    if index < len(body):
        # Blank lines before the next statement now separate it from what precedes the
        # new import; comments stay with the statement they describe.
        following = body[index]
        leading = list(following.leading_lines)
        blanks = 0
        while blanks < len(leading) and leading[blanks].comment is None:
            blanks += 1
        new = new.with_changes(leading_lines=leading[:blanks])
        body[index] = following.with_changes(leading_lines=leading[blanks:])
    elif index and body:
        new = new.with_changes(leading_lines=[])
    body.insert(index, new)
    return module.with_changes(body=body)


def remove_unused(new_module: cst.Module, ctx: "FileContext") -> cst.Module:
    """Remove the top-level imports whose every use a rule rewrote."""
    if not ctx._records:
        return new_module
    # libcst.codemod is slow to import; only files that lost an import's last use need it.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import RemoveImportsVisitor

    before = ctx.resolver.use_counts()
    after = Resolver(new_module).use_counts()
    context = CodemodContext()
    scheduled = False
    for stmt in ctx.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                scheduled |= _remove_dead_module_imports(small, before, after, context, ctx)
                continue
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            if small.relative or small.module is None:
                continue
            module_name = dotted_name(small.module) or ""
            for alias in small.names:
                obj = dotted_name(alias.name) or ""
                asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
                key = (asname or obj, f"{module_name}.{obj}")
                if before[key] and not after[key]:
                    _not_used_in_stubs(ctx, key[0])
                    RemoveImportsVisitor.remove_unused_import(context, module_name, obj, asname)
                    scheduled = True
    if not scheduled:
        return new_module
    return RemoveImportsVisitor(context).transform_module(new_module)


#: Packages that do not install without CUDA (porter.cuda_packages). A plain ``import``
#: of one of them that a rewrite left without a use would still fail on the port, so it
#: goes too; other plain imports (``import torch``) stay even when unused, as the user wrote them.
CUDA_ONLY_PACKAGES = IMPORT_ROOTS


def _not_used_in_stubs(ctx: "FileContext", name: str) -> None:
    """A use inside a definition the engine stubbed (porter.segments) is invisible
    to the counts: only the whole file can tell whether the import is dead."""
    if ctx.reduced is not None and name in ctx.reduced.stub_names:
        from porter.segments import WholeFile

        raise WholeFile(name)


def _remove_dead_module_imports(stmt: cst.Import, before, after, context, ctx) -> bool:
    """Schedule ``import a.b`` / ``import a.b as c`` of a CUDA-only package whose every use
    a rule rewrote (``import flash_attn`` once each ``flash_attn.flash_attn_func(...)`` was)."""
    from libcst.codemod.visitors import RemoveImportsVisitor

    scheduled = False
    for alias in stmt.names:
        full = dotted_name(alias.name) or ""
        if full.split(".")[0] not in CUDA_ONLY_PACKAGES:
            continue
        asname = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else None
        key = (asname, full) if asname else (full.split(".")[0], full.split(".")[0])
        if before[key] and not after[key]:
            _not_used_in_stubs(ctx, key[0])
            RemoveImportsVisitor.remove_unused_import(context, full, asname=asname)
            scheduled = True
    return scheduled
