"""Device strings built at run time: `f"cuda:{rank}"`, `"cuda:{}".format(gpu)`, `"cuda:%d" % i`,
`"cuda:" + str(i)` (PT902)."""

from __future__ import annotations

import re

import libcst as cst

from porter.rulebase.evidence import String, Uses
from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value
from porter.rulebase.syntax import (
    argument_pair,
    is_runtime_call,
    replace_arg,
)

_FORMAT = re.compile(r"^cuda:\{\w*(:d)?\}$")
_PERCENT = re.compile(r"^cuda:%[dis]$")
_LOADERS = frozenset({"torch.load", "torch.serialization.load", "torch.jit.load"})
_DEVICE_CALLS = frozenset({"torch.device", "torch.set_default_device"})
_CUDA_PREFIX = re.compile(r"^cuda:")


#: A formatted string in the unit, or a checkpoint load whose `map_location=loc` may
#: name one assigned elsewhere (`_FormattedNames` sees every kept unit).
_FORMATS_IN_UNIT = String(_CUDA_PREFIX) | Uses(_LOADERS, calls_only=True)


def is_formatted_cuda(node: cst.BaseExpression) -> bool:
    """`f"cuda:{i}"`, `"cuda:{}".format(i)`, `"cuda:%d" % i`, `"cuda:" + str(i)`."""
    if isinstance(node, cst.FormattedString):
        parts = node.parts
        return (len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) and parts[0].value == "cuda:"
                and isinstance(parts[1], cst.FormattedStringExpression) and parts[1].format_spec is None)
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "format":
        template = string_value(node.func.value)
        return (template is not None and bool(_FORMAT.match(template)) and len(node.args) == 1
                and not node.args[0].star)
    if isinstance(node, cst.BinaryOperation):
        left = string_value(node.left)
        if isinstance(node.operator, cst.Modulo):
            single = not isinstance(node.right, cst.Tuple) or len(node.right.elements) == 1
            return left is not None and bool(_PERCENT.match(left)) and single
        return isinstance(node.operator, cst.Add) and left == "cuda:"
    return False


class _FormattedNames(cst.CSTVisitor):
    """Names assigned a formatted CUDA device string (`loc = "cuda:{}".format(gpu)`)."""

    def __init__(self) -> None:
        self.found: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        if is_formatted_cuda(node.value):
            self.found.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))


class FormattedCudaDevice(Rule):
    """`f"cuda:{rank}"` and other formatted CUDA device strings resolve through the runtime.

    What:
    Rewrites a device string built at run time (`f"cuda:{rank}"`,
    `"cuda:{}".format(gpu)`, `"cuda:%d" % i`, `"cuda:" + str(i)`) where it is used:
    `torch.device(s)` → `porter_runtime.device(s)`; `x.to(s)`, `device=s` of torch
    callables and `torch.set_default_device(s)` → `porter_runtime.device(s)`;
    `torch.load(..., map_location=s)` → `porter_runtime.map_location(s)`; an
    assignment, a `return` or a `device=` argument of another callable → 
    `str(porter_runtime.device(s))`, keeping it a string. `map_location=loc` where the
    file assigns `loc` such a string → `porter_runtime.map_location(loc)`.

    Why:
    Multi-GPU scripts name each process's GPU this way; without CUDA every tensor,
    module or checkpoint sent there fails (`Torch not compiled with CUDA enabled`,
    `Attempting to deserialize object on a CUDA device`).

    Fix safety:
    Safe. The string itself is passed on, so no value is reinterpreted: on CUDA
    `porter_runtime.device(s)` is `torch.device(s)` (`cuda:1` for `"cuda:1"`),
    `str()` of it is `s` again, and `porter_runtime.map_location(x)` returns `x`
    unchanged. Off CUDA they name the resolved device (the CPU for checkpoints on
    a Mac, then copied to MPS by `load_state_dict`).

    Known limits:
    A formatted string in any other place (a positional argument of a user
    function, a dict value) is left alone, as are templates with more text
    (`f"cuda:{i}{suffix}"`). A string with a non-canonical index (`"cuda:01"`) is
    `"cuda:1"` after `str()`.
    """

    code = "PT902"
    name = "formatted-cuda-device"
    safety = Safety.SAFE
    needs = Needs(words=frozenset({"cuda"}), strings=_CUDA_PREFIX, unit=_FORMATS_IN_UNIT)

    valid = [
        "print(f'cuda:{rank}')\n",
        "log('cuda:{}'.format(gpu))\n",
        "name = f'cuda:{rank}-{step}'\n",
        "def f(torch, rank):\n    return torch.device(f'cuda:{rank}')\n",
        "import mylib as torch\ndev = torch.device(f'cuda:{rank}')\n",
        "import torch\nstate = torch.load(path, map_location=loc)\n",
    ]
    invalid = [
        Example(
            "import torch\ndevice = torch.device(f'cuda:{rank}')\nmodel.to(f'cuda:{rank}')\n",
            "import porter_runtime\ndevice = porter_runtime.device(f'cuda:{rank}')\n"
            "model.to(porter_runtime.device(f'cuda:{rank}'))\n",
        ),
        Example(
            "import torch as t\n\nloc = 'cuda:{}'.format(args.gpu)\ncheckpoint = t.load(args.resume, map_location=loc)\n",
            "import porter_runtime\nimport torch as t\n\nloc = str(porter_runtime.device('cuda:{}'.format(args.gpu)))\n"
            "checkpoint = t.load(args.resume, map_location=porter_runtime.map_location(loc))\n",
        ),
        Example(
            "from torch import load, zeros\nsd = load(p, map_location='cuda:%d' % i)\nx = zeros(2, device='cuda:' + str(i))\n",
            "import porter_runtime\nfrom torch import load, zeros\nsd = load(p, map_location=porter_runtime.map_location('cuda:%d' % i))\n"
            "x = zeros(2, device=porter_runtime.device('cuda:' + str(i)))\n",
        ),
        Example(
            "import torch\n\ndef get_device(rank):\n    return f\"cuda:{rank}\"\n\ntrainer = Trainer(device=f\"cuda:{rank}\")\n"
            "torch.set_default_device(f\"cuda:{rank}\")\n",
            "import porter_runtime\nimport torch\n\ndef get_device(rank):\n    return str(porter_runtime.device(f\"cuda:{rank}\"))\n\n"
            "trainer = Trainer(device=str(porter_runtime.device(f\"cuda:{rank}\")))\n"
            "torch.set_default_device(porter_runtime.device(f\"cuda:{rank}\"))\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        names = _FormattedNames()
        ctx.module.visit(names)
        self._names = names.found

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.qualname(original.func)
        if target in _LOADERS:
            return self._load(original, updated)
        if target in _DEVICE_CALLS:
            return self._wrap(original, updated, argument_pair(original, updated, "device", 0), "device")
        func = original.func
        is_method = isinstance(func, cst.Attribute) and target is None
        if is_method and func.attr.value == "to":
            return self._wrap(original, updated, argument_pair(original, updated, "device", 0), "device")
        torch_call = target is not None and (target == "torch" or target.startswith("torch."))
        kind = "device" if torch_call or (is_method and func.attr.value.startswith("new_")) else "str"
        return self._wrap(original, updated, argument_pair(original, updated, "device"), kind)

    def _load(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        old, new = argument_pair(original, updated, "map_location", 1)
        if old is None or old.star:
            return updated
        if isinstance(old.value, cst.Name) and old.value.value in self._names:
            value = self.runtime_call("map_location", new.value)
            return self.rewrite(original, replace_arg(updated, new, value), _MESSAGE)
        return self._wrap(original, updated, (old, new), "location")

    def _wrap(self, original, updated, pair, kind: str) -> cst.BaseExpression:
        old, new = pair
        if old is None or old.star or not is_formatted_cuda(old.value) or is_runtime_call(self, updated):
            return updated
        if self.qualname(original.func) == "torch.device":
            return self.rewrite(original, self.runtime_call("device", new.value), _MESSAGE)
        return self.rewrite(original, replace_arg(updated, new, self._value(new.value, kind)), _MESSAGE)

    def _value(self, value: cst.BaseExpression, kind: str) -> cst.BaseExpression:
        if kind == "location":
            return self.runtime_call("map_location", value)
        call = self.runtime_call("device", value)
        return call if kind == "device" else cst.Call(cst.Name("str"), args=[cst.Arg(call)])

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        return self._as_string(original, updated)

    def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.AnnAssign:
        return self._as_string(original, updated) if original.value is not None else updated

    def leave_Return(self, original: cst.Return, updated: cst.Return) -> cst.Return:
        return self._as_string(original, updated) if original.value is not None else updated

    def _as_string(self, original, updated):
        if not is_formatted_cuda(original.value):
            return updated
        return self.rewrite(original, updated.with_changes(value=self._value(updated.value, "str")), _MESSAGE)


_MESSAGE = "a CUDA device string built at run time now resolves on this machine"
