"""Code that sets `CUDA_VISIBLE_DEVICES` through `os.environ` (PT704); the shell scripts'
and configs' rules are in porter.rules.configs."""

from __future__ import annotations

import re
from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value
from porter.rulebase.scopes import dotted_name
from porter.rulebase.syntax import hides_gpus


class _Flags(cst.CSTVisitor):
    """The names and dotted names (``cpu``, ``args.cpu``) read in code; the subtrees in ``skip`` (by id) and the targets of plain assignments are left out."""

    def __init__(self, skip: Optional[set[int]] = None) -> None:
        self.skip = skip or set()
        self.first: dict[str, cst.CSTNode] = {}  # each name, where it is first read

    def on_visit(self, node: cst.CSTNode) -> bool:
        if id(node) in self.skip:
            return False
        if isinstance(node, (cst.Name, cst.Attribute)):
            name = dotted_name(node)
            if name is not None:
                self.first.setdefault(name, node)
                return False
        if isinstance(node, cst.Assign):
            node.value.visit(self)  # `cpu = ...` defines the flag; only its value reads anything
            return False
        return super().on_visit(node)


class EnvCudaVisibleDevices(Rule):
    """Code sets `CUDA_VISIBLE_DEVICES` through `os.environ`.

    What:
    Reports `os.environ["CUDA_VISIBLE_DEVICES"] = ...`, `os.environ.setdefault(
    "CUDA_VISIBLE_DEVICES", ...)` and `os.putenv("CUDA_VISIBLE_DEVICES", ...)`.

    Why:
    The variable selects GPUs for CUDA only; on a Mac it does nothing, so code that
    relies on it to pick a device (or to hide all devices and force the CPU) behaves
    differently.

    Fix safety:
    Not rewritten: it is right on CUDA. To choose the device of the port, set
    `PORTER_DEVICE` instead (or as well). A value that picks GPUs is a note (severity
    "info"); one that hides them all (`""`, `"-1"`) to force the CPU is a finding,
    unless the same function reads the flag that guards it again (yolov5's and yolov7's
    `select_device`: `if cpu: os.environ[...] = "-1"`, then `cuda = not cpu and ...`):
    its own device choice already honours the request for the CPU, so that is a note too.

    Known limits:
    Only literal `"CUDA_VISIBLE_DEVICES"` keys are recognised.
    """

    code = "PT704"
    name = "env-cuda-visible-devices"
    safety = Safety.REVIEW
    needs = Needs(
        targets=frozenset({"os.environ", "os.putenv"}),
        words=frozenset({"CUDA_VISIBLE_DEVICES"}),
        strings=re.compile(r"^CUDA_VISIBLE_DEVICES$"),
    )

    valid = [
        "import os\nos.environ['OMP_NUM_THREADS'] = '1'\n",
        "def f(os):\n    os.environ['CUDA_VISIBLE_DEVICES'] = '0'\n",
        "import mylib as os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0'\n",
        "import os\nprint(os.environ.get('CUDA_VISIBLE_DEVICES'))\n",
    ]
    invalid = [
        Example("import os\nos.environ['CUDA_VISIBLE_DEVICES'] = '0,1'\n"),
        Example("import os as o\no.environ.setdefault('CUDA_VISIBLE_DEVICES', args.gpus)\n"),
        Example("from os import environ\nenviron['CUDA_VISIBLE_DEVICES'] = str(rank)\n"),
        Example("from os import putenv\nputenv('CUDA_VISIBLE_DEVICES', '')\n", message="to force the CPU"),
        Example(  # hides the GPUs, and the device is then chosen without the flag
            dedent("""\
                import os
                import torch

                if args.cpu:
                    os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
                device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
                """),
            line=5, message="hides the GPUs to force the CPU",
        ),
        Example(  # yolov5's select_device: the function's own choice reads `cpu` and `mps` again
            dedent("""\
                import os
                import torch

                def select_device(device="", batch_size=0):
                    cpu = device == "cpu"
                    mps = device == "mps"
                    if cpu or mps:
                        os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
                    elif device:
                        os.environ["CUDA_VISIBLE_DEVICES"] = device
                    if not cpu and not mps and torch.cuda.is_available():
                        arg = "cuda:0"
                    elif mps:
                        arg = "mps"
                    else:
                        arg = "cpu"
                    return torch.device(arg)
                """),
            line=8, message="the function's own device choice reads",
        ),
    ]

    _MESSAGE = "CUDA_VISIBLE_DEVICES selects GPUs for CUDA only; it has no effect on MPS or CPU"
    _SUGGESTION = "set PORTER_DEVICE (cpu, mps, cuda:N) to choose the device of the port"

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._ifs: list[cst.If] = []                                    # the ifs around the node
        self._scopes: list[cst.CSTNode] = [ctx.module]                  # the module, then functions

    def visit_If(self, node: cst.If) -> None:
        self._ifs.append(node)

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        self._ifs.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._scopes.append(node)
        self._ifs.append(None)  # the ifs of an outer scope guard the definition, not the call

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._scopes.pop()
        self._ifs.pop()
        return updated

    def _guard_read_again(self) -> Optional[str]:
        """A flag of the ifs around the node (``cpu`` of ``if cpu or mps:``) that the same
        function reads again outside those tests (``cuda = not cpu and ...``), or None."""
        tests = []
        for node in reversed(self._ifs):
            if node is None:
                break
            tests.append(node.test)
        flags = _Flags()
        for test in tests:
            test.visit(flags)
        local = [name for name, node in flags.first.items() if self.qualname(node) is None]  # not `torch.cuda...`
        if not local:
            return None
        if self._scopes[-1] is self.ctx.module:
            self.ctx.see_all_uses_of([name.split(".")[0] for name in local])
        reads = _Flags(skip=set(map(id, tests)))
        self._scopes[-1].visit(reads)
        return next((name for name in local if name in reads.first), None)

    def visit_Assign(self, node: cst.Assign) -> None:
        for assign in node.targets:
            target = assign.target
            if isinstance(target, cst.Subscript) and self.matches(target.value, "os.environ"):
                [element] = target.slice if len(target.slice) == 1 else [None]
                if element is not None and isinstance(element.slice, cst.Index) and \
                        string_value(element.slice.value) == "CUDA_VISIBLE_DEVICES":
                    self._report(target, node.value)

    def _report(self, node: cst.CSTNode, value: Optional[cst.BaseExpression]) -> None:
        """A finding where the value hides every GPU to force the CPU (off CUDA the port
        picks MPS); a note where it picks GPUs, which blocks nothing off CUDA."""
        text = string_value(value) if value is not None else None
        flag = self._guard_read_again() if text is not None and hides_gpus(text) else None
        if flag is not None:
            self.note(node, self._MESSAGE + f"; it hides the GPUs to force the CPU, and the function's own device "
                      f"choice reads `{flag}` again, so the port keeps the CPU too (for information)",
                      suggestion=self._SUGGESTION)
        elif text is not None and hides_gpus(text):
            self.flag(node, self._MESSAGE + "; it hides the GPUs to force the CPU, and a Mac's port would use MPS",
                      suggestion=self._SUGGESTION)
        else:
            self.note(node, self._MESSAGE + " (it picks GPUs: for information)", suggestion=self._SUGGESTION)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        is_setdefault = isinstance(func, cst.Attribute) and func.attr.value == "setdefault" \
            and self.matches(func.value, "os.environ")
        if (is_setdefault or self.matches(func, "os.putenv")) and node.args \
                and string_value(node.args[0].value) == "CUDA_VISIBLE_DEVICES":
            self._report(node, node.args[1].value if len(node.args) > 1 else None)
