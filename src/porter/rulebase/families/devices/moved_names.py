"""Names that hold tensors moved to the device, by scope (PT606 reads them: a local bound
to `torch.rand(...).cuda() * 0.01` and then made float64 with `.double()`)."""

from __future__ import annotations

from typing import Optional, Union

import libcst as cst

from porter.rulebase.syntax import is_device_move


class Assignments(cst.CSTVisitor):
    """Each name's assigned values in one function's own code (not nested definitions)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, list[Optional[cst.BaseExpression]]] = {}

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self.values.setdefault(target.target.value, []).append(node.value)
            elif isinstance(target.target, (cst.Tuple, cst.List, cst.StarredElement)):  # values unknown
                for name in _bound_in(target.target):
                    self.values.setdefault(name, []).append(None)
            # `value.requires_grad = ...` / `x[i] = ...` set a part of what the name holds: no new binding

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if isinstance(node.target, cst.Name):
            self.values.setdefault(node.target.value, []).append(node.value)

    def visit_For(self, node: cst.For) -> None:
        for name in _names_in(node.target):
            self.values.setdefault(name, []).append(None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            for name in _names_in(node.asname.name):
                self.values.setdefault(name, []).append(None)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        for name in _names_in(node.target):
            self.values.setdefault(name, []).append(None)


def _bound_in(node: cst.CSTNode) -> list[str]:
    """The names a tuple or list target binds (``a, (b, *c)``), not those inside its
    attribute or subscript elements (``a.b, x[i]``)."""
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [name for element in node.elements for name in _bound_in(element.value)]
    if isinstance(node, cst.StarredElement):
        return _bound_in(node.value)
    return []


def _names_in(node: cst.CSTNode) -> list[str]:
    found: list[str] = []

    class _Collect(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name.value)

    node.visit(_Collect())
    return found


def on_the_device(rule, value: Optional[cst.BaseExpression]) -> bool:
    """A moved tensor: a device move, or arithmetic with one (``x.cuda() * 0.01``)."""
    if value is None:
        return False
    if isinstance(value, cst.BinaryOperation):
        return on_the_device(rule, value.left) or on_the_device(rule, value.right)
    return is_device_move(rule, value)


def moved_names(rule, scope: Union[cst.FunctionDef, cst.Module]) -> frozenset[str]:
    """The names every assignment of a function (none a parameter) or of a module's top
    level binds to a moved tensor."""
    found = Assignments()
    if isinstance(scope, cst.Module):
        for statement in scope.body:
            statement.visit(found)
        params: set[str] = set()
    else:
        scope.body.visit(found)
        params = parameters(scope)
    return frozenset(name for name, values in found.values.items()
                     if name not in params and all(on_the_device(rule, v) for v in values))


def parameters(function: cst.FunctionDef) -> set[str]:
    params = function.params
    return {p.name.value for p in (*params.params, *params.posonly_params, *params.kwonly_params)} | {
        p.name.value for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)}
