"""LibCST syntax helpers the rules share: a call's arguments, statements in a block,
literals, and values that name the CUDA device. Each is defined here once; rule modules
import from here, never from one another (house rule 12)."""

from __future__ import annotations

import re

from typing import Iterator, Optional, Sequence

import libcst as cst

from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import RUNTIME, cuda_spec, keyword, positional, string_value

#: ``kw=value`` with no spaces, as PEP 8 writes keyword arguments.
EQ = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


def argument(call: cst.Call, name: str, index: Optional[int] = None) -> Optional[cst.Arg]:
    """The argument bound to parameter ``name`` (keyword, or positional ``index``).

    None when it is not passed, or when ``*args`` before ``index`` hide where it is.
    """
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    if index is None:
        return None
    for i, arg in enumerate(call.args):
        if arg.star or arg.keyword is not None:
            return None
        if i == index:
            return arg
    return None


def int_value(node: cst.BaseExpression) -> Optional[int]:
    """The value of a plain integer literal (``4``, ``-1``), else None."""
    if isinstance(node, cst.Integer):
        return int(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        inner = int_value(node.expression)
        return None if inner is None else -inner
    return None


def is_main_guard(test: cst.BaseExpression) -> bool:
    """``__name__ == "__main__"`` (either side)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.Equal):
        return False
    sides = (test.left, target.comparator)
    names = [s for s in sides if isinstance(s, cst.Name) and s.value == "__name__"]
    strings = [s for s in sides if string_value(s) == "__main__"]
    return len(names) == 1 and len(strings) == 1


def block_statements(block: cst.BaseSuite) -> Sequence[cst.BaseStatement]:
    """The statements of an indented block or of a one-line suite."""
    if isinstance(block, cst.IndentedBlock):
        return block.body
    return [cst.SimpleStatementLine(body=block.body)] if isinstance(block, cst.SimpleStatementSuite) else []


def small_statements(stmt: cst.BaseStatement) -> Iterator[cst.BaseSmallStatement]:
    """The small statements (assignments, expressions...) of a simple statement line."""
    if isinstance(stmt, cst.SimpleStatementLine):
        yield from stmt.body


def is_runtime_call(rule, node: cst.BaseExpression) -> bool:
    """``porter_runtime.<anything>(...)``: already ported, so a second run leaves it."""
    if not isinstance(node, cst.Call):
        return False
    name = rule.qualname(node.func)
    return name is not None and name.startswith("porter_runtime.")


def runtime_call_of(node: cst.BaseExpression) -> Optional[str]:
    """``X`` for ``porter_runtime.X(...)`` as the rules write it (a rewrite of this run,
    which has no metadata to resolve), else None."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        base = node.func.value
        if isinstance(base, cst.Name) and base.value == RUNTIME:
            return node.func.attr.value
    return None


def literal_is(node: cst.BaseExpression, *names: str) -> bool:
    """Whether ``node`` is one of the named constants (``True``, ``False``, ``None``)."""
    return isinstance(node, cst.Name) and node.value in names


def is_none(node: cst.BaseExpression) -> bool:
    return literal_is(node, "None")


def is_true(node: cst.BaseExpression) -> bool:
    return literal_is(node, "True")


def replace_arg(call: cst.Call, arg: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    """``call`` with ``arg`` (one of its arguments) given a new value."""
    return call.with_changes(args=[a.with_changes(value=value) if a is arg else a for a in call.args])


def with_arg(call: cst.Call, new: cst.Arg) -> cst.Call:
    """``call`` with ``new`` appended, in the style of its existing arguments."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[new])
    last = args[-1]
    if isinstance(last.comma, cst.Comma):  # a trailing comma: one argument a line
        gap = call.whitespace_before_args
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=gap))
        return call.with_changes(args=[*args, new.with_changes(comma=last.comma)])
    args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, new])


def index_args(index: Optional[int]) -> list[cst.BaseExpression]:
    """The arguments of ``porter_runtime.device(i)``: ``[i]``, or none for no index."""
    return [] if index is None else [cst.Integer(str(index))]


def is_device_expr(rule, node: cst.BaseExpression) -> bool:
    """A value that visibly names the CUDA / runtime device: ``"cuda:1"``,
    ``f"cuda:{rank}"``, ``torch.cuda.current_device()`` (an index of the current CUDA
    device), ``torch.device("cuda", ...)`` or ``porter_runtime.device(...)``. The f-string and
    the index become ``porter_runtime.device(...)`` in the same pass, so a rule that asks
    here sees the same device on the first run as on a second (Megatron-LM's
    ``dtype=torch.bfloat16, device=torch.cuda.current_device()``, blind round 8)."""
    if cuda_spec(node) is not None:
        return True
    if isinstance(node, cst.FormattedString):
        head = node.parts[0] if node.parts else None
        return isinstance(head, cst.FormattedStringText) and re.match(r"cuda(:|$)", head.value) is not None
    if not isinstance(node, cst.Call):
        return False
    name = rule.qualname(node.func)
    if name in (f"{RUNTIME}.device", "torch.cuda.current_device"):
        return True
    first = node.args[0] if node.args else keyword(node, "type")
    return name == "torch.device" and first is not None and cuda_spec(first.value) is not None


def is_device_move(rule, node: cst.BaseExpression) -> bool:
    """``x.cuda(...)``, or ``x.to(...)`` with a device that :func:`is_device_expr`."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    if rule.qualname(node.func.value) is not None:
        return False  # ``mylib.cuda()``: a module's function, not a method
    method = node.func.attr.value
    if method == "cuda":
        return True
    if method != "to":
        return False
    device = keyword(node, "device")
    given = positional(node)
    candidates = [device] if device is not None else given[:1]
    return any(is_device_expr(rule, a.value) for a in candidates)


class DeviceMoves:
    """Mixed into a rule (before ``Rule``): records, while visiting, each call whose
    result a device move receives (the cast in ``x.to(torch.float64).cuda()``), so the
    rule can ask :meth:`beside_device_move` when it leaves the call."""

    def __init__(self, ctx) -> None:
        super().__init__(ctx)  # type: ignore[call-arg]
        self._moved: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        if is_device_move(self, node):
            self._moved.add(id(node.func.value))  # type: ignore[attr-defined]

    def beside_device_move(self, call: cst.Call) -> bool:
        """Whether a device move receives ``call``'s result, or ``call`` is a method of
        one (``x.cuda().to(torch.float64)``)."""
        func = call.func
        return id(call) in self._moved or (isinstance(func, cst.Attribute) and is_device_move(self, func.value))


def argument_pair(original: cst.Call, updated: cst.Call, name: str,
                  index: Optional[int] = None) -> tuple[Optional[cst.Arg], Optional[cst.Arg]]:
    """:func:`argument` in the original call (for name resolution) and the same
    argument in the updated one (to build on)."""
    found = argument(original, name, index)
    if found is None or len(original.args) != len(updated.args):
        return None, None
    return found, updated.args[list(original.args).index(found)]


def callee_name(func: cst.BaseExpression) -> str:
    """The last name of what a call calls (``is_flash_v2_installed``, ``attention.has_flash``), or ""."""
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""


def bound_names(node: cst.CSTNode) -> list[str]:
    """The names an import statement binds (``import a.b`` binds ``a``)."""
    if not isinstance(node, (cst.Import, cst.ImportFrom)) or isinstance(node.names, cst.ImportStar):
        return []
    found = []
    for alias in node.names:
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            found.append(alias.asname.name.value)
        else:
            name = dotted_name(alias.name) or ""
            found.append(name.split(".")[0] if isinstance(node, cst.Import) else name)
    return found


def hides_gpus(value: str) -> bool:
    """``CUDA_VISIBLE_DEVICES`` set to hide every GPU (to force the CPU): empty or -1."""
    return value.strip("\"'") in ("", "-1")
