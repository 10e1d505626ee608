"""Pinned memory: a DataLoader's ``pin_memory`` and ``Tensor.pin_memory()``, pinning only on CUDA."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.conditions.availability_checks import availability_test
from porter.rulebase.evidence import Keyword, String
from porter.rulebase.families.dataloader import DATALOADER
from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value
from porter.rulebase.syntax import (
    argument_pair,
    is_runtime_call,
    is_true,
    replace_arg,
)

_PIN_INDEX = 7  # pin_memory's position in DataLoader(...)
#: torch's tensor factories with a ``pin_memory=`` keyword (FlexGen's ``torch.zeros(..., pin_memory=pin_memory)``).
_FACTORIES = frozenset(f"torch.{n}" for n in ("empty", "zeros", "ones", "full", "rand", "randn", "randint",
                                               "randperm", "empty_strided", "tensor", "arange", "linspace"))


#: a `pin_memory=` / `pin_memory_device=` keyword, or a {"pin_memory": ...} entry
_PINS_MEMORY = Keyword("pin_memory", "pin_memory_device") | String(exact=frozenset({"pin_memory"}), word="pin_memory")


class PinMemory(Rule):
    """`pin_memory=True` becomes `pin_memory=porter_runtime.pin_memory()`.

    What:
    Rewrites `pin_memory=True` and `pin_memory=torch.cuda.is_available()` passed to
    any call, and the same values under a `"pin_memory"` dict key (the
    `kwargs = {"num_workers": 1, "pin_memory": True}` idiom), to
    `porter_runtime.pin_memory()`. In a `DataLoader(...)` call and a torch tensor factory
    (`torch.zeros(..., pin_memory=pin_memory)`, FlexGen's, blind round 17), any other
    non-literal value `v` becomes `porter_runtime.pin_memory(v)`; in a `DataLoader`,
    `pin_memory_device="cuda"` becomes `pin_memory_device=porter_runtime.pin_memory_device("cuda")`.

    Why:
    Pinning needs CUDA. On a Mac the DataLoader warns `'pin_memory' argument is set as
    true but not supported on MPS now, device pinned memory won't be used.` (2.7 and
    later) and `pin_memory_device` is deprecated from 2.9.

    Fix safety:
    Safe. On CUDA `porter_runtime.pin_memory()` is True (as were `True` and
    `torch.cuda.is_available()`), `porter_runtime.pin_memory(v)` is `bool(v)` (the
    DataLoader only tests its truth), and `pin_memory_device(d)` is `d`. Elsewhere they
    are False and `""`, which turn pinning off.

    Known limits:
    A non-literal value passed to anything but `DataLoader` and torch's factories is left alone;
    `loader.pin_memory` then reads a bool where the value was another truthy object.
    """

    code = "PT401"
    name = "pin-memory"
    safety = Safety.SAFE
    # `pin_memory=True` is rewritten in any call (`DataLoader`, `torch.empty`,
    # `torch.autograd.graph.save_on_cpu`: each pins only with CUDA), so the word alone
    # lets a file through the pre-filter, whatever the call's name.
    needs = Needs(words=frozenset({"pin_memory"}), evidence=_PINS_MEMORY)

    valid = [
        "def make(DataLoader, ds):\n    return DataLoader(ds, pin_memory=pin)\n",
        "import mylib\nloader = mylib.DataLoader(ds, pin_memory=pin)\n",
        "from torch.utils.data import DataLoader\nloader = DataLoader(ds, pin_memory=False)\n",
        "x = t.pin_memory()\n",
    ]
    invalid = [
        Example(
            "from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=32, pin_memory=True)\n",
            "import porter_runtime\nfrom torch.utils.data import DataLoader\n"
            "loader = DataLoader(ds, batch_size=32, pin_memory=porter_runtime.pin_memory())\n",
        ),
        Example(
            "import torch as t\nloader = t.utils.data.DataLoader(ds, pin_memory=args.pin_mem, pin_memory_device='cuda')\n",
            "import porter_runtime\nimport torch as t\nloader = t.utils.data.DataLoader(ds, "
            "pin_memory=porter_runtime.pin_memory(args.pin_mem), "
            "pin_memory_device=porter_runtime.pin_memory_device('cuda'))\n",
        ),
        Example(
            "import torch\nkwargs = {'num_workers': 1, 'pin_memory': True} if use_cuda else {}\n"
            "loader = torch.utils.data.DataLoader(ds, **kwargs)\n",
            "import porter_runtime\nimport torch\n"
            "kwargs = {'num_workers': 1, 'pin_memory': porter_runtime.pin_memory()} if use_cuda else {}\n"
            "loader = torch.utils.data.DataLoader(ds, **kwargs)\n",
        ),
        Example(  # autograd's offloading pins its CPU copies only where CUDA is
            "from torch.autograd.graph import save_on_cpu\n"
            "with save_on_cpu(pin_memory=True, device_type=dev.type):\n    y = model(x)\n",
            "import porter_runtime\nfrom torch.autograd.graph import save_on_cpu\n"
            "with save_on_cpu(pin_memory=porter_runtime.pin_memory(), device_type=dev.type):\n    y = model(x)\n",
        ),
        Example(  # FlexGen's TorchDevice.allocate (H2O, blind round 17): the flag is the caller's
            "import torch\n\n\ndef allocate(shape, dtype, pin_memory=None):\n    if pin_memory is None:\n"
            "        pin_memory = True\n    return torch.zeros(shape, dtype=dtype, pin_memory=pin_memory)\n",
            "import porter_runtime\nimport torch\n\n\ndef allocate(shape, dtype, pin_memory=None):\n"
            "    if pin_memory is None:\n        pin_memory = True\n"
            "    return torch.zeros(shape, dtype=dtype, pin_memory=porter_runtime.pin_memory(pin_memory))\n",
        ),
        Example(
            "import torch\nloader = make_loader(ds, pin_memory=torch.cuda.is_available())\n",
            "import porter_runtime\nloader = make_loader(ds, pin_memory=porter_runtime.pin_memory())\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        loader = self.matches(original.func, *DATALOADER) is not None
        new = updated
        old, pin = argument_pair(original, updated, "pin_memory", _PIN_INDEX if loader else None)
        if pin is not None:
            value = self._pin_value(old.value, pin.value, loader or self.qualname(original.func) in _FACTORIES)
            if value is not None:
                new = replace_arg(new, new.args[list(updated.args).index(pin)], value)
        old, dev = argument_pair(original, updated, "pin_memory_device")
        if loader and dev is not None and string_value(dev.value) != "" and not is_runtime_call(self, old.value):
            new = replace_arg(new, new.args[list(updated.args).index(dev)],
                              self.runtime_call("pin_memory_device", dev.value))
        if new is updated:
            return updated
        return self.rewrite(original, new, "memory pinning needs CUDA; the runtime pins on CUDA only")

    def leave_DictElement(self, original: cst.DictElement, updated: cst.DictElement) -> cst.DictElement:
        if string_value(original.key) != "pin_memory":
            return updated
        value = self._pin_value(original.value, updated.value, loader=False)
        if value is None:
            return updated
        return self.rewrite(original, updated.with_changes(value=value),
                            "memory pinning needs CUDA; the runtime pins on CUDA only")

    def _pin_value(self, old: cst.BaseExpression, new: cst.BaseExpression,
                   loader: bool) -> Optional[cst.BaseExpression]:
        """The runtime expression for a pin_memory value, or None to leave it."""
        if is_true(old) or availability_test(self, old) is True:
            return self.runtime_call("pin_memory")
        literal = isinstance(old, (cst.Name, cst.Integer)) and (
            isinstance(old, cst.Integer) or old.value in ("True", "False", "None"))
        if loader and not literal and not is_runtime_call(self, old):
            return self.runtime_call("pin_memory", new)
        return None


class PinTensor(Rule):
    """`x.pin_memory()` becomes `porter_runtime.pin_tensor(x)`.

    What:
    Rewrites calls of the `.pin_memory()` method with no arguments (tensors, and
    custom batch types that define it for the DataLoader).

    Why:
    Without CUDA, pinning a tensor on a Mac fails with `RuntimeError: Attempted to set
    the storage of a tensor on device "cpu" to a storage on different device "mps:0".
    This is no longer allowed; the devices must match.` (or crashes).

    Fix safety:
    Safe. On CUDA `porter_runtime.pin_tensor(x)` returns `x.pin_memory()`, whatever
    `x` is; elsewhere it returns `x` unchanged.

    Known limits:
    `.pin_memory(device)` (a deprecated argument) is reported, not rewritten. A call on
    an imported module (`mylib.pin_memory()`) is left alone.
    """

    code = "PT402"
    name = "pin-tensor"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"pin_memory"}))

    valid = [
        "import mylib\nmylib.pin_memory()\n",
        "flag = loader.pin_memory\n",
        "from torch.utils.data import DataLoader\nloader = DataLoader(ds, pin_memory=False)\n",
    ]
    invalid = [
        Example(
            "import torch\nx = torch.zeros(8).pin_memory()\n",
            "import porter_runtime\nimport torch\nx = porter_runtime.pin_tensor(torch.zeros(8))\n",
        ),
        Example(
            "import torch as t\n\nclass Batch:\n    def pin_memory(self):\n        self.inp = self.inp.pin_memory()\n"
            "        return self\n",
            "import porter_runtime\nimport torch as t\n\nclass Batch:\n    def pin_memory(self):\n"
            "        self.inp = porter_runtime.pin_tensor(self.inp)\n        return self\n",
        ),
        Example(
            "from torch import randn\nbuf = randn(4).pin_memory().to(device, non_blocking=True)\n",
            "import porter_runtime\nfrom torch import randn\n"
            "buf = porter_runtime.pin_tensor(randn(4)).to(device, non_blocking=True)\n",
        ),
        Example("x = t.pin_memory('cuda')\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "pin_memory":
            return updated
        if self.qualname(func.value) is not None:
            return updated  # a function of an imported module, not a tensor method
        if original.args:
            self.flag(original, "`.pin_memory(device)` pins for a CUDA device; pinning needs CUDA",
                      suggestion="porter_runtime.pin_tensor(x)")
            return updated
        receiver = updated.func.value  # type: ignore[attr-defined]
        new = self.runtime_call("pin_tensor", receiver.with_changes(lpar=[], rpar=[])
                                if isinstance(receiver, cst.BaseExpression) and receiver.lpar else receiver)
        return self.rewrite(original, new.with_changes(lpar=updated.lpar, rpar=updated.rpar),
                            "pinning needs CUDA; the runtime pins on CUDA only")
