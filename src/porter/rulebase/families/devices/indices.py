"""Expressions whose value is a CUDA index (PT901's sources; TP702 reads them too)."""

from __future__ import annotations

import re

import libcst as cst

from porter.rulebase.rule import Rule, string_value

#: Calls whose result is a CUDA index: the current device, and (as `rank % n`) the count.
CURRENT = frozenset({"torch.cuda.current_device", "porter_runtime.current_device"})
COUNT = frozenset({"torch.cuda.device_count", "porter_runtime.device_count"})
#: The launcher's variable: `int(os.environ["LOCAL_RANK"])` is a CUDA index.
LOCAL_RANK = re.compile(r"LOCAL_RANK")


def index_source(rule: Rule, node: cst.BaseExpression) -> bool:
    """An expression whose value is a CUDA index: `torch.cuda.current_device()` (or
    its runtime twin), `rank % torch.cuda.device_count()`, `int(os.environ["LOCAL_RANK"])`."""
    if isinstance(node, cst.Call):
        if rule.matches(node.func, *CURRENT):
            return True
        if isinstance(node.func, cst.Name) and node.func.value == "int" and len(node.args) == 1:
            inner = node.args[0].value
            if isinstance(inner, cst.BooleanOperation) and isinstance(inner.operator, cst.Or):
                inner = inner.left  # `int(os.environ.get("LOCAL_RANK") or 0)`
            key = inner.slice[0].slice if isinstance(inner, cst.Subscript) and len(inner.slice) == 1 else None
            key = key.value if isinstance(key, cst.Index) else (
                inner.args[0].value if isinstance(inner, cst.Call) and inner.args else None)
            text = string_value(key) if key is not None else None
            return text is not None and bool(LOCAL_RANK.search(text))
        return False
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        right = node.right
        return isinstance(right, cst.Call) and rule.matches(right.func, *COUNT) is not None
    return False
