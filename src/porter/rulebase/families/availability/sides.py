"""What each side of a ``torch.cuda.is_available()`` test does (PT202): whether CUDA is
left in it after porter's other rules, whether a side is inert off CUDA, and the flags
and type tests that make a guard mean CUDA."""

from __future__ import annotations

import re
from typing import Optional, Union

import libcst as cst

from porter.rulebase.conditions.availability_checks import availability_test
from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.families.availability.choices import is_fallback, mps_statement_choice, names_mps, ternary
from porter.rulebase.rule import Rule, string_value
from porter.rulebase.syntax import block_statements, runtime_call_of, small_statements


class _Residue(cst.CSTVisitor):
    """Finds what still ties code to CUDA after porter's other rules ran."""

    def __init__(self) -> None:
        self.found: Optional[str] = None

    def _hit(self, what: str) -> bool:
        self.found = self.found or what
        return False

    def visit_Call(self, node: cst.Call) -> Optional[bool]:
        # porter's own rewrite (`porter_runtime.device(f"cuda:{r}")`) runs everywhere:
        # its CUDA arguments are requests the runtime maps, not a tie to CUDA.
        return False if runtime_call_of(node) is not None else None

    def visit_Name(self, node: cst.Name) -> Optional[bool]:
        return self._hit(node.value) if "cuda" in node.value.lower() or "nccl" in node.value.lower() else None

    def visit_SimpleString(self, node: cst.SimpleString) -> Optional[bool]:
        return self._hit(node.value) if "cuda" in node.value or "nccl" in node.value else None

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> Optional[bool]:
        return self._hit(node.value) if "cuda" in node.value else None

    def visit_Import(self, node: cst.Import) -> bool:
        return self._hit("import")

    def visit_Raise(self, node: cst.Raise) -> Optional[bool]:
        # A bare `raise` in a handler re-raises what failed (a CUDA extension's import):
        # fatal where CUDA is, as TP604 keeps it, not on every accelerator.
        return self._hit("raise") if node.exc is None else None

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return self._hit("import")


class _CudaOnlyNames(cst.CSTVisitor):
    """Names (in an original subtree) that resolve into a CUDA-only package."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.found: Optional[str] = None

    def visit_Name(self, node: cst.Name) -> None:
        name = self.rule.qualname(node)
        if name is not None and is_cuda_only_module(name):
            self.found = self.found or name


def cuda_residue(rule: Rule, original: cst.CSTNode, updated: cst.CSTNode) -> Optional[str]:
    """What in the code still needs CUDA (after the other rules' rewrites), or None."""
    names = _CudaOnlyNames(rule)
    original.visit(names)
    if names.found:
        return names.found
    residue = _Residue()
    for before, after in _statement_pairs(original, updated):
        if not _inert_statement_line(rule, before):  # a CUDA flag is harmless elsewhere
            after.visit(residue)
    return residue.found


def _statement_pairs(original: cst.CSTNode, updated: cst.CSTNode) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    """The statements of two versions of a block side by side (the nodes themselves
    when they are not blocks or no longer line up)."""
    if isinstance(original, cst.BaseSuite) and isinstance(updated, cst.BaseSuite):
        before, after = block_statements(original), block_statements(updated)
        if len(before) == len(after):
            return list(zip(before, after))
    return [(original, updated)]


def _inert_statement_line(rule: Rule, stmt: cst.CSTNode) -> bool:
    """A statement line that only sets CUDA backend flags (TF32, cuDNN)."""
    small = list(small_statements(stmt)) if isinstance(stmt, cst.BaseStatement) else []
    return bool(small) and all(_inert_statement(rule, s, frozenset()) and not isinstance(s, cst.Pass)
                               for s in small)


# What only means something on CUDA: backend flags (TF32, cuDNN), CUDA's own diagnostics
# (its sync debug mode, NVTX ranges, the allocator's history) and the NCCL backend's name;
# and the fallback that is right on every other device: gloo.
_CUDA_SETTINGS = ("torch.backends.cuda.", "torch.backends.cudnn.", "torch.cuda.set_sync_debug_mode",
                  "torch.cuda.get_sync_debug_mode", "torch.cuda.nvtx.", "torch.cuda.memory._record_memory_history")
_CUDA_VALUES = frozenset({"nccl"})
_FALLBACK_VALUES = frozenset({"gloo"})


def _inert_statement(rule: Rule, stmt: cst.BaseSmallStatement, values: frozenset[str]) -> bool:
    """A CUDA backend flag set or called, ``pass``, or ``name = <one of values>``."""
    if isinstance(stmt, cst.Pass):
        return True
    if isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.Call):
        return (rule.qualname(stmt.value.func) or "").startswith(_CUDA_SETTINGS)
    if isinstance(stmt, cst.Assign):
        targets = [t.target for t in stmt.targets]
        if all((rule.qualname(t) or "").startswith(_CUDA_SETTINGS) for t in targets):
            return True
        if isinstance(stmt.value, cst.Call) and (rule.qualname(stmt.value.func) or "").startswith(_CUDA_SETTINGS):
            return True  # `mode = torch.cuda.get_sync_debug_mode()`: a CUDA setting read to restore it
        return string_value(stmt.value) in values
    return False


def _inert(rule: Rule, side: cst.CSTNode, values: frozenset[str]) -> bool:
    """Whether one side of a guard (a block or a ternary's value) only holds CUDA
    backend flags or one of ``values`` (\"nccl\" on the CUDA side, \"gloo\" on the other)."""
    if isinstance(side, cst.BaseExpression):
        return string_value(side) in values
    stmts = block_statements(side)  # type: ignore[arg-type]
    if not stmts or isinstance(side, cst.IndentedBlock) and side.header.comment is not None:
        return False
    small = [s for stmt in stmts for s in small_statements(stmt)]
    return len(small) == len(stmts) and all(_inert_statement(rule, s, values) for s in small)


def _sides(node: Union[cst.If, cst.IfExp]) -> Optional[tuple[cst.CSTNode, Optional[cst.CSTNode]]]:
    """(what the test admits, what runs otherwise); None for an elif chain."""
    if isinstance(node, cst.IfExp):
        return node.body, node.orelse
    if isinstance(node.orelse, cst.If):
        return None
    return node.body, node.orelse.body if node.orelse is not None else None


def right_everywhere(rule: Rule, node: Union[cst.If, cst.IfExp], cuda_calls: list) -> bool:
    """A guard that is already right on every device: what it runs only with CUDA
    means nothing elsewhere (TF32 and cuDNN flags, "nccl"), and what it runs
    without CUDA is the fallback every other device wants ("gloo"); or a device
    choice whose fallback already picks MPS."""
    if isinstance(node, cst.IfExp):
        found = ternary(rule, node)
        if found is not None and names_mps(rule, found[1]):
            return True
    elif mps_statement_choice(rule, node):
        return True
    sides = _sides(node)
    polarity = True if cuda_calls else availability_test(rule, node.test)
    if sides is None or polarity is None:
        return False
    cuda, other = sides if polarity else (sides[1], sides[0])
    if cuda is None and other is None:
        return False
    return ((cuda is None or _inert(rule, cuda, _CUDA_VALUES) or _only_reraises(cuda))
            and (other is None or _inert(rule, other, _FALLBACK_VALUES)))


def _only_reraises(side: cst.CSTNode) -> bool:
    """A block that is a bare ``raise``, or that only composes a message and raises it: in a
    handler, what failed (a CUDA extension's import, TP604, TP608's Mask2Former handler)
    stays fatal where CUDA is, and nowhere else."""
    stmts = block_statements(side) if isinstance(side, cst.BaseSuite) else []
    small = [s for stmt in stmts for s in small_statements(stmt)]
    if not small or not isinstance(small[-1], cst.Raise):
        return False
    if len(small) == 1:
        return small[0].exc is None and len(stmts) == 1
    return all(isinstance(s, cst.Assign) and isinstance(s.value, (cst.SimpleString, cst.ConcatenatedString,
                                                                   cst.FormattedString)) for s in small[:-1])



class MpsCheck(cst.CSTVisitor):
    """Finds a call of ``torch.backends.mps.is_available()`` (by qualified name)."""

    def __init__(self, rule: Rule, scope: cst.CSTNode) -> None:
        self.rule = rule
        self.scope = scope
        self.found = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.scope or not isinstance(self.scope, cst.Module)  # the module's own code only

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return not isinstance(self.scope, cst.Module)

    def visit_Call(self, node: cst.Call) -> Optional[bool]:
        if self.rule.qualname(node.func) == "torch.backends.mps.is_available":
            self.found = True
        return not self.found


class TypeFlags(cst.CSTVisitor):
    """Names that are the test of an ``if`` or a ternary whose CUDA side names a legacy
    CUDA tensor type (``Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor``)."""

    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.rule = rule
        self.names: set[str] = set()

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._test(node.test, node.body)

    def visit_If(self, node: cst.If) -> None:
        self._test(node.test, node.body)

    def _test(self, test: cst.BaseExpression, body: cst.CSTNode) -> None:
        if isinstance(test, cst.Name) and _names_cuda_type(self.rule, body):
            self.names.add(test.value)


class _CudaTypes(cst.CSTVisitor):
    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.rule, self.found = rule, False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        name = self.rule.qualname(node)
        self.found = self.found or bool(name and name.startswith("torch.cuda.") and name.endswith("Tensor"))
        return not self.found


def _names_cuda_type(rule: Rule, node: cst.CSTNode) -> bool:
    finder = _CudaTypes(rule)
    node.visit(finder)
    return finder.found


#: Flags that turn on half precision (``opt.half``, ``use_fp16``, ``self.amp``).
_HALF_FLAG = re.compile(r"^(?:use_)?(?:half|fp16|amp|mixed_precision)$")


def is_half_flag(target: cst.BaseExpression) -> bool:
    name = target.attr.value if isinstance(target, cst.Attribute) else getattr(target, "value", "")
    return isinstance(name, str) and bool(_HALF_FLAG.match(name))


def and_chain(value: cst.BaseExpression) -> bool:
    """The availability answer itself, or ``and``-ed with other conditions: True only with CUDA."""
    if isinstance(value, cst.BooleanOperation):
        return isinstance(value.operator, cst.And) and and_chain(value.left) and and_chain(value.right)
    return not isinstance(value, (cst.UnaryOperation, cst.IfExp))


def unread_flag(rule: Rule, target: cst.BaseExpression) -> bool:
    """A flag nothing reads: ``rule.sync_cuda`` with no other ``.sync_cuda`` in the tree
    (porter.project.flags; this file alone without a project), or a name this file
    never reads and no other module imports."""
    source = rule.ctx.source
    if isinstance(target, cst.Attribute):
        name = target.attr.value
        if rule.ctx.project is not None:
            return name in rule.ctx.project.unread_flags
        return len(re.findall(rb"\." + re.escape(name.encode()) + rb"\b", source)) == 1
    if isinstance(target, cst.Name):
        name = target.value
        alone = len(re.findall(rb"(?<![\w.])" + re.escape(name.encode()) + rb"\b", source)) == 1
        return alone and (rule.ctx.project is None or not rule.ctx.project.read_elsewhere(rule.ctx.path, name))
    return False


def falls_back_to_cpu(rule: Rule, node) -> bool:
    """A device ternary whose other arm is the CPU (``torch.device(f"cuda:{r}" if
    torch.cuda.is_available() and args.cuda else "cpu")``): right, if slow, off CUDA."""
    if not isinstance(node, cst.IfExp) or availability_test(rule, node.test) is False:
        return False
    return is_fallback(rule, node.orelse, "str") or is_fallback(rule, node.orelse, "device")


def guard_calls(rule: Rule, test: cst.BaseExpression) -> list[cst.Call]:
    """The availability calls that are ``test`` or ``and`` operands of it."""
    if availability_test(rule, test):
        return [test]  # type: ignore[list-item]
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return guard_calls(rule, test.left) + guard_calls(rule, test.right)
    return []


def availability_calls(rule: Rule, test: cst.BaseExpression) -> list[cst.Call]:
    """The availability calls of ``test``, under a ``not``."""
    if isinstance(test, cst.UnaryOperation):
        return availability_calls(rule, test.expression)
    return guard_calls(rule, test)
