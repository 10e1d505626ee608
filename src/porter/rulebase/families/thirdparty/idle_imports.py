"""An import of a CUDA-only package that nothing in its module uses (TP609 guards it; TP603
leaves it to TP609)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.cuda_packages import IMPORT_ROOTS
from porter.rulebase.families.thirdparty.flash_attn_calls import version_import
from porter.rulebase.families.thirdparty.kernel_builds import lone_import
from porter.rulebase.families.thirdparty.uses import uses
from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import Rule
from porter.rulebase.syntax import bound_names
from porter.rulebase.walk import nodes_of


def guardable_unused(rule: Rule, line: cst.CSTNode) -> Optional[str]:
    """The imported module when ``line`` is a module-level line holding one import of a
    CUDA-only package (flash_attn, xformers, apex, ...; not flash_attn's ``__version__``,
    which TP104 rewrites) whose names nothing in the module uses, after the module's
    ``import torch`` (the guard's CUDA test), and that no other module reads and no string
    (an ``__all__``) names; else None. Every other import of the same module or of one of
    its submodules must be such a line too: beside ``import cutlass.cute as cute`` (used),
    guarding an idle ``import cutlass`` changes nothing off CUDA. An import of another part
    of the package does not count (``from flash_attn import f``, whose calls the twins
    take, beside an idle ``from flash_attn.bert_padding import ...``)."""
    module = rule.ctx.module
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1 or line not in module.body:
        return None
    name = _unused_import(rule, line.body[0])
    if name is None:
        return None
    body = list(module.body)
    if not any((found := lone_import(stmt)) is not None and found[0] == "torch" for stmt in body[:body.index(line)]):
        return None
    for other in nodes_of(module, (cst.Import, cst.ImportFrom)):
        # another import of this module or of one of its submodules imports it too
        if other is line.body[0] or not any(m == name or m.startswith(name + ".") for m in _modules_of(other)):
            continue
        if not any(stmt.body[0] is other for stmt in body
                   if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1) \
                or _unused_import(rule, other) is None:
            return None
    return name


def _modules_of(small: cst.CSTNode) -> list[str]:
    """The modules an import statement imports (``import a.b, c``: a.b and c)."""
    if isinstance(small, cst.Import):
        return [dotted_name(a.name) or "" for a in small.names]
    if isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None:
        return [dotted_name(small.module) or ""]
    return []


def _unused_import(rule: Rule, small: cst.CSTNode) -> Optional[str]:
    """The module a lone import of one CUDA-only package names when nothing uses what it
    binds, here or in another module, and no string names it; else None."""
    module = rule.ctx.module
    if isinstance(small, cst.Import) and len(small.names) == 1:
        name = dotted_name(small.names[0].name) or ""
    elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None \
            and version_import(small) is None:
        name = dotted_name(small.module) or ""
    else:
        return None
    bound = bound_names(small)
    if name.split(".")[0] not in IMPORT_ROOTS or not bound or uses(module, bound, small) > 0:
        return None
    # a use or a string in a definition the engine left out is invisible: read them all
    rule.ctx.see_whole_file("an import of a CUDA-only package that nothing in sight uses")
    project, source = rule.ctx.project, module.code
    if any((project is not None and project.read_elsewhere(rule.ctx.path, n)) or f'"{n}"' in source
           or f"'{n}'" in source for n in bound):
        return None
    return name
