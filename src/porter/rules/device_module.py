"""A device's torch module looked up by the device's name (PT115): ``getattr(torch,
device_type)``, ``torch.get_device_module(device)``, then called as torch.cuda."""

from __future__ import annotations

import re
from textwrap import dedent

import libcst as cst

from porter.rulebase.rule import BYTES_GAP, Example, Needs, Rule, Safety, string_value
from porter.rulebase.syntax import runtime_call_of

#: Names whose lookup on ``torch`` is a device's module (a literal second argument).
_DEVICE_TYPES = frozenset({"cuda", "mps", "cpu", "xpu"})


class DeviceModuleAlias(Rule):
    """A device module looked up by name is wrapped in `porter_runtime.device_module(...)`.

    What:
    Wraps `getattr(torch, device_type)` (where the name says it is a device: `device`,
    `device_type`, `self.device.type`, or a literal `"cuda"`), `torch.get_device_module(...)`
    and `torch._utils._get_device_module(...)` in `porter_runtime.device_module(...)`.

    Why:
    Code written for several accelerators keeps the module and calls it as torch.cuda
    (torchtune's `get_torch_device_namespace().empty_cache()`, torchtitan's
    `device_module.reset_peak_memory_stats()`). On a Mac the port's device type is `mps`
    or `cpu`, whose modules lack most of those functions:
    `AttributeError: module 'torch.cpu' has no attribute 'empty_cache'`.

    Fix safety:
    Safe. The original lookup still runs, and on CUDA `device_module` returns what it
    returned. Off CUDA torch.cuda, torch.mps and torch.cpu come back as a view whose
    torch.cuda functions (`synchronize`, `empty_cache`, the memory statistics,
    `set_device`, `device`, `Event`, ...) are the runtime's twins; any other name is the
    module's own.

    Known limits:
    Only the lookup is wrapped: a module kept from an unwrapped lookup elsewhere (a
    default argument of another library) is not.
    """

    code = "PT115"
    name = "device-module-alias"
    safety = Safety.SAFE
    needs = Needs(words=frozenset({"torch"}),
                  byte_patterns=(re.compile(rb"getattr\(" + BYTES_GAP + rb"torch" + BYTES_GAP + rb",|get_device_module\("),),
                  whole_file=True)

    valid = [
        "import torch\n\ndtype = getattr(torch, cfg.dtype)\nact = getattr(torch, 'relu')\n",
        "import numpy as torch\n\nmod = getattr(torch, device_type)\n",
        "import porter_runtime\nimport torch\n\nmod = porter_runtime.device_module(getattr(torch, device_type))\n",
    ]
    invalid = [
        Example(
            dedent("""\
                import torch


                def get_torch_device_namespace():
                    device_type = get_device_support().device_type
                    try:
                        return getattr(torch, device_type)
                    except AttributeError:
                        return torch.cuda
                """),
            dedent("""\
                import porter_runtime
                import torch


                def get_torch_device_namespace():
                    device_type = get_device_support().device_type
                    try:
                        return porter_runtime.device_module(getattr(torch, device_type))
                    except AttributeError:
                        return torch.cuda
                """),
        ),
        Example(
            dedent("""\
                from torch._utils import _get_available_device_type, _get_device_module

                device_type = _get_available_device_type() or "cuda"
                device_module = _get_device_module(device_type)  # default device_module:torch.cuda
                """),
            dedent("""\
                import porter_runtime
                from torch._utils import _get_available_device_type, _get_device_module

                device_type = _get_available_device_type() or "cuda"
                device_module = porter_runtime.device_module(_get_device_module(device_type))  # default device_module:torch.cuda
                """),
        ),
        Example(
            "import torch\n\nhandle = torch.get_device_module(self._device)\nhandle.synchronize()\n",
            "import porter_runtime\nimport torch\n\n"
            "handle = porter_runtime.device_module(torch.get_device_module(self._device))\nhandle.synchronize()\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._wrapped: set[int] = set()  # lookups already inside porter_runtime.device_module(...)

    def visit_Call(self, node: cst.Call) -> None:
        if runtime_call_of(node) == "device_module" and node.args:
            self._wrapped.add(id(node.args[0].value))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if id(original) in self._wrapped or not self._is_lookup(original):
            return updated
        new = self.runtime_call("device_module", updated)
        return self.rewrite(original, new, "the device's module, looked up by name, now answers torch.cuda's "
                            "functions off CUDA (porter_runtime.device_module; unchanged on CUDA)")

    def _is_lookup(self, call: cst.Call) -> bool:
        if self.matches(call.func, "torch.get_device_module", "torch._utils._get_device_module") is not None:
            return True
        func = call.func
        if not (isinstance(func, cst.Name) and func.value == "getattr") or len(call.args) != 2:
            return False
        owner, name = call.args[0].value, call.args[1].value
        if self.qualname(owner) != "torch":
            return False
        literal = string_value(name)
        if literal is not None:
            return literal in _DEVICE_TYPES
        return "device" in cst.Module([]).code_for_node(name).lower()
