"""Device counts the code itself tests against 0: the count is a test for CUDA there.

``torch.cuda.device_count()`` compared with 0 is a test for CUDA (PT104 leaves it as
written). The comparison is often a step away: the count goes to a name, and the name
to a helper of the same module that compares it (detectron2's demo)::

    num_gpu = torch.cuda.device_count()
    self.predictor = AsyncPredictor(cfg, num_gpus=num_gpu)
    ...
    class AsyncPredictor:
        def __init__(self, cfg, num_gpus: int = 1):
            ...
            cfg.MODEL.DEVICE = "cuda:{}".format(gpuid) if num_gpus > 0 else "cpu"

Off CUDA the original count, 0, takes the code's own CPU path; the runtime's count (1)
would ask for ``cuda:0``. A count is such a test when, in its own function (or the
module), the name it is assigned to is compared with 0 or 1 (``n > 0``, ``n == 0``,
``n < 1``, ``if n:``, ``not n``), or is passed (by position or keyword) to a function or
class of the module whose parameter is. One step only: a helper that hands the count on
again is not followed.
"""

from __future__ import annotations

from typing import Iterator, Optional, Union

import libcst as cst

from porter.rulebase.syntax import int_value
from porter.rulebase.walk import nodes_of

Scope = Union[cst.Module, cst.FunctionDef]


def zero_test(node: cst.CSTNode, name: str) -> bool:
    """``name`` compared with 0 or 1 as a count of devices is (``== 0``, ``> 0``, ``< 1``, ...)."""
    if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
        return False
    target = node.comparisons[0]
    op, right = type(target.operator), int_value(target.comparator)
    if right is None or not (isinstance(node.left, cst.Name) and node.left.value == name):
        return False
    return (right == 0 and op in (cst.Equal, cst.NotEqual, cst.GreaterThan, cst.LessThanEqual)
            or right == 1 and op in (cst.LessThan, cst.GreaterThanEqual))


def _truth_tested(scope: cst.CSTNode, name: str) -> bool:
    """``if n:``, ``while n``, ``a if n else b``, ``not n``, ``n and ...``."""
    for node in nodes_of(scope, (cst.If, cst.While, cst.IfExp)):
        if isinstance(node.test, cst.Name) and node.test.value == name:
            return True
    for node in nodes_of(scope, cst.UnaryOperation):
        if isinstance(node.operator, cst.Not) and isinstance(node.expression, cst.Name) and node.expression.value == name:
            return True
    return False


def tested(scope: cst.CSTNode, name: str) -> bool:
    return any(zero_test(c, name) for c in nodes_of(scope, cst.Comparison)) or _truth_tested(scope, name)


def _defs(module: cst.Module) -> dict[str, cst.FunctionDef]:
    """Module-level functions by name, and each class's ``__init__`` by the class's name."""
    found: dict[str, cst.FunctionDef] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef):
            found[stmt.name.value] = stmt
        elif isinstance(stmt, cst.ClassDef):
            init = next((s for s in stmt.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"),
                        None)
            if init is not None:
                found[stmt.name.value] = init
    return found


def _parameter(function: cst.FunctionDef, call: cst.Call, arg: cst.Arg) -> Optional[str]:
    """The parameter of ``function`` that ``arg`` of ``call`` binds (``self`` skipped for ``__init__``)."""
    if arg.keyword is not None:
        return arg.keyword.value
    if arg.star:
        return None
    params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
    if function.name.value == "__init__":
        params = params[1:]
    index = [a for a in call.args if a.keyword is None].index(arg)
    return params[index] if index < len(params) else None


def _passed_to_test(scope: cst.CSTNode, defs: dict[str, cst.FunctionDef], is_value) -> bool:
    """A call in ``scope`` to a function or class of the module passes a value ``is_value``
    accepts to a parameter that function tests against 0."""
    for call in nodes_of(scope, cst.Call):
        callee = call.func.value if isinstance(call.func, cst.Name) else None
        function = defs.get(callee or "")
        if function is None:
            continue
        for arg in call.args:
            if is_value(arg.value):
                name = _parameter(function, call, arg)
                if name and tested(function.body, name):
                    return True
    return False


def _assignments(scope: Scope) -> Iterator[cst.Assign]:
    """The assignments of a function (its nested blocks too), or the module's own lines."""
    if isinstance(scope, cst.FunctionDef):
        yield from nodes_of(scope.body, cst.Assign)
        return
    for stmt in scope.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            yield from (s for s in stmt.body if isinstance(s, cst.Assign))


def _scopes(module: cst.Module) -> Iterator[Scope]:
    yield module
    yield from nodes_of(module, cst.FunctionDef)


def tested_counts(module: cst.Module, is_count) -> set[cst.Call]:
    """The count calls (``is_count(call)``) whose value the module tests against 0 one step
    away: through the name it is assigned to, or a parameter of the module's own helper."""
    calls = [c for c in nodes_of(module, cst.Call) if is_count(c)]
    if not calls:
        return set()
    defs = _defs(module)
    found: set[cst.Call] = set()
    wanted = set(calls)
    for scope in _scopes(module):
        body = scope.body
        for assign in _assignments(scope):
            if assign.value in wanted and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                name = assign.targets[0].target.value
                if tested(body, name) or _passed_to_test(
                        body, defs, lambda v, n=name: isinstance(v, cst.Name) and v.value == n):
                    found.add(assign.value)
    if defs:
        for call in calls:
            if call not in found and _passed_to_test(module, defs, lambda v, c=call: v is c):
                found.add(call)
    return found
