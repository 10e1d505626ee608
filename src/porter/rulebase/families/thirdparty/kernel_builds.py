"""What the kernel and CUDA-extension rules (TP602-TP604) share: the sources a build names,
whether only CUDA branches use a name, and the imports of compiled CUDA extensions."""

from __future__ import annotations

import re
from typing import Optional, Union

import libcst as cst

from porter.rulebase.cuda_packages import COMPILED
from porter.rulebase.conditions.availability_checks import else_stops
from porter.rulebase.matching import dotted_name
from porter.rulebase.walk import nodes_of
from porter.rulebase.rule import BYTES_GAP, Rule, keyword, string_value


class _Strings(cst.CSTVisitor):
    """Every string literal and f-string text part in a subtree."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is not None:
            self.found.append(value)

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self.found.append(node.value)


def cuda_sources(call: cst.Call) -> list[str]:
    """The CUDA source names anywhere in a call's arguments: literals in lists,
    ``os.path.join(here, "kernel.cu")``, f-strings (``f"{root}/k.cu"``)."""
    strings = _Strings()
    for arg in call.args:
        arg.value.visit(strings)
    return [s for s in strings.found if s.endswith((".cu", ".cuh"))]


def _cuda_test(test: cst.BaseExpression) -> Optional[bool]:
    """True for a test that holds only for CUDA tensors (``x.is_cuda``,
    ``x.device.type == "cuda"``, or an ``and`` with one), False for its negation."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _cuda_test(test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.Attribute):
        return True if test.attr.value == "is_cuda" else None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(test.left, cst.Attribute) and test.left.attr.value == "type" \
                and string_value(target.comparator) == "cuda":
            return {cst.Equal: True, cst.NotEqual: False}.get(type(target.operator))
        return None
    if isinstance(test, cst.BooleanOperation):
        sides = (_cuda_test(test.left), _cuda_test(test.right))
        want = isinstance(test.operator, cst.And)  # `a.is_cuda and ...` / `not a.is_cuda or ...`
        return want if want in sides else None
    return None


def _returns(block: cst.BaseSuite) -> bool:
    """Whether a block always ends by leaving (``return`` / ``raise``)."""
    last = block.body[-1] if isinstance(block, cst.IndentedBlock) and block.body else None
    if isinstance(block, cst.SimpleStatementSuite):
        last = block
    small = last.body[-1] if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else None
    return isinstance(small, (cst.Return, cst.Raise))


class _Gates(cst.CSTVisitor):
    """Counts the uses of ``names`` that run only for CUDA tensors (inside
    ``if x.is_cuda:``, after ``if not x.is_cuda: return ...``) and the others."""

    def __init__(self, names: set[str]) -> None:
        self.names, self.depth, self.gated, self.open = names, 0, 0, 0

    def _in(self, node: Optional[cst.CSTNode], gated: bool) -> None:
        if node is not None:
            self.depth += gated
            node.visit(self)
            self.depth -= gated

    def visit_If(self, node: Union[cst.If, cst.IfExp]) -> bool:
        polarity = _cuda_test(node.test)
        if polarity is None:
            return True
        node.test.visit(self)
        self._in(node.body, polarity)
        self._in(node.orelse, not polarity)
        return False

    visit_IfExp = visit_If  # the same gating for `a if x.is_cuda else b`

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        gated = False
        for stmt in node.body:
            self._in(stmt, gated)
            gated = gated or (isinstance(stmt, cst.If) and stmt.orelse is None
                              and _cuda_test(stmt.test) is False and _returns(stmt.body))
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.names:
            if self.depth:
                self.gated += 1
            else:
                self.open += 1


def only_cuda_uses(module: cst.Module, name: str) -> bool:
    """``name`` is used, and only where the code already runs for CUDA tensors alone."""
    gates = _Gates({name})
    module.visit(gates)
    return gates.gated > 0 and gates.open == 0


BUILDERS = frozenset({"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"})


def _cuda_build(rule: Rule, call: cst.Call) -> bool:
    """`load(...)` with a `.cu`/`.cuh` source or `load_inline(..., cuda_sources=...)`."""
    name = rule.qualname(call.func)
    if name == "torch.utils.cpp_extension.load":
        return bool(cuda_sources(call))
    return name == "torch.utils.cpp_extension.load_inline" and keyword(call, "cuda_sources") is not None


def optional_builds(rule: Rule) -> set[cst.Call]:
    """Module-level ``ext = load(...)`` CUDA builds whose ``ext`` only CUDA branches use."""
    found = set()
    for stmt in rule.ctx.module.body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if not isinstance(small, cst.Assign) or len(small.targets) != 1 or not isinstance(small.value, cst.Call):
            continue
        target = small.targets[0].target
        if isinstance(target, cst.Name) and _cuda_build(rule, small.value) \
                and only_cuda_uses(rule.ctx.module, target.value):
            found.add(small.value)
    return found


def imports_of(roots) -> tuple["re.Pattern[bytes]", ...]:
    """Byte patterns for an import statement naming one of ``roots`` as its top-level
    module (``from numba import cuda``, ``import os, cupy as cp``, ``import rotary_emb``):
    two patterns, each starting with its keyword, so both are searched at C speed."""
    names = rb"(?:" + b"|".join(re.escape(root).encode() for root in sorted(roots)) + rb")\b"
    return (
        re.compile(rb"from(?<=\bfrom)" + BYTES_GAP + names),
        re.compile(rb"import(?<=\bimport)" + BYTES_GAP
                   + rb"(?:[A-Za-z_][\w.]*(?:" + BYTES_GAP + rb"as" + BYTES_GAP + rb"\w+)?" + BYTES_GAP + rb","
                   + BYTES_GAP + rb")*" + names),
    )


#: Compiled CUDA extension modules, imported by their module name (`import rotary_emb`).
COMPILED_MODULES = frozenset(COMPILED)


def lone_import(stmt: cst.CSTNode) -> Optional[tuple[str, str]]:
    """(module, bound name) of a statement ``import m`` / ``import m as n`` of one module."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if not isinstance(small, cst.Import) or len(small.names) != 1:
        return None
    alias = small.names[0]
    module = dotted_name(alias.name) or ""
    bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else module
    return (module, bound) if "." not in module else None


def optional_import(module: cst.Module, stmt: cst.CSTNode) -> Optional[str]:
    """The bound name when ``stmt`` is a module-level import of a compiled CUDA extension
    that only CUDA branches use, in a module that imports torch (for the CUDA test)."""
    found = lone_import(stmt)
    if found is None or found[0] not in COMPILED_MODULES or stmt not in module.body:
        return None
    if torch_alias(module) is None:
        return None
    return found[1] if only_cuda_uses(module, found[1]) else None


def torch_alias(module: cst.Module) -> Optional[str]:
    """The name a module-level ``import torch`` / ``import torch as t`` binds, or None."""
    for stmt in module.body:
        found = lone_import(stmt)
        if found is not None and found[0] == "torch":
            return found[1]
    return None


def torch_bound_before(module: cst.Module, stmt: cst.CSTNode) -> bool:
    """Whether a module-level ``import torch`` comes before ``stmt`` in ``module``'s body."""
    for other in module.body:
        if other is stmt:
            return False
        found = lone_import(other)
        if found is not None and found[0] == "torch":
            return True
    return True  # not at the top level: the module ran its imports by then


def handler_torch(module: cst.Module, stmt: cst.CSTNode) -> tuple[str, str]:
    """(the name torch has at ``stmt``, the ``import torch`` line an ``except`` handler there
    needs first, or ""): torch imported only below the statement (InternImage's ``import
    DCNv3`` sorts first), or not at all, would make the handler's CUDA test a NameError."""
    alias = torch_alias(module)
    if alias is not None and torch_bound_before(module, stmt):
        return alias, ""
    alias = alias or "torch"
    return alias, (f"import torch as {alias}\n" if alias != "torch" else "import torch\n")


def _ext_modules_builders(module: cst.Module) -> set[str]:
    """The functions whose call is passed as ``ext_modules=`` (``setup(..., ext_modules=get_extensions())``)."""
    return {arg.value.func.value for arg in nodes_of(module, cst.Arg)
            if arg.keyword is not None and arg.keyword.value == "ext_modules" and isinstance(arg.value, cst.Call)
            and isinstance(arg.value.func, cst.Name)}


def extension_build_stop(rule: Rule, node: cst.CSTNode) -> bool:
    """Whether ``node`` is an ``if <CUDA test>: ... else: raise ...`` at the top of the
    function a ``setup.py`` calls for ``ext_modules=`` (Deformable-DETR's, and the copies of
    its ``models/ops/setup.py`` in DINO, Mask2Former, GroundingDINO's forks): off CUDA the
    build stops there, where building no extension would let the package install (PT203)."""
    if not isinstance(node, cst.If) or rule.ctx.path.rsplit("/", 1)[-1] != "setup.py" or not else_stops(rule, node):
        return False
    if not any(rule.matches(call.func, "torch.cuda.is_available") is not None for call in nodes_of(node.test, cst.Call)):
        return False
    module = rule.ctx.module
    builders = _ext_modules_builders(module)
    return any(isinstance(stmt, cst.FunctionDef) and stmt.name.value in builders
               and isinstance(stmt.body, cst.IndentedBlock) and node in stmt.body.body for stmt in module.body)


def guarded_import(rule: Rule, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine,
                   why: str, fallback: Optional[str] = None) -> cst.BaseStatement:
    """``updated`` (a module-level import line) inside ``try:`` / ``except ImportError:`` that
    re-raises where torch sees CUDA (a missing package fails there as before) and, elsewhere,
    binds ``fallback`` to None (or nothing); ``why`` is the handler's comment (TP604, TP608, TP609)."""
    module = rule.ctx.module
    stmt = module.code_for_node(updated.with_changes(leading_lines=())).strip()
    tail = f"    {fallback} = None\n" if fallback else ""
    alias, first = handler_torch(module, original)
    code = (f"try:\n    {stmt}\nexcept ImportError:  # {why}\n{'    ' + first if first else ''}"
            f"    if {alias}.cuda.is_available():\n        raise\n{tail}")
    return cst.parse_statement(code).with_changes(leading_lines=updated.leading_lines)
