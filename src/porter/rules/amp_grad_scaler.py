"""CUDA gradient scalers (``GradScaler``, FSDP's ``ShardedGradScaler``) and reads of a scaler's state."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.families.compile_amp_shared import is_cuda_type, without
from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
    keyword,
    string_value,
)


_SCALER_LEGACY = {"torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"}
_SCALER_DEVICE = {"torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"}


class CudaGradScaler(Rule):
    """A CUDA `GradScaler(...)` becomes `porter_runtime.GradScaler(...)`.

    What:
    Rewrites `torch.cuda.amp.GradScaler(...)` and `torch.amp.GradScaler("cuda", ...)`
    (also with `device="cuda"` or no device, whose default is "cuda") into
    `porter_runtime.GradScaler(...)` with the remaining arguments (`init_scale`,
    `growth_factor`, `backoff_factor`, `growth_interval`, `enabled`) unchanged.

    Why:
    Off CUDA a CUDA scaler warns and disables itself. The runtime's scaler matches
    the runtime's autocast: a real scaler where autocast uses float16, an honest
    disabled passthrough where it uses bfloat16 that still answers `state_dict()`
    and the getters as an enabled one and loads a CUDA scaler's state.

    Fix safety:
    Safe. On CUDA the runtime returns `torch.amp.GradScaler("cuda", ...)` with the
    same arguments, which is what `torch.cuda.amp.GradScaler(...)` constructs
    (it is a deprecated subclass that calls exactly that).

    Known limits:
    The object is a `torch.amp.GradScaler`, so `isinstance(s, torch.cuda.amp.GradScaler)`
    no longer holds. A device given as a variable, or another device, is left
    alone. References that are not calls (a class used in `isinstance`) are left alone.
    """

    code = "PT503"
    name = "cuda-grad-scaler"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=frozenset(_SCALER_LEGACY | _SCALER_DEVICE))

    valid = [
        "import torch\nscaler = torch.amp.GradScaler('cpu')\n",
        "import torch\nscaler = torch.amp.GradScaler(device)\n",
        "def f(torch):\n    return torch.cuda.amp.GradScaler()\n",
        "import mylib as torch\nscaler = torch.cuda.amp.GradScaler()\n",
        "import torch\nok = isinstance(s, torch.cuda.amp.GradScaler)\n",
    ]
    invalid = [
        Example(
            "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=use_amp)\n",
            "import porter_runtime\nscaler = porter_runtime.GradScaler(enabled=use_amp)\n",
        ),
        Example(
            "import torch as t\nscaler = t.amp.GradScaler(\"cuda\", init_scale=1024.0)\n",
            "import porter_runtime\nscaler = porter_runtime.GradScaler(init_scale=1024.0)\n",
        ),
        Example(
            "from torch.cuda.amp import GradScaler\nscaler = GradScaler(2.0 ** 12, growth_interval=100)\n",
            "import porter_runtime\nscaler = porter_runtime.GradScaler(2.0 ** 12, growth_interval=100)\n",
        ),
        Example(
            "from torch.amp import GradScaler\nscaler = GradScaler()\nother = GradScaler(device='cuda', enabled=False)\n",
            "import porter_runtime\nscaler = porter_runtime.GradScaler()\nother = porter_runtime.GradScaler(enabled=False)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is None:
            return updated
        args = list(updated.args)
        if target in _SCALER_DEVICE:
            device = self._device_arg(original, updated)
            if device is False:
                return updated
            if device is not None:
                args = without(args, device)
        new = updated.with_changes(func=self.runtime("GradScaler"), args=args)
        return self.rewrite(original, new, "the CUDA GradScaler now matches the runtime's autocast")

    @staticmethod
    def _device_arg(original: cst.Call, updated: cst.Call):
        """The CUDA device argument to drop, None when absent, False when not CUDA."""
        named = keyword(updated, "device")
        first = updated.args[0] if updated.args and updated.args[0].keyword is None else None
        device = named if named is not None else (first if first is not None and not first.star else None)
        if device is None:
            # No device means "cuda", unless **kwargs may carry one.
            return False if any(a.star == "**" for a in updated.args) else None
        # The device may already be rewritten to ``porter_runtime.device()``; judge the original.
        index = list(updated.args).index(device)
        return device if is_cuda_type(original.args[index].value) else False


_SHARDED = frozenset({"torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler"})


class ShardedGradScalerDevice(Rule):
    """FSDP's `ShardedGradScaler(...)` for CUDA becomes `porter_runtime.ShardedGradScaler(...)`.

    What:
    Rewrites a call of `torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler`
    whose device is CUDA (not given, so "cuda", or a literal "cuda") into the
    runtime's twin with the same arguments.

    Why:
    Off CUDA a CUDA `ShardedGradScaler` warns and disables itself; the runtime's
    follows the runtime's autocast instead, like `porter_runtime.GradScaler` (PT503):
    a real scaler on the resolved device where autocast uses float16, an honest
    disabled one where it uses bfloat16 (answering `state_dict()` as an enabled one).

    Fix safety:
    Safe. On CUDA the twin constructs `ShardedGradScaler` with exactly the caller's
    arguments.

    Known limits:
    A device given as a variable or naming another device is left alone, as are
    references that are not calls.
    """

    code = "PT506"
    name = "sharded-grad-scaler"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_SHARDED)

    valid = [
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
        "scaler = ShardedGradScaler(device='cpu')\n",
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
        "scaler = ShardedGradScaler(args.device)\n",
        "def f(ShardedGradScaler):\n    return ShardedGradScaler()\n",
        "from mylib.sharded_grad_scaler import ShardedGradScaler\nscaler = ShardedGradScaler()\n",
    ]
    invalid = [
        Example(
            "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n"
            "scaler = ShardedGradScaler(enabled=use_fp16)\n",
            "import porter_runtime\n\nscaler = porter_runtime.ShardedGradScaler(enabled=use_fp16)\n",
        ),
        Example(
            "import torch.distributed.fsdp.sharded_grad_scaler as sgs\n"
            "scaler = sgs.ShardedGradScaler(\"cuda\", init_scale=2.0 ** 8)\n",
            "import porter_runtime\nimport torch.distributed.fsdp.sharded_grad_scaler as sgs\n"
            "scaler = porter_runtime.ShardedGradScaler(\"cuda\", init_scale=2.0 ** 8)\n",
        ),
        Example(
            "import torch\nscaler = torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler()\n",
            "import porter_runtime\nscaler = porter_runtime.ShardedGradScaler()\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func) is None:
            return updated
        device = keyword(original, "device")
        first = original.args[0] if original.args and original.args[0].keyword is None else None
        device = device if device is not None else first
        if device is not None and (device.star or not is_cuda_type(device.value)):
            return updated
        if device is None and any(a.star == "**" for a in original.args):
            return updated
        new = updated.with_changes(func=self.runtime("ShardedGradScaler"))
        return self.rewrite(original, new, "the CUDA ShardedGradScaler now matches the runtime's autocast")


_SCALERS = frozenset(_SCALER_LEGACY | _SCALER_DEVICE | _SHARDED | {
    "porter_runtime.GradScaler", "porter_runtime.grad_scaler", "porter_runtime.ShardedGradScaler"})
#: A scaler's state_dict() key → the getter that returns the same value.
_SCALER_GETTERS = {"scale": "get_scale", "growth_factor": "get_growth_factor",
                   "backoff_factor": "get_backoff_factor", "growth_interval": "get_growth_interval"}


class _ScalerNames(cst.CSTVisitor):
    """Names and attributes (`scaler`, `self.scaler`) assigned a loss scaler."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.found: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._makes_scaler(node.value):
            self.found.update(filter(None, (dotted_name(t.target) for t in node.targets)))

    def _makes_scaler(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):  # `ShardedGradScaler(...) if fsdp else GradScaler(...)`
            return self._makes_scaler(value.body) or self._makes_scaler(value.orelse)
        return isinstance(value, cst.Call) and self.rule.matches(value.func, *_SCALERS) is not None


class ScalerStateRead(Rule):
    """`scaler.state_dict()["scale"]` becomes `scaler.get_scale()`.

    What:
    Rewrites a read of one entry of a loss scaler's `state_dict()` (`"scale"`,
    `"growth_factor"`, `"backoff_factor"`, `"growth_interval"`) into the scaler's
    getter for it, where the file assigns the scaler from a `GradScaler` or
    `ShardedGradScaler` call (`scaler = ...`, `self.scaler = ...`, also as a branch
    of a conditional).

    Why:
    A disabled torch scaler's `state_dict()` is `{}`: the read raises
    `KeyError: 'scale'`. The runtime's scalers keep their entries where the runtime
    disabled them (autocast in bfloat16), but a scaler it did not make may still be
    disabled off CUDA; `get_scale()` answers for any disabled scaler (1.0), and the
    other getters for the runtime's.

    Fix safety:
    Safe. An enabled scaler's `state_dict()` builds each entry from the same getter,
    so wherever the original returned a value the new code returns the same one;
    only a read that raised `KeyError` (a disabled scaler) now returns the getter's
    value.

    Known limits:
    The scaler must be assigned in the same file; scalers passed as arguments, and
    entries read from a saved checkpoint (`ckpt["scaler"]["scale"]`), are not seen.
    """

    code = "PT507"
    name = "scaler-state-read"
    safety = Safety.SAFE
    needs = Needs(
        targets=_SCALERS,
        words=frozenset({"state_dict"}),
        whole_file=True,  # the scaler is often assigned in another method
    )

    valid = [
        "import torch\nscaler = torch.cuda.amp.GradScaler()\nstate = scaler.state_dict()\n",
        "import torch\nopt = torch.optim.SGD(params, lr=0.1)\nlr = opt.state_dict()['scale']\n",
        "def f(torch):\n    scaler = torch.cuda.amp.GradScaler()\n    return scaler.state_dict()['scale']\n",
        "import mylib as torch\nscaler = torch.cuda.amp.GradScaler()\ns = scaler.state_dict()['scale']\n",
    ]
    invalid = [
        Example(
            "import torch\n\nscaler = torch.cuda.amp.GradScaler()\nlog({'loss_scale': scaler.state_dict()['scale']})\n",
            "import torch\n\nscaler = torch.cuda.amp.GradScaler()\nlog({'loss_scale': scaler.get_scale()})\n",
        ),
        Example(
            "from torch.amp import GradScaler as Scaler\n\nclass Trainer:\n    def __init__(self):\n"
            "        self.scaler = Scaler('cuda')\n\n    def stats(self):\n"
            "        return self.scaler.state_dict()[\"growth_factor\"]\n",
            "from torch.amp import GradScaler as Scaler\n\nclass Trainer:\n    def __init__(self):\n"
            "        self.scaler = Scaler('cuda')\n\n    def stats(self):\n"
            "        return self.scaler.get_growth_factor()\n",
        ),
        Example(
            "import porter_runtime\nscaler = porter_runtime.GradScaler(enabled=amp)\nscale = scaler.state_dict()['scale']\n",
            "import porter_runtime\nscaler = porter_runtime.GradScaler(enabled=amp)\nscale = scaler.get_scale()\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._names: Optional[set[str]] = None

    @property
    def _scalers(self) -> set[str]:
        if self._names is None:
            visitor = _ScalerNames(self)
            self.ctx.module.visit(visitor)
            self._names = visitor.found
        return self._names

    def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
        call = original.value
        if (not isinstance(call, cst.Call) or call.args or not isinstance(call.func, cst.Attribute)
                or call.func.attr.value != "state_dict" or len(original.slice) != 1):
            return updated
        index = original.slice[0].slice
        key = string_value(index.value) if isinstance(index, cst.Index) else None
        if key not in _SCALER_GETTERS or dotted_name(call.func.value) not in self._scalers:
            return updated
        getter = cst.Attribute(updated.value.func.value, cst.Name(_SCALER_GETTERS[key]))
        new = cst.Call(getter).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return self.rewrite(original, new, "a disabled scaler's state_dict() is empty; the getter "
                            "returns the same value and also answers for a disabled scaler")
