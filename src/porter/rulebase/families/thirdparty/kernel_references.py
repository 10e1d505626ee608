"""What TP608 (a compiled extension's kernels take the module's own PyTorch reference) and
TP603 (which leaves such an import to it) share: finding each kernel's reference."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Union

import libcst as cst

from porter.rulebase.families.thirdparty.kernel_builds import (
    COMPILED_MODULES,
    lone_import,
    only_cuda_uses,
    torch_alias,
)
from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import Rule
from porter.rulebase.walk import nodes_of

#: Words that say a function is the PyTorch version of something (one must be in its name).
_REFERENCE_WORDS = frozenset({"pytorch", "torch", "ref", "reference", "naive", "fallback"})
#: Words a reference's name adds to the kernel's (``ms_deform_attn_core_pytorch``).
_REFERENCE_NOISE = _REFERENCE_WORDS | {"core", "python", "py", "native", "slow", "impl", "cpu", "func", "fn"}
#: Words a kernel's name adds (``MSDeformAttnFunction``, ``fused_bias_act_cuda``).
_KERNEL_NOISE = frozenset({"function", "func", "fn", "cuda", "cu", "kernel", "op", "ops", "ext", "fused",
                           "autograd", "impl", "apply"})

def _words(name: str) -> list[str]:
    """``MSDeformAttnFunction`` -> ms, deform, attn, function; ``fused_op_ref`` -> fused, op, ref."""
    return [w.lower() for part in name.split("_") for w in re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", part)]


def _stem(name: str, noise: frozenset[str]) -> tuple[str, ...]:
    return tuple(w for w in _words(name) if w not in noise)


def _parameters(params: cst.Parameters) -> Optional[tuple[list[str], set[str]]]:
    """(every name a call can give by name, the ones without a default); None with ``*args``
    / ``**kwargs`` (names can't be matched) or positional-only parameters."""
    if params.posonly_params or isinstance(params.star_arg, cst.Param) or params.star_kwarg is not None:
        return None
    every = [*params.params, *params.kwonly_params]
    return [p.name.value for p in every], {p.name.value for p in every if p.default is None}


@dataclass(frozen=True)
class Kernel:
    """A module-level function, or an autograd Function class, that calls the extension."""

    name: str
    node: Union[cst.FunctionDef, cst.ClassDef]
    names: list[str]  # what its callers pass (a Function: its forward's, after ctx)


def _uses(node: cst.CSTNode, name: str) -> bool:
    return any(n.value == name for n in nodes_of(node, cst.Name))


def _kernel(stmt: cst.CSTNode) -> Optional[Kernel]:
    if isinstance(stmt, cst.FunctionDef) and not stmt.asynchronous:
        found = _parameters(stmt.params)
        return Kernel(stmt.name.value, stmt, found[0]) if found else None
    if not isinstance(stmt, cst.ClassDef) or not any(
            (dotted_name(b.value) or "").rsplit(".", 1)[-1] == "Function" for b in stmt.bases):
        return None
    body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
    forward = next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"), None)
    found = _parameters(forward.params) if forward is not None else None
    if found is None or not found[0]:
        return None
    return Kernel(stmt.name.value, stmt, found[0][1:])  # ctx first


def _reference(kernel: Kernel, functions: list[cst.FunctionDef], extension: str) -> Optional[cst.FunctionDef]:
    """The module's PyTorch reference for ``kernel``: its name says so and names the same
    thing, it doesn't use the extension, and every parameter it needs the kernel's callers give."""
    stem = _stem(kernel.name, _KERNEL_NOISE)
    for function in functions:
        if function.name.value == kernel.name or not stem or _uses(function, extension):
            continue
        if not _REFERENCE_WORDS & set(_words(function.name.value)):
            continue
        if "".join(_stem(function.name.value, _REFERENCE_NOISE)) != "".join(stem):  # DCNv3 / dcnv3
            continue
        found = _parameters(function.params)
        if found is not None and found[1] <= set(kernel.names):  # the rest keep their defaults
            return function
    return None


def raising_probe(stmt: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
    """The import line of ``try: import ext`` / ``except ImportError: ... raise ...``: a
    handler that only says how to build the extension and raises (Mask2Former's
    ``ms_deform_attn_func.py``: "Please compile MultiScaleDeformableAttention CUDA op"), which
    is no fallback: the import as good as stands alone."""
    if not isinstance(stmt, cst.Try) or stmt.orelse is not None or stmt.finalbody is not None \
            or not isinstance(stmt.body, cst.IndentedBlock) or len(stmt.body.body) != 1 or not stmt.handlers:
        return None
    line = stmt.body.body[0]
    if lone_import(line) is None:
        return None
    for handler in stmt.handlers:
        caught = dotted_name(handler.type) if handler.type is not None else None
        body = handler.body.body if isinstance(handler.body, cst.IndentedBlock) else ()
        if caught not in ("ImportError", "ModuleNotFoundError") or not body:
            return None
        if not all(isinstance(s, cst.SimpleStatementLine) for s in body):
            return None
        last = body[-1].body[-1]
        if not isinstance(last, cst.Raise) or any(isinstance(n, cst.Raise) for s in body[:-1] for n in s.body):
            return None
    return line


def _extension_name(rule: Rule, stmt: cst.CSTNode) -> Optional[tuple[str, str]]:
    """(module, bound name) when ``stmt`` is a module-level ``import ext`` of a compiled CUDA
    extension (alone, or in a ``try`` whose handler only raises): a known one, or one the
    tree's setup.py builds."""
    probe = raising_probe(stmt)
    found = lone_import(probe if probe is not None else stmt)
    if found is None or stmt not in rule.ctx.module.body:
        return None
    project = rule.ctx.project
    if found[0] in COMPILED_MODULES or (project is not None and found[0] in project.built_extensions):
        return found
    return None


def wiring(rule: Rule) -> Optional[tuple[cst.CSTNode, str, list[tuple[Kernel, cst.FunctionDef]]]]:
    """(the import, the bound name, each kernel with its reference) when every use of the
    extension sits in a kernel of the module whose PyTorch reference is beside it."""
    module = rule.ctx.module
    if torch_alias(module) is None:
        return None
    imports = [(stmt, found) for stmt in module.body if (found := _extension_name(rule, stmt)) is not None]
    if len(imports) != 1:
        return None
    stmt, (_, name) = imports[0]
    if only_cuda_uses(module, name):
        return None  # TP604 makes it optional as it is
    functions = [s for s in module.body if isinstance(s, cst.FunctionDef)]
    pairs = []
    for other in module.body:
        if other is stmt or not _uses(other, name):
            continue
        kernel = _kernel(other)
        reference = _reference(kernel, functions, name) if kernel is not None else None
        if reference is None:
            return None  # a use no reference covers: the import stays as it is (PT999 names it)
        pairs.append((kernel, reference))
    return (stmt, name, pairs) if pairs else None


def wired_import(rule: Rule, stmt: cst.CSTNode) -> bool:
    """Whether TP608 wires the extension ``stmt`` imports (and makes the import optional)."""
    found = wiring(rule)
    return found is not None and found[0] is stmt
