"""The device a ``torch.cuda.is_available()`` choice picks (PT201, PT202): ``"cuda" if
available else "cpu"``, as an expression or as an ``if`` statement, and the test that
asks for any accelerator instead."""

from __future__ import annotations

from typing import Optional, Union

import libcst as cst

from porter.rulebase.conditions.availability_checks import availability_test
from porter.rulebase.rule import Rule, cuda_spec, string_value

_FALLBACKS = frozenset({"cpu", "mps", "xpu"})

# A device choice: ("str" | "device", CUDA index or None).
Choice = tuple[str, Optional[int]]


def torch_device_arg(rule: Rule, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The one argument of ``torch.device(x)``."""
    if (isinstance(node, cst.Call) and len(node.args) == 1 and node.args[0].keyword is None
            and not node.args[0].star and rule.matches(node.func, "torch.device")):
        return node.args[0].value
    return None


def _cuda_value(rule: Rule, node: cst.BaseExpression) -> Optional[Choice]:
    """``"cuda[:i]"`` → ("str", i); ``torch.device("cuda[:i]")`` → ("device", i)."""
    spec = cuda_spec(node)
    if spec is not None:
        return ("str", spec[0])
    inner = torch_device_arg(rule, node)
    spec = cuda_spec(inner) if inner is not None else None
    return ("device", spec[0]) if spec is not None else None


def is_fallback(rule: Rule, node: cst.BaseExpression, kind: str) -> bool:
    """A non-CUDA device of the same kind ("cpu", torch.device("mps")...), or a ternary of them."""
    if isinstance(node, cst.IfExp):
        return is_fallback(rule, node.body, kind) and is_fallback(rule, node.orelse, kind)
    if kind == "device":
        inner = torch_device_arg(rule, node)
        return inner is not None and string_value(inner) in _FALLBACKS
    return string_value(node) in _FALLBACKS


def names_mps(rule: Rule, node: cst.BaseExpression) -> bool:
    """Whether a fallback (or a chain of them) already picks MPS somewhere."""
    if isinstance(node, cst.IfExp):
        return names_mps(rule, node.body) or names_mps(rule, node.orelse)
    inner = torch_device_arg(rule, node)
    return string_value(inner if inner is not None else node) == "mps"


def ternary(rule: Rule, node: cst.IfExp) -> Optional[tuple[Choice, cst.BaseExpression]]:
    """The CUDA choice of a ``cuda if torch.cuda.is_available() else cpu`` ternary, and its fallback."""
    polarity = availability_test(rule, node.test)
    if polarity is None:
        return None
    cuda, other = (node.body, node.orelse) if polarity else (node.orelse, node.body)
    choice = _cuda_value(rule, cuda)
    return (choice, other) if choice is not None and is_fallback(rule, other, choice[0]) else None


def ternary_choice(rule: Rule, node: cst.IfExp) -> Optional[Choice]:
    """The device choice a ``cuda if torch.cuda.is_available() else cpu`` ternary makes,
    unless its fallback already picks MPS (then it is right on a Mac as written)."""
    found = ternary(rule, node)
    return found[0] if found is not None and not names_mps(rule, found[1]) else None


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of an ``a and b and c`` chain (one operand for anything else)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) and not test.lpar:
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


def gated_choice(rule: Rule, node: cst.IfExp) -> Optional[Choice]:
    """``"cuda" if torch.cuda.is_available() and args.cuda else "cpu"``: the CUDA choice of
    a ternary whose test is an ``and`` of the availability call and other conditions."""
    operands = _conjuncts(node.test)
    found = [i for i, operand in enumerate(operands) if availability_test(rule, operand) is True]
    if len(operands) < 2 or len(found) != 1:
        return None
    choice = _cuda_value(rule, node.body)
    if choice is None or not is_fallback(rule, node.orelse, choice[0]) or names_mps(rule, node.orelse):
        return None
    return choice


def accelerator_test(rule: Rule, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
    """``updated`` with the availability call(s) swapped for the runtime's, walking ``and``
    in step with ``original``."""
    if availability_test(rule, original):
        return rule.runtime_call("is_accelerator_available").with_changes(lpar=updated.lpar, rpar=updated.rpar)
    if (isinstance(original, cst.BooleanOperation) and isinstance(original.operator, cst.And)
            and isinstance(updated, cst.BooleanOperation)):
        return updated.with_changes(left=accelerator_test(rule, original.left, updated.left),
                                    right=accelerator_test(rule, original.right, updated.right))
    return updated


def _lone_assign(block: cst.BaseSuite) -> Optional[cst.Assign]:
    """The single one-target assignment of a block with no comments, else None."""
    if not isinstance(block, cst.IndentedBlock) or block.header.comment is not None:
        return None
    if len(block.body) != 1 or any(line.comment for line in block.footer):
        return None
    stmt = block.body[0]
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    if stmt.trailing_whitespace.comment is not None or any(line.comment for line in stmt.leading_lines):
        return None
    assign = stmt.body[0]
    return assign if isinstance(assign, cst.Assign) and len(assign.targets) == 1 else None


def _branch_values(node: Union[cst.If, cst.Else, None]) -> Optional[list[tuple[cst.Assign, cst.BaseExpression]]]:
    """Each branch's (assignment, test) of an if/elif/else chain of lone assignments."""
    out: list[tuple[cst.Assign, cst.BaseExpression]] = []
    while node is not None:
        if out and any(line.comment for line in node.leading_lines):
            return None  # a comment above elif/else would be lost (the first one is kept)
        assign = _lone_assign(node.body)
        if assign is None:
            return None
        out.append((assign, node.test if isinstance(node, cst.If) else cst.Name("True")))
        node = node.orelse if isinstance(node, cst.If) else None
    return out


def _statement(rule: Rule, node: cst.If) -> Optional[tuple[cst.Assign, Choice, list[cst.BaseExpression]]]:
    """``if torch.cuda.is_available(): d = "cuda" else: d = "cpu"``: the CUDA branch's
    assignment, the choice it makes and the fallback values."""
    polarity = availability_test(rule, node.test)
    branches = _branch_values(node) if polarity is not None else None
    if not branches or len(branches) < 2:
        return None
    if polarity:
        cuda, others = branches[0][0], [a for a, _ in branches[1:]]
    elif len(branches) == 2:
        cuda, others = branches[1][0], [branches[0][0]]
    else:
        return None
    choice = _cuda_value(rule, cuda.value)
    if choice is None:
        return None
    target = cuda.targets[0].target
    for other in others:
        if not other.targets[0].target.deep_equals(target) or not is_fallback(rule, other.value, choice[0]):
            return None
    return cuda, choice, [other.value for other in others]


def statement_choice(rule: Rule, node: cst.If) -> Optional[tuple[cst.Assign, Choice]]:
    """The statement form's CUDA assignment and choice, unless a fallback already
    picks MPS (then it is right on a Mac as written)."""
    found = _statement(rule, node)
    if found is None or any(names_mps(rule, value) for value in found[2]):
        return None
    return found[0], found[1]


def mps_statement_choice(rule: Rule, node: cst.If) -> bool:
    """A statement-form device choice that already picks MPS."""
    found = _statement(rule, node)
    return found is not None and any(names_mps(rule, value) for value in found[2])

