"""A CUDA flag whose every use picks between names: ``"onnxruntime-gpu" if cuda else "onnxruntime"``.

yolov5 asks for CUDA only to pick a package or an execution provider::

    cuda = torch.cuda.is_available() and device.type != "cpu"  # use CUDA
    check_requirements(("onnx", "onnxruntime-gpu" if cuda else "onnxruntime"))
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]

Off CUDA the CPU name is picked, which runs on a Mac: CUDA is what is meant, as a device
ternary that falls back to "cpu" (PT202 makes both notes). A flag used in any other way
(``if cuda:``, handed on, a non-string arm) decides more, and stays a finding.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

import libcst as cst


def only_picks_names(scope: cst.CSTNode, name: str) -> bool:
    """Whether every read of ``name`` in ``scope`` is the test of a ternary between strings
    (or lists/tuples of strings), and there is at least one."""
    uses = _uses_in(scope)
    return uses.tests[name] > 0 and uses.reads[name] == uses.tests[name]


#: The last scopes walked, by identity (the scope is kept, so its id stays its own): a
#: function with many flag assignments asks once per assignment, and one walk counts
#: every name (a walk per question cost half of a diffusers run).
_walked: dict[int, tuple[cst.CSTNode, "_Uses"]] = {}


def _uses_in(scope: cst.CSTNode) -> "_Uses":
    known = _walked.get(id(scope))
    if known is not None and known[0] is scope:
        return known[1]
    uses = _Uses()
    scope.visit(uses)
    if len(_walked) >= 8:
        _walked.clear()
    _walked[id(scope)] = (scope, uses)
    return uses


class _Uses(cst.CSTVisitor):
    """Per name: its reads, and the ternaries between names that it is the test of."""

    def __init__(self) -> None:
        self.reads: Counter[str] = Counter()
        self.tests: Counter[str] = Counter()
        self.targets: set[int] = set()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name):
            self.targets.add(id(node.target))

    def visit_IfExp(self, node: cst.IfExp) -> None:
        if isinstance(node.test, cst.Name) and _names(node.body) and _names(node.orelse):
            self.tests[node.test.value] += 1

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self.targets:
            self.reads[node.value] += 1

    def visit_Attribute(self, node: cst.Attribute) -> Optional[bool]:
        node.value.visit(self)
        return False  # `x.cuda` is an attribute, not the name


def _names(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    if isinstance(node, (cst.List, cst.Tuple)):
        return bool(node.elements) and all(isinstance(e, cst.Element) and _names(e.value) for e in node.elements)
    return False
