"""An availability check whose only job is to keep a question about CUDA's own hardware
off machines without CUDA (PT202's note)::

    if not torch.cuda.is_available() or torch.cuda.is_bf16_supported():
        return "bf16-mixed"
    use_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()

or as an early exit right before the query (``early_exit_shield``)::

    if not torch.cuda.is_available() or not flash:
        return
    device_properties = torch.cuda.get_device_properties(torch.device("cuda"))

The check is there so that the question about the CUDA device (bf16 support, the
capability, the properties, the name) is asked only where CUDA is. Without CUDA the
expression takes the path written for machines without CUDA, the one the CPU takes,
and that path runs on a Mac: nothing needs a human. (PT604 may rewrite the query to
``porter_runtime.is_bf16_supported()``, which is why that counts as a query too.)
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.conditions.availability_checks import availability_test
from porter.rulebase.rule import Rule
from porter.rulebase.walk import nodes_of

#: torch.cuda queries about the CUDA device itself, and the runtime's twins that porter
#: writes for some of them (a second run must read the ported check as the first did).
CUDA_QUERIES = frozenset(f"torch.cuda.{n}" for n in (
    "is_bf16_supported", "get_device_capability", "get_device_properties", "get_device_name",
    "get_arch_list", "mem_get_info", "device_count")) | frozenset(f"porter_runtime.{n}" for n in (
        "is_bf16_supported", "get_device_properties", "get_device_capability", "mem_get_info", "device_count"))


def shielded_check(rule: Rule, node: cst.BooleanOperation) -> Optional[cst.Call]:
    """The availability call of ``not is_available() or Q`` / ``is_available() and Q`` where
    ``Q`` asks CUDA about its device (a query, maybe compared or negated): the check only
    keeps ``Q`` from running without CUDA. None where the pattern is not that."""
    left = node.left
    negated = isinstance(node.operator, cst.Or)
    if not isinstance(node.operator, (cst.Or, cst.And)) or availability_test(rule, left) is not (not negated):
        return None
    if not _asks_cuda(rule, node.right):
        return None
    return left.expression if negated else left  # type: ignore[attr-defined, return-value]


def _asks_cuda(rule: Rule, node: cst.BaseExpression) -> bool:
    """``Q``: a CUDA query call, under ``not``, a comparison or a subscript (``[0] >= 8``)."""
    while True:
        if isinstance(node, cst.UnaryOperation):
            node = node.expression
        elif isinstance(node, cst.Comparison):
            node = node.left
        elif isinstance(node, (cst.Subscript, cst.Attribute)) and not isinstance(node.value, cst.Name):
            node = node.value
        else:
            break
    return isinstance(node, cst.Call) and rule.qualname(node.func) in CUDA_QUERIES


def early_exit_shield(rule: Rule, node: cst.If, following: Optional[cst.BaseStatement]) -> list[cst.Call]:
    """The availability calls of an early exit that only keeps the next statement's
    CUDA query off machines without CUDA (denoising-diffusion-pytorch's Attend)::

        if not torch.cuda.is_available() or not flash:
            return
        device_properties = torch.cuda.get_device_properties(torch.device("cuda"))

    Without CUDA the function ends where the CPU's ends. Only a bare ``return`` (or
    ``return None``), ``continue`` or ``break`` counts: a returned value or a ``raise``
    is a decision of its own."""
    if node.orelse is not None or following is None or not _bare_exit(node.body):
        return []
    calls = [operand.expression for operand in _or_operands(node.test)  # type: ignore[attr-defined]
             if availability_test(rule, operand) is False]
    if not calls:
        return []
    asks = any(rule.qualname(call.func) in CUDA_QUERIES for call in nodes_of(following, cst.Call))
    return calls if asks else []


def _bare_exit(body: cst.BaseSuite) -> bool:
    if isinstance(body, cst.IndentedBlock):
        if len(body.body) != 1 or not isinstance(body.body[0], cst.SimpleStatementLine):
            return False
        small = body.body[0].body
    else:
        small = body.body  # `if ...: return` on one line
    if len(small) != 1:
        return False
    exit_ = small[0]
    if isinstance(exit_, (cst.Continue, cst.Break)):
        return True
    return isinstance(exit_, cst.Return) and (
        exit_.value is None or (isinstance(exit_.value, cst.Name) and exit_.value.value == "None"))


def _or_operands(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return [*_or_operands(test.left), *_or_operands(test.right)]
    return [test]
