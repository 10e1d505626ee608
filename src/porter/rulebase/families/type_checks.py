"""Classes a function only tests against: ``isinstance(module, cls)``.

qlora's ``find_all_linear_names`` picks a class and only asks whether modules are of it::

    def find_all_linear_names(args, model):
        cls = bnb.nn.Linear4bit if args.bits == 4 else (bnb.nn.Linear8bitLt if args.bits == 8 else torch.nn.Linear)
        for name, module in model.named_modules():
            if isinstance(module, cls):
                ...

No kernel runs there: a type test reads the class, it builds nothing. A rule that reports
what a CUDA-only class *does* mixes :class:`TypeCheckUses` in and calls
:meth:`defer_reference` for a reference that is not called; at the end of the enclosing
function (or module) :meth:`on_reference` learns whether the reference is only a type
test's class: the second argument of ``isinstance``/``issubclass`` (or an element of its
tuple), or the value (an arm of a ternary) of a name whose every other use in the scope
is such an argument. ``layer = cls(64, 64)``, or the name handed on, keeps it a use.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

import libcst as cst

_TESTS = ("isinstance", "issubclass")


class TypeCheckUses:
    """Mixin for LibCST rules (see the module docstring)."""

    def _tc(self) -> dict:
        state = self.__dict__.get("_porter_type_checks")
        if state is None:
            state = self.__dict__["_porter_type_checks"] = {
                "scopes": [[]], "names": [Counter()], "tested": [Counter()], "direct": set(), "bound": {}}
        return state

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        state = self._tc()
        state["scopes"].append([])
        state["names"].append(Counter())
        state["tested"].append(Counter())
        parent = getattr(super(), "visit_FunctionDef", None)
        if parent is not None:
            parent(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._settle()
        parent = getattr(super(), "leave_FunctionDef", None)
        return parent(original, updated) if parent is not None else updated

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        self._settle()
        parent = getattr(super(), "leave_Module", None)
        return parent(original, updated) if parent is not None else updated

    def visit_Call(self, node: cst.Call) -> Optional[bool]:
        if isinstance(node.func, cst.Name) and node.func.value in _TESTS and len(node.args) >= 2:
            state = self._tc()
            value = node.args[1].value
            values = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
            for item in values:
                state["direct"].add(id(item))
                if isinstance(item, cst.Name):
                    state["tested"][-1][item.value] += 1
        return super().visit_Call(node)  # type: ignore[misc]

    def visit_Name(self, node: cst.Name) -> Optional[bool]:
        self._tc()["names"][-1][node.value] += 1
        return super().visit_Name(node)  # type: ignore[misc]

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            name = node.targets[0].target.value
            for arm in _arms(node.value):
                self._tc()["bound"][id(arm)] = name

    def defer_reference(self, node: cst.BaseExpression, name: str) -> None:
        self._tc()["scopes"][-1].append((node, name))

    def on_reference(self, node: cst.BaseExpression, name: str, type_test_only: bool) -> None:
        raise NotImplementedError

    def _settle(self) -> None:
        state = self._tc()
        pending = state["scopes"].pop() if len(state["scopes"]) > 1 else state["scopes"][-1]
        names = state["names"].pop() if len(state["names"]) > 1 else state["names"][-1]
        tested = state["tested"].pop() if len(state["tested"]) > 1 else state["tested"][-1]
        for node, name in pending:
            bound = state["bound"].get(id(node))
            only = id(node) in state["direct"] or (
                bound is not None and tested[bound] > 0 and names[bound] == tested[bound] + 1)
            self.on_reference(node, name, only)
        pending.clear()


def _arms(value: cst.BaseExpression) -> list:
    """The values a ternary (nested or not) may give."""
    if isinstance(value, cst.IfExp):
        return _arms(value.body) + _arms(value.orelse)
    return [value]
