"""``.cuda(...)`` on tensors and modules."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from porter.project.query import receiver_overrides
from porter.rulebase.rule import Example, Needs, Rule, Safety, clean_args, has_star_args

_DEFINES_CUDA = re.compile(rb"\bdef\s+cuda\s*\(")
_PARAMS = ("device", "non_blocking", "memory_format")


class CudaMethod(Rule):
    """`.cuda(...)` becomes `.to(porter_runtime.device(...))`.

    What:
    Rewrites `x.cuda()`, `x.cuda(i)`, `x.cuda(non_blocking=True)` and
    `x.cuda(device=d)` on tensors and modules into `x.to(...)` with the runtime's
    resolved device, keeping `non_blocking` and `memory_format`.

    Why:
    On a machine without CUDA, `.cuda()` raises
    `AssertionError: Torch not compiled with CUDA enabled`.

    Fix safety:
    Safe. On CUDA, `porter_runtime.device()` is `torch.device("cuda")` and
    `porter_runtime.device(i)` is `torch.device("cuda", i)`; `Tensor.to` and
    `Module.to` move to exactly the device `.cuda()` would (an index-less "cuda" means
    the current device for both), return `self` when nothing moves, and accept the same
    `non_blocking` and `memory_format`.

    A storage's `.to` takes its device by keyword only, so in a `map_location`
    function (`lambda storage, loc: storage.cuda()`, `def f(storage, location)`) the
    call becomes `storage.to(device=porter_runtime.device())`, which is what
    `storage.cuda()` itself calls.

    Known limits:
    The receiver's type is known only where it is constructed in the file
    (`Net().cuda()`, `model = Net(); model.cuda()`): a class of the repository that
    defines or inherits its own `cuda` (porter.project) then gets a finding. A file that
    defines its own `def cuda(...)` method gets findings instead of rewrites, and a call on an imported module
    (`mylib.cuda()`) is left alone, as is a `.cuda()` inside a method named `cuda` (a class's own
    move, `return Boxes(self.data.cuda(), ...)`: what `.cuda()` means for that class, whose
    callers are ported or named). Calls with `*args`/`**kwargs` are findings.
    """

    code = "PT001"
    name = "cuda-method"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"cuda"}))

    valid = [
        # a result class's own `cuda` method (ultralytics' Results, vendored in MobileSAMv2): it is
        # what `.cuda()` means for the class; a caller's `results.cuda()` is ported or named
        "class Boxes:\n    def cuda(self):\n        return Boxes(self.data.cuda(), self.orig_shape)\n",
        # lookalike: a function of an imported module, not a tensor method
        "import mylib\nmylib.cuda()\n",
        # shadowed: the file defines its own cuda() method... and never calls it
        "import torch\nx = torch.cuda\n",
        # not a call
        "y = model.cuda\n",
    ]
    invalid = [
        Example(
            "import torch\nx = torch.zeros(2).cuda()\n",
            "import porter_runtime\nimport torch\nx = torch.zeros(2).to(porter_runtime.device())\n",
        ),
        Example(
            "import torch as t\nmodel = t.nn.Linear(2, 2).cuda(1)\n",
            "import porter_runtime\nimport torch as t\nmodel = t.nn.Linear(2, 2).to(porter_runtime.device(1))\n",
        ),
        Example(
            "from torch import zeros\nx = zeros(3).cuda(non_blocking=True)\n",
            "import porter_runtime\nfrom torch import zeros\n"
            "x = zeros(3).to(porter_runtime.device(), non_blocking=True)\n",
        ),
        Example(
            "def move(batch, gpu):\n    return batch.cuda(device=gpu)\n",
            "import porter_runtime\ndef move(batch, gpu):\n    return batch.to(porter_runtime.device(gpu))\n",
        ),
        Example(
            "def move(x, torch):\n    return x.cuda(0, True)\n",
            "import porter_runtime\ndef move(x, torch):\n    return x.to(porter_runtime.device(0), non_blocking=True)\n",
        ),
        Example(
            "import torch\nto_gpu = lambda storage, loc: storage.cuda(gpu)\nsd = torch.load(f, map_location=to_gpu)\n",
            "import porter_runtime\nimport torch\n"
            "to_gpu = lambda storage, loc: storage.to(device=porter_runtime.device(gpu))\n"
            "sd = torch.load(f, map_location=to_gpu)\n",
        ),
        Example(
            "def on_gpu(s, location):\n    return s.cuda(non_blocking=True)\n",
            "import porter_runtime\ndef on_gpu(s, location):\n"
            "    return s.to(device=porter_runtime.device(), non_blocking=True)\n",
        ),
        # A parameter shadows the imported module: the receiver is a value again.
        Example(
            "import mylib\n\ndef move(mylib):\n    return mylib.cuda()\n",
            "import porter_runtime\nimport mylib\n\ndef move(mylib):\n    return mylib.to(porter_runtime.device())\n",
        ),
        # A class with its own cuda(): only a finding.
        Example("class Box:\n    def cuda(self):\n        return self\n\nBox().cuda()\n"),
        # ... also when the class lives in another module of the repository (or inherits it)
        Example(
            "from models import Net\n\nmodel = Net(4)\nmodel.cuda()\nbatch = batch.cuda()\n",
            "import porter_runtime\nfrom models import Net\n\nmodel = Net(4)\nmodel.cuda()\n"
            "batch = batch.to(porter_runtime.device())\n",
            path="train.py", line=4, message="`Net` (a class of this repository) defines its own `cuda`",
            project=(("models/base.py", "import torch\n\nclass Base(torch.nn.Module):\n    def cuda(self, device=None):\n"
                      "        self.on_gpu = True\n        return super().cuda(device)\n"),
                     ("models/__init__.py", "from .base import Base\n\nclass Net(Base):\n    pass\n")),
        ),
        Example("x.cuda(*args)\n"),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._own_cuda = bool(_DEFINES_CUDA.search(ctx.source))
        self._receivers: dict = {}  # porter.project.query's cache of this file's instances
        self._storages: list[Optional[str]] = []  # per enclosing function: its storage parameter
        self._methods: list[str] = []  # the enclosing functions' names

    def visit_Lambda(self, node: cst.Lambda) -> None:
        self._storages.append(_storage_param(node.params))

    def leave_Lambda(self, original: cst.Lambda, updated: cst.Lambda) -> cst.BaseExpression:
        self._storages.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._storages.append(_storage_param(node.params))
        self._methods.append(node.name.value)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._storages.pop()
        self._methods.pop()
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "cuda":
            return updated
        if self.qualname(func.value) is not None:
            return updated  # ``module.cuda()``: an imported function, not a tensor method
        if self._methods and self._methods[-1] == "cuda":
            return updated  # a class's own `cuda` method: what `.cuda()` means; its callers are ported or named
        owner = receiver_overrides(self.ctx.project, self.ctx.module, func.value, "cuda", self._receivers)
        if owner is not None:
            self.flag(original, f"`{owner}` (a class of this repository) defines its own `cuda`, which `.to()` would skip; "
                      "not rewritten", suggestion="make that `cuda` method resolve the device itself")
            return updated
        if self._own_cuda:
            self.flag(original, "`.cuda()` may call this file's own `cuda` method; not rewritten",
                      suggestion="x.to(porter_runtime.device())")
            return updated
        args = self._arguments(updated)
        if args is None:
            self.flag(original, "`.cuda()` with unpacked arguments can't be rewritten exactly",
                      suggestion="x.to(porter_runtime.device(...), non_blocking=...)")
            return updated
        device = args.pop("device", None)
        target = self.runtime_call("device", *([device] if device is not None else []))
        storage = isinstance(func.value, cst.Name) and bool(self._storages) and self._storages[-1] == func.value.value
        new_args = [cst.Arg(target, keyword=cst.Name("device"), equal=_EQ) if storage else cst.Arg(target)]
        new_args += [cst.Arg(value, keyword=cst.Name(k), equal=_EQ) for k, value in args.items()]
        new = updated.with_changes(
            func=updated.func.with_changes(attr=cst.Name("to")),  # type: ignore[attr-defined]
            args=clean_args(new_args),
        )
        return self.rewrite(original, new, "`.cuda()` now moves to the runtime's device")

    @staticmethod
    def _arguments(call: cst.Call) -> Optional[dict[str, cst.BaseExpression]]:
        if has_star_args(call):
            return None
        found: dict[str, cst.BaseExpression] = {}
        for index, arg in enumerate(call.args):
            key = arg.keyword.value if arg.keyword is not None else None
            if key is None:
                if index >= len(_PARAMS):
                    return None
                key = _PARAMS[index]
            if key not in _PARAMS or key in found:
                return None
            found[key] = arg.value
        return found


def _storage_param(params: cst.Parameters) -> Optional[str]:
    """The first parameter of a ``map_location`` function: ``(storage, loc)``, ``(s, location)``."""
    names = [p.name.value for p in (*params.posonly_params, *params.params)]
    if len(names) != 2 or params.star_arg is not cst.MaybeSentinel.DEFAULT or params.kwonly_params:
        return None
    return names[0] if "storage" in names[0].lower() or "loc" in names[1].lower() else None


_EQ = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
