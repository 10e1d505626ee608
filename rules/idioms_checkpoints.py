"""Checkpoints written by wrapped models (DataParallel / DDP `module.`, torch.compile
`_orig_mod.`) loaded into a model that is not wrapped on this machine."""

from __future__ import annotations

import re

import libcst as cst

from porter.rule import Example, Rule, Safety

from ._common import is_runtime_call

#: Receivers that are not models: their load_state_dict has other semantics, and the
#: runtime would only forward the call, so they are left as written.
_NOT_A_MODEL = re.compile(r"optim|sched|scaler|^opt$|sampler|loader|tokenizer|ema_?opt", re.I)


def _receiver_name(node: cst.BaseExpression) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    if isinstance(node, cst.Subscript):
        return _receiver_name(node.value)
    return ""


class WrappedCheckpoint(Rule):
    """`model.load_state_dict(sd)` becomes `porter_runtime.load_state_dict(model, sd)`.

    What:
    Rewrites `model.load_state_dict(...)` calls (any receiver that is not an
    optimizer, scheduler, grad scaler, sampler or data loader by its name) into
    `porter_runtime.load_state_dict(model, ...)`, the arguments kept.

    Why:
    A checkpoint saved from `torch.compile(model)` has keys starting with
    `_orig_mod.`, one from DataParallel / DDP keys starting with `module.`. Off CUDA
    porter keeps compile off and DDP is often not used, so the same script loads it
    into an unwrapped model: `RuntimeError: Error(s) in loading state_dict ...
    Missing key(s) ... Unexpected key(s) in state_dict: "module.conv1.weight"`.

    Fix safety:
    Safe. The runtime makes the original call with the original arguments and
    returns its result. Only when that call raises, the receiver is an
    `nn.Module`, and the failure is exactly explained by a wrapper prefix (every key
    has it, the model's keys don't, and without it the keys are the model's), does
    it load again with the prefix removed, warning once. Every call that works
    as written behaves identically, on CUDA and elsewhere.

    Known limits:
    `strict=False` calls never raise, so a prefixed checkpoint still loads nothing
    there, as before. Calls on `super()` and on imported modules are left alone.
    """

    code = "PT905"
    name = "wrapped-checkpoint"
    safety = Safety.SAFE
    methods = frozenset({"load_state_dict"})

    valid = [
        "optimizer.load_state_dict(ckpt['optimizer'])\nscheduler.load_state_dict(ckpt['sched'])\n",
        "import mylib\nmylib.load_state_dict(sd)\n",
        "class M(Base):\n    def load_state_dict(self, sd, strict=True):\n        return super().load_state_dict(sd, strict)\n",
        "import torch\nload = model.load_state_dict\n",
        "import porter_runtime\nporter_runtime.load_state_dict(model, sd)\n",
    ]
    invalid = [
        Example(
            "import torch\n\nckpt = torch.load(path)\nmodel.load_state_dict(ckpt['state_dict'])\n"
            "optimizer.load_state_dict(ckpt['optimizer'])\n",
            "import porter_runtime\nimport torch\n\nckpt = torch.load(path)\n"
            "porter_runtime.load_state_dict(model, ckpt['state_dict'])\noptimizer.load_state_dict(ckpt['optimizer'])\n",
        ),
        Example(
            "import torch as t\nmissing = self.net.load_state_dict(t.load(f), strict=False)\n",
            "import porter_runtime\nimport torch as t\nmissing = porter_runtime.load_state_dict(self.net, t.load(f), strict=False)\n",
        ),
        Example(
            "from torch import load\n\ndef restore(models, path):\n    models['g'].load_state_dict(\n"
            "        load(path)['g'],  # generator\n    )\n",
            "import porter_runtime\nfrom torch import load\n\ndef restore(models, path):\n"
            "    porter_runtime.load_state_dict(\n        models['g'],\n        load(path)['g'],  # generator\n    )\n",
        ),
        Example(
            "def f(torch, model, sd):\n    model.module.load_state_dict(sd)\n",
            "import porter_runtime\ndef f(torch, model, sd):\n    porter_runtime.load_state_dict(model.module, sd)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "load_state_dict":
            return updated
        receiver = func.value
        if self.qualname(receiver) is not None or is_runtime_call(self, original):
            return updated  # a module's function, or already ported
        if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Name) and receiver.func.value == "super":
            return updated
        if _NOT_A_MODEL.search(_receiver_name(receiver)):
            return updated
        gap = updated.whitespace_before_args  # one argument a line stays so
        after = gap if isinstance(gap, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" ")
        first = cst.Arg(updated.func.value, comma=cst.Comma(whitespace_after=after))  # type: ignore[attr-defined]
        new = updated.with_changes(func=self.runtime("load_state_dict"), args=[first, *updated.args])
        return self.rewrite(original, new, "a checkpoint of a DataParallel/DDP or compiled model now also loads "
                            "into the unwrapped model (only where the original call fails on the key prefix)")
