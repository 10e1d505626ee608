"""Reading ``torch.cuda.is_available()`` checks: which way a test points, and a
requirement (an ``assert``, an ``if not ...:`` or the ``else`` of an ``if ...:`` that
reports and stops the program).

Shared by the availability rules (PT2xx), which leave a requirement to PT903, and by
PT903, which ports it, so both read the same checks.
"""

from __future__ import annotations

import re
from typing import Optional, Union

import libcst as cst

from porter.rulebase.rule import Rule, string_value
from porter.rulebase.syntax import callee_name
from porter.rulebase.walk import nodes_of

IS_AVAILABLE = "torch.cuda.is_available"


def availability_test(rule: Rule, test: cst.BaseExpression) -> Optional[bool]:
    """True for ``torch.cuda.is_available()``, False for ``not torch.cuda.is_available()``."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = availability_test(rule, test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.Call) and not test.args and rule.matches(test.func, IS_AVAILABLE):
        return True
    return None


# A requirement: ``assert torch.cuda.is_available()`` or ``if not torch.cuda.is_available():``
# whose body only reports and then stops the program (PT903 rewrites both).
_STOPS = frozenset({"sys.exit", "os._exit"})
_REPORTS = frozenset({"print", "warn", "warning", "error", "critical", "info", "exception", "fatal"})


def _literal(node: Optional[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    """The message to keep: a string literal as it is; a formatted one (f-string,
    ``"...".format(...)``, ``"..." % x``) as a lambda, because the original evaluated
    it only when the requirement failed, and on CUDA it must still not be evaluated."""
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)) and string_value(node):
        return node
    formatted = isinstance(node, cst.FormattedString) or (
        isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format"
        and string_value(node.func.value) is not None) or (
        isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)
        and string_value(node.left) is not None)
    return cst.Lambda(params=cst.Parameters(), body=node) if formatted else None


def _first_literal(call: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    if isinstance(call, cst.Call) and call.args and call.args[0].keyword is None:
        return _literal(call.args[0].value)
    return None


def _stop_message(rule: Rule, stmt: cst.BaseSmallStatement) -> Optional[tuple[Optional[cst.BaseExpression]]]:
    """(message or None,) for ``raise E("...")`` / ``sys.exit("...")`` / ``exit(1)``; else None."""
    if isinstance(stmt, cst.Raise) and stmt.exc is not None:
        return (_first_literal(stmt.exc),)
    if isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.Call):
        func = stmt.value.func
        builtin = isinstance(func, cst.Name) and func.value in ("exit", "quit") and rule.qualname(func) is None
        if builtin or rule.matches(func, *_STOPS):
            return (_first_literal(stmt.value),)
    return None


def _is_report(stmt: cst.BaseSmallStatement) -> bool:
    """``print(...)``, ``logger.error(...)``, ``warnings.warn(...)``: a line that only reports."""
    if not isinstance(stmt, cst.Expr) or not isinstance(stmt.value, cst.Call):
        return False
    return callee_name(stmt.value.func) in _REPORTS


def requirement(rule: Rule, node: Union[cst.Assert, cst.If]) -> Optional[tuple[Optional[cst.BaseExpression]]]:
    """(the original's message or None,) when ``node`` only requires CUDA, else None."""
    if isinstance(node, cst.Assert):
        return (_literal(node.msg),) if availability_test(rule, node.test) is True else None
    if availability_test(rule, node.test) is not False or node.orelse is not None:
        return None
    return _reports_then_stops(rule, node.body)


def flag_requirement(rule: Rule, node: cst.If) -> Optional[tuple[Optional[cst.BaseExpression]]]:
    """(message or None,) for ``if not HAS_CUDA: raise ...`` where ``HAS_CUDA`` is the
    module's own availability flag (``module_flags``): a requirement read through it."""
    test = node.test
    if node.orelse is not None or not (isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
                                       and isinstance(test.expression, cst.Name)):
        return None
    if test.expression.value not in module_flags(rule):
        return None
    return _reports_then_stops(rule, node.body)


def module_flags(rule: Rule) -> frozenset[str]:
    """The module's availability flags: names bound once, at its top level, to
    ``torch.cuda.is_available()`` (``HAS_CUDA = torch.cuda.is_available()``) and never
    rebound (no other assignment, ``global`` or ``del`` of them in the file, and no
    parameter, loop or ``as`` target of that name)."""
    module = rule.ctx.module
    cached = getattr(rule, "_module_flags", None)
    if cached is not None and cached[0] is module:
        return cached[1]
    flags: set[str] = set()
    if b"is_available" in rule.ctx.source:
        for stmt in module.body:
            line = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            if (isinstance(line, cst.Assign) and len(line.targets) == 1 and isinstance(line.targets[0].target, cst.Name)
                    and availability_test(rule, line.value) is True):
                name = line.targets[0].target.value
                word = re.escape(name.encode())
                binds = rb"(?<![\w.])" + word + rb"\s*(?::[^=\n]*)?(?:=(?!=)|[-+*/|&]=)"
                # rebound elsewhere, or a name of its own in a function (a parameter, a loop
                # or `as` target): not the module's flag there, so none at all
                other = rb"\b(?:global|nonlocal|del|for|as|import|lambda)\b[^\n]*\b" + word + rb"\b|\bdef\s+\w+\s*\([^)]*\b" + word + rb"\b"
                if len(re.findall(binds, rule.ctx.source)) == 1 and not re.search(other, rule.ctx.source):
                    flags.add(name)
    found = frozenset(flags)
    rule._module_flags = (module, found)  # type: ignore[attr-defined]
    return found


def only_required(rule: Rule, name: str) -> bool:
    """Whether every read of the module flag ``name`` in this file is a requirement
    (``if not name: raise ...``), which PT903 ports."""
    source = rule.ctx.source
    uses = len(re.findall(rb"(?<![\w.])" + re.escape(name.encode()) + rb"\b", source))
    required = sum(1 for node in nodes_of(rule.ctx.module, cst.If)
                   if isinstance(node.test, cst.UnaryOperation) and isinstance(node.test.expression, cst.Name)
                   and node.test.expression.value == name and flag_requirement(rule, node) is not None)
    return required > 0 and uses == 1 + required


def else_requirement(rule: Rule, node: cst.If) -> Optional[tuple[Optional[cst.BaseExpression]]]:
    """(message or None,) for ``if torch.cuda.is_available(): ... else: <report and stop>``:
    the ``else`` only requires CUDA (dino's ``elif torch.cuda.is_available(): <one-GPU
    setup> else: print("Does not support training without GPU."); sys.exit(1)``)."""
    if availability_test(rule, node.test) is not True or not isinstance(node.orelse, cst.Else):
        return None
    return _reports_then_stops(rule, node.orelse.body)


def else_stops(rule: Rule, node: cst.If) -> bool:
    """Whether the ``else`` of ``if <test>:`` only reports and stops the program, whatever
    the test (Deformable-DETR's ``setup.py``: ``else: raise NotImplementedError(...)``), or
    holds one ``if`` whose every branch does (Mask2Former's copy: ``if CUDA_HOME is None:
    raise ...`` / ``else: raise ...``)."""
    return isinstance(node.orelse, cst.Else) and _stops_everywhere(rule, node.orelse.body)


def _stops_everywhere(rule: Rule, body: cst.BaseSuite) -> bool:
    if _reports_then_stops(rule, body) is not None:
        return True
    if not isinstance(body, cst.IndentedBlock) or len(body.body) != 1 or not isinstance(body.body[0], cst.If):
        return False
    inner: cst.If = body.body[0]
    while True:
        if not _stops_everywhere(rule, inner.body):
            return False
        if isinstance(inner.orelse, cst.Else):
            return _stops_everywhere(rule, inner.orelse.body)
        if not isinstance(inner.orelse, cst.If):
            return False  # no else: the program goes on when no branch is taken
        inner = inner.orelse


def _reports_then_stops(rule: Rule, body: cst.BaseSuite) -> Optional[tuple[Optional[cst.BaseExpression]]]:
    """(message or None,) when ``body`` only reports and then stops the program."""
    if not isinstance(body, cst.IndentedBlock) or body.header.comment is not None or any(l.comment for l in body.footer):
        return None
    small = []
    for stmt in body.body:
        if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
            return None
        if stmt.trailing_whitespace.comment is not None or any(l.comment for l in stmt.leading_lines):
            return None
        small.append(stmt.body[0])
    stop = _stop_message(rule, small[-1]) if small else None
    if stop is None or not all(_is_report(s) for s in small[:-1]):
        return None
    return stop if stop[0] is not None else (next(filter(None, (_first_literal(s.value) for s in small[:-1])), None),)
