"""What a rule asks the project model (porter.project) about a LibCST node.

A rule that asks mixes in :class:`Scoped`, which keeps the qualname of the function the
pass is in: the model's device values are keyed by (file, qualname), as the ``ast``
builder of porter.project.value_flow names them.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.project.value_flow import Kind
from porter.rulebase.matching import dotted_name


class Scoped:
    """A rule mixin: ``self.scope`` is (file, qualname of the enclosing function)."""

    def _scope_stack(self) -> list[str]:
        stack = self.__dict__.get("_porter_scopes")
        if stack is None:
            stack = self.__dict__["_porter_scopes"] = []
        return stack

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._scope_stack().append(node.name.value)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._scope_stack().pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scope_stack().append(node.name.value)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._scope_stack().pop()
        return updated

    @property
    def scope(self) -> tuple[str, str]:
        return (self.ctx.path, ".".join(self._scope_stack()))  # type: ignore[attr-defined]


def kind_of(project, scope: tuple[str, str], node: cst.BaseExpression) -> Optional[Kind]:
    """The model's kind for a name, an attribute or ``name[i]`` (None: not known)."""
    if project is None:
        return None
    if isinstance(node, cst.Name):
        return project.name_kind(scope, node.value)
    if isinstance(node, cst.Attribute) and dotted_name(node) is not None:
        return project.attr_kind(node.attr.value)
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return Kind.INDEX if kind_of(project, scope, node.value) == Kind.INDEX_LIST else None
    return None


def is_cuda_index(project, scope: tuple[str, str], node: cst.BaseExpression) -> bool:
    """Whether the repository-wide model says ``node`` holds a CUDA index."""
    return kind_of(project, scope, node) == Kind.INDEX


def constructed_class(node: cst.BaseExpression) -> Optional[str]:
    """``Net`` for ``Net(...)`` / ``models.Net(...)``: the class a call may construct."""
    if isinstance(node, cst.Call):
        name = dotted_name(node.func)
        return name.rsplit(".", 1)[-1] if name else None
    return None


class InstanceNames(cst.CSTVisitor):
    """Names and attributes the file binds to a call of a class that overrides one of
    ``methods`` (``model = Net()``, ``self.net = models.Net()``)."""

    def __init__(self, project, method: str) -> None:
        self.project, self.method = project, method
        self.found: dict[str, str] = {}  # name -> the class it is bound to

    def visit_Assign(self, node: cst.Assign) -> None:
        cls = constructed_class(node.value)
        if cls is not None and self.project.overrides_method(cls, self.method):
            self.found.update((name, cls) for name in filter(None, (dotted_name(t.target) for t in node.targets)))


def receiver_overrides(project, module: cst.Module, receiver: cst.BaseExpression, method: str,
                       cache: dict) -> Optional[str]:
    """The repository class whose own ``method`` a call on ``receiver`` may reach: the
    receiver constructs it, or is a name the file binds to one. None: none known."""
    if project is None or not project.overrides.keys():
        return None
    cls = constructed_class(receiver)
    if cls is not None:
        return cls if project.overrides_method(cls, method) else None
    if method not in cache:
        names = InstanceNames(project, method)
        module.visit(names)
        cache[method] = names.found
    name = dotted_name(receiver)
    return cache[method].get(name) if name is not None else None
