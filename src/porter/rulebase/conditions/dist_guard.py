"""An availability guard that keeps a process out of distributed setup:
``if not torch.cuda.is_available(): return`` before ``init_process_group``.

Shared by PT304 (which ports the guard) and PT202 (which leaves it to PT304), so both
see the same guards.
"""

from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from porter.rulebase.conditions.availability_checks import IS_AVAILABLE
from porter.rulebase.syntax import block_statements

INIT = frozenset({"torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group",
                  "porter_runtime.init_process_group"})
#: What the port adds next to the availability test.
LAUNCH = "porter_runtime.is_multiprocess_launch"


def negated_availability(rule, node: cst.BaseExpression) -> Optional[cst.Call]:
    """The call of ``not torch.cuda.is_available()``, else None."""
    if not isinstance(node, cst.UnaryOperation) or not isinstance(node.operator, cst.Not):
        return None
    call = node.expression
    if isinstance(call, cst.Call) and not call.args and rule.matches(call.func, IS_AVAILABLE):
        return call
    return None


def _is_ported(rule, node: cst.BaseExpression) -> bool:
    """``not torch.cuda.is_available() and not porter_runtime.is_multiprocess_launch()``."""
    if not isinstance(node, cst.BooleanOperation) or not isinstance(node.operator, cst.And):
        return False
    right = node.right
    return (negated_availability(rule, node.left) is not None and isinstance(right, cst.UnaryOperation)
            and isinstance(right.expression, cst.Call) and rule.matches(right.expression.func, LAUNCH) is not None)


def guard_operands(rule, test: cst.BaseExpression) -> Iterator[tuple[cst.BaseExpression, bool]]:
    """The test itself, or the operands of its top-level ``or`` chain, that are
    ``not torch.cuda.is_available()`` (False) or already ported (True)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        yield from guard_operands(rule, test.left)
        yield from guard_operands(rule, test.right)
    elif negated_availability(rule, test) is not None:
        yield test, False
    elif _is_ported(rule, test):
        yield test, True


def _returns(body: cst.BaseSuite) -> bool:
    statements = block_statements(body)
    if not statements or not isinstance(statements[-1], cst.SimpleStatementLine):
        return False
    return isinstance(statements[-1].body[-1], cst.Return)


def _elifs_return(orelse: Optional[cst.CSTNode]) -> bool:
    """No ``elif`` / ``else``, or a chain of ``elif`` branches that each return too (VAR's
    ``if not torch.cuda.is_available(): return`` / ``elif "RANK" not in os.environ:
    ... return``): the setup after the chain is what a launch reaches."""
    while isinstance(orelse, cst.If):
        if not _returns(orelse.body):
            return False
        orelse = orelse.orelse
    return orelse is None


class _InitCall(cst.CSTVisitor):
    def __init__(self, rule) -> None:
        self.rule = rule
        self.found = False

    def visit_Call(self, node: cst.Call) -> Optional[bool]:
        if self.rule.matches(node.func, *INIT):
            self.found = True
        return not self.found


class _Guards(cst.CSTVisitor):
    """Each ``if`` whose availability test returns early ahead of a later
    ``init_process_group`` in the same block."""

    def __init__(self, rule) -> None:
        self.rule = rule
        self.found: set[int] = set()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._scan(node.body)

    def _scan(self, body) -> None:
        for i, stmt in enumerate(body):
            if (isinstance(stmt, cst.If) and _returns(stmt.body) and _elifs_return(stmt.orelse)
                    and any(True for _ in guard_operands(self.rule, stmt.test)) and self._inits(body[i + 1:])):
                self.found.add(id(stmt))

    def _inits(self, statements) -> bool:
        finder = _InitCall(self.rule)
        for stmt in statements:
            stmt.visit(finder)
        return finder.found


def distributed_guards(rule) -> set[int]:
    """ids of the (original) ``if`` statements that skip distributed setup off CUDA."""
    if b"init_process_group" not in rule.ctx.source:  # every name in INIT ends so, however imported
        return set()
    visitor = _Guards(rule)
    rule.ctx.module.visit(visitor)
    return visitor.found
