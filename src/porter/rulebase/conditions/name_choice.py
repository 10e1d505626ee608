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

from typing import Optional

import libcst as cst


def only_picks_names(scope: cst.CSTNode, name: str) -> bool:
    """Whether every read of ``name`` in ``scope`` is the test of a ternary between strings
    (or lists/tuples of strings), and there is at least one."""
    uses = _Uses(name)
    scope.visit(uses)
    return uses.tests > 0 and uses.reads == uses.tests


class _Uses(cst.CSTVisitor):
    def __init__(self, name: str) -> None:
        self.name = name
        self.reads = 0
        self.tests = 0
        self.targets: set[int] = set()

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name):
            self.targets.add(id(node.target))

    def visit_IfExp(self, node: cst.IfExp) -> None:
        if isinstance(node.test, cst.Name) and node.test.value == self.name and _names(node.body) and _names(node.orelse):
            self.tests += 1

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and id(node) not in self.targets:
            self.reads += 1

    def visit_Attribute(self, node: cst.Attribute) -> Optional[bool]:
        node.value.visit(self)
        return False  # `x.cuda` is an attribute, not the name


def _names(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        return True
    if isinstance(node, (cst.List, cst.Tuple)):
        return bool(node.elements) and all(isinstance(e, cst.Element) and _names(e.value) for e in node.elements)
    return False
