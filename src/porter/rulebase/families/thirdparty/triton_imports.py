"""Module-level Triton imports that TP605 makes importable without Triton (TP603 then
says nothing about them): what the two rules share."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.matching import dotted_name


def _under_triton(module: str) -> bool:
    return module == "triton" or module.startswith("triton.")


def triton_bindings(stmt: cst.CSTNode) -> Optional[list[tuple[str, str]]]:
    """(name bound, the Triton path it stands for) of each name a statement line binds,
    when the line does nothing but import from Triton: ``import triton`` -> ("triton",
    "triton"), ``import triton.language as tl`` -> ("tl", "triton.language"),
    ``from triton import cdiv`` -> ("cdiv", "triton.cdiv"). None otherwise."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    found: list[tuple[str, str]] = []
    if isinstance(small, cst.Import):
        for alias in small.names:
            module = dotted_name(alias.name) or ""
            if not _under_triton(module):
                return None
            if alias.asname is not None:
                if not isinstance(alias.asname.name, cst.Name):
                    return None
                found.append((alias.asname.name.value, module))
            else:
                found.append(("triton", "triton"))  # `import triton.language` binds `triton`
        return list(dict.fromkeys(found))
    if isinstance(small, cst.ImportFrom):
        module = dotted_name(small.module) if small.module is not None else None
        if small.relative or not module or not _under_triton(module) or isinstance(small.names, cst.ImportStar):
            return None
        for alias in small.names:
            name = dotted_name(alias.name) or ""
            bound = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) \
                else name
            found.append((bound, f"{module}.{name}"))
        return found
    return None


def made_importable(ctx, stmt: cst.CSTNode) -> bool:
    """Whether TP605 wraps this statement: a module-level line importing only from
    Triton, in a module that the tree does not
    import only where CUDA is (nothing to do) nor catch the import error of (its
    fallback must keep running: porter.project.import_fallbacks)."""
    if triton_bindings(stmt) is None or stmt not in ctx.module.body:
        return False
    project = ctx.project
    return project is None or (ctx.path not in project.caught_triton and ctx.path not in project.cuda_gated)
