"""A branch that moves a model to the device once and then does more (PT914)."""

from __future__ import annotations

from typing import Optional

import re

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.thirdparty.uses import example_code


def _moved(stmt: cst.BaseStatement) -> Optional[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """(what, where) of ``what = what.to(where)`` or ``what.to(where)`` (the device as the
    call's only argument, by position or as ``device=``)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    call = small.value if isinstance(small, (cst.Assign, cst.Expr)) else None
    if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute) or call.func.attr.value != "to" \
            or len(call.args) != 1 or call.args[0].star:
        return None
    keyword = call.args[0].keyword
    if keyword is not None and keyword.value != "device":
        return None
    what = call.func.value
    if isinstance(small, cst.Assign) and not (len(small.targets) == 1 and small.targets[0].target.deep_equals(what)):
        return None
    return what, call.args[0].value


def _compared(test: cst.BaseExpression) -> list[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """The (X, D) readings of ``X.device != D`` (or ``D != X.device``): both sides may be a
    ``.device`` (``self.device != self._model.device``)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 \
            or not isinstance(test.comparisons[0].operator, cst.NotEqual):
        return []
    left, right = test.left, test.comparisons[0].comparator
    return [(side.value, other) for side, other in ((left, right), (right, left))
            if isinstance(side, cst.Attribute) and side.attr.value == "device"]


class DeviceMoveGuard(Rule):
    """`if model.device != device:` around a move and more becomes `if porter_runtime.off_device(model, device):`.

    What:
    A branch taken when a model (or tensor) is not yet on the device, which moves it
    there and then does more: LAVIS's `RunnerBase.model` (and the many repositories
    built on LAVIS: MiniGPT-4, InstructBLIP, Video-LLaMA) moves the model, wraps it in
    DistributedDataParallel and keeps the wrapped model it returns. The test becomes
    `porter_runtime.off_device(model, device)`.

    Why:
    On CUDA the model starts on the host, so the branch runs once. Off CUDA the port
    builds it where it runs (the CPU), the test never holds, and the rest of the
    branch never runs: LAVIS's `runner.model` stays None and training stops at its
    first step; with two processes the model is never wrapped in DDP (MiniGPT-4 in blind
    round 11, silent).

    Fix safety:
    Safe. Where the runtime resolved CUDA, `off_device(x, d)` is `x.device != d`. Elsewhere
    it holds the first time an object is met already on `d`, as on CUDA for one built
    on the host, and after that it is the test as written.

    Known limits:
    Only a branch whose first statement moves the compared object to the compared
    device (`x = x.to(d)`, `x.to(d)`) and which does more than that: a branch that only
    moves is the same either way and is left as is. A tensor's `.to` returns a new
    tensor, so for a tensor the branch runs once more off CUDA than on it.
    """

    code = "PT914"
    name = "device-move-guard"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"to"}), byte_patterns=re.compile(rb"\.device\s*!=|!=\s*[\w.]+\.device\b"))

    valid = [
        # the branch only moves: the same off CUDA
        "def model(self):\n    if self.device != self._model.device:\n        self._model = self._model.to(self.device)\n"
        "    return self._model\n",
        "def model(self):\n    if self._model.device != self.device:\n        self._model = self._model.to(self.device)\n"
        "    return self._model\n",
        # the branch moves something else
        "def model(self):\n    if self._model.device != self.device:\n        self.other = self.other.to(self.device)\n"
        "        self.wrapped = None\n",
        # a dtype, not a device
        "def f(x, d):\n    if x.device != d:\n        x = x.to(torch.float32)\n        log(x)\n",
    ]
    invalid = [
        Example(  # the device on the left
            "def model(self):\n    if self.device != self._model.device:\n        self._model = self._model.to(self.device)\n"
            "        self._wrapped_model = self._model\n    return self._wrapped_model\n",
            "import porter_runtime\ndef model(self):\n    if porter_runtime.off_device(self._model, self.device):\n"
            "        self._model = self._model.to(self.device)\n        self._wrapped_model = self._model\n"
            "    return self._wrapped_model\n",
        ),
        Example(
            example_code("""
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP


            class RunnerBase:
                @property
                def device(self):
                    if self._device is None:
                        self._device = torch.device(self.config.run_cfg.device)
                    return self._device

                @property
                def model(self):
                    # move model to device
                    if self._model.device != self.device:
                        self._model = self._model.to(self.device)

                        # distributed training wrapper
                        if self.use_distributed:
                            if self._wrapped_model is None:
                                self._wrapped_model = DDP(self._model, device_ids=[self.config.run_cfg.gpu])
                        else:
                            self._wrapped_model = self._model

                    return self._wrapped_model
            """),
            example_code("""
            import porter_runtime
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP


            class RunnerBase:
                @property
                def device(self):
                    if self._device is None:
                        self._device = torch.device(self.config.run_cfg.device)
                    return self._device

                @property
                def model(self):
                    # move model to device
                    if porter_runtime.off_device(self._model, self.device):
                        self._model = self._model.to(self.device)

                        # distributed training wrapper
                        if self.use_distributed:
                            if self._wrapped_model is None:
                                self._wrapped_model = DDP(self._model, device_ids=[self.config.run_cfg.gpu])
                        else:
                            self._wrapped_model = self._model

                    return self._wrapped_model
            """),
        ),
    ]

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        body = original.body.body if isinstance(original.body, cst.IndentedBlock) else ()
        moved = _moved(body[0]) if len(body) >= 2 else None
        if moved is None:
            return updated
        readings = _compared(original.test)
        which = next((i for i, (what, where) in enumerate(readings)
                      if moved[0].deep_equals(what) and moved[1].deep_equals(where)), None)
        new_readings = _compared(updated.test)
        if which is None or len(new_readings) != len(readings):
            return updated
        call = self.runtime_call("off_device", *new_readings[which])
        self.rewrite(original.test, call, "this branch moves the model to the device and then does more: off CUDA "
                     "the port builds the model where it runs, so the test would never hold and the rest would never "
                     "run; porter_runtime.off_device holds the first time, as on CUDA for a model built on the host")
        return updated.with_changes(test=call)
