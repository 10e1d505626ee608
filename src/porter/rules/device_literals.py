"""Literal CUDA device specs: ``torch.device("cuda")``, ``device="cuda"``, ``.to("cuda")``,
(the ``"cuda"`` defaults of device options are PT005's: device_option_default.py)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.project.query import receiver_overrides
from porter.rulebase.evidence import Passes
from porter.rulebase.families.devices.specs import DEVICE_METHODS, replace_device_keyword, runtime_device
from porter.rulebase.families.thirdparty.uses import example_code
from porter.rulebase.rule import (
    CUDA_SPEC,
    Example,
    Needs,
    Rule,
    Safety,
    cuda_spec,
    positional,
)
from porter.rulebase.syntax import index_args


class TorchDeviceCuda(Rule):
    """`torch.device("cuda"...)` becomes `porter_runtime.device(...)`.

    What:
    Rewrites `torch.device("cuda")`, `torch.device("cuda:1")`,
    `torch.device("cuda", i)` and `torch.device(type="cuda", index=i)`.

    Why:
    Tensors and modules sent to a literal CUDA device fail without CUDA.

    Fix safety:
    Safe. On CUDA the runtime returns exactly `torch.device("cuda")` (no index),
    `torch.device("cuda", 1)` or `torch.device("cuda", i)`; elsewhere it returns the
    resolved device (MPS, XPU or CPU), or what `PORTER_DEVICE` names.

    Known limits:
    Device strings built at run time (f-strings, variables) are not rewritten here.
    """

    code = "PT002"
    name = "torch-device-cuda"
    safety = Safety.SAFE
    needs = Needs(
        calls_only=True,
        targets=frozenset({"torch.device"}),
        words=frozenset({"cuda"}),
        strings=CUDA_SPEC,
    )

    valid = [
        "import torch\ndev = torch.device('cpu')\n",
        "def f(torch):\n    return torch.device('cuda')\n",
        "import mylib as torch\ndev = torch.device('cuda')\n",
        "import torch\ndev = torch.device(name)\n",
    ]
    invalid = [
        Example(
            "import torch\ndev = torch.device('cuda')\n",
            "import porter_runtime\ndev = porter_runtime.device()\n",
        ),
        Example(  # an f-string left with nothing to format is its text
            "import torch\ndevice = torch.device(f\"cuda\")\n",
            "import porter_runtime\ndevice = porter_runtime.device()\n",
        ),
        Example(
            "import torch as t\ndev = t.device(\"cuda:1\")\n",
            "import porter_runtime\ndev = porter_runtime.device(1)\n",
        ),
        Example(
            "from torch import device\ndev = device('cuda', rank)\n",
            "import porter_runtime\ndev = porter_runtime.device(rank)\n",
        ),
        Example(
            "import torch\ndev = torch.device(type='cuda', index=local_rank)\n",
            "import porter_runtime\ndev = porter_runtime.device(local_rank)\n",
        ),
        Example(  # picotron: the DEVICE setting says "cuda" on a Mac too, so its test guards nothing
            "import os\nimport torch\n\nrank = int(os.getenv('LOCAL_RANK', 0))\n"
            "device = torch.device('cuda', rank) if os.getenv('DEVICE', 'cuda') == 'cuda' else torch.device('cpu')\n",
            "import porter_runtime\nimport os\nimport torch\n\nrank = int(os.getenv('LOCAL_RANK', 0))\n"
            "device = porter_runtime.device(rank) if os.getenv('DEVICE', 'cuda') == 'cuda' else torch.device('cpu')\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func):
            return updated
        spec = self._spec(updated)
        if spec is None:
            return updated
        new = self.runtime_call("device", *spec)
        return self.rewrite(original, new, "a literal CUDA device now resolves at run time")

    @staticmethod
    def _spec(call: cst.Call) -> Optional[list[cst.BaseExpression]]:
        named = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        args = positional(call)
        if len(args) + len(named) != len(call.args) or not 1 <= len(call.args) <= 2:
            return None
        kind = args[0].value if args else named.get("type")
        index = args[1].value if len(args) > 1 else named.get("index")
        parsed = cuda_spec(kind) if kind is not None else None
        if parsed is None:
            return None
        if index is not None:
            return None if parsed[0] is not None else [index]
        return index_args(parsed[0])


# Device values named at run time; literals are PT002's (and formatted strings the
# idiom rules'), so only opaque expressions are taken here.
_OPAQUE = (cst.Name, cst.Attribute, cst.Subscript, cst.Call)


class TorchDeviceDynamic(Rule):
    """`torch.device(value)` with a run-time value becomes `porter_runtime.device(value)`.

    What:
    Rewrites `torch.device(x)` whose one argument is a name, attribute, subscript or
    call (`torch.device(args.device)`, `with torch.device(config.device):`,
    `torch.device(cfg["device"])`), typically a device read from a command line or
    a config file that says `cuda`.

    Why:
    A config or option that says `cuda` reaches `torch.device` and every tensor made
    on that device fails without CUDA.

    Fix safety:
    Safe. On CUDA `porter_runtime.device(x)` equals `torch.device(x)` for every value
    `torch.device` accepts: `"cuda"` is `cuda` (no index), `"cuda:1"` and `1` are
    `cuda:1`, `"cpu"` / `"mps"` / `"meta"` and `torch.device` objects are returned as
    they are; a value torch rejects raises the same error. Elsewhere a CUDA value
    maps to the resolved device and any other value is kept.

    Known limits:
    `None` (which `torch.device` rejects) becomes the default device. String
    literals are PT002's; formatted strings, arithmetic, conditional expressions,
    two-argument and keyword forms are left alone. A device string used without
    `torch.device` (`x.to(cfg.device)`) is not seen: PT701 reports the config.
    """

    code = "PT006"
    name = "torch-device-dynamic"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=frozenset({"torch.device"}))

    valid = [
        "import torch\ndev = torch.device('cpu')\n",
        "def f(torch, name):\n    return torch.device(name)\n",
        "import mylib as torch\ndev = torch.device(args.device)\n",
        "import torch\ndev = torch.device(f'cuda:{rank}')\n",
        "import torch\ndev = torch.device('cuda', rank)\n",
        "import torch\ndev = torch.device(type=kind)\n",
    ]
    invalid = [
        Example(
            "import torch\n\nwith torch.device(config.device):\n    model = Model()\n",
            "import porter_runtime\n\nwith porter_runtime.device(config.device):\n    model = Model()\n",
        ),
        Example(
            "import torch as t\ndev = t.device(cfg['device'])  # from the YAML\n",
            "import porter_runtime\ndev = porter_runtime.device(cfg['device'])  # from the YAML\n",
        ),
        Example(
            "from torch import device\ndev = device(args.device)\n",
            "import porter_runtime\ndev = porter_runtime.device(args.device)\n",
        ),
        Example(
            "import torch\n\ndef to_dev(x, name):\n    return x.to(torch.device(name))\n",
            "import porter_runtime\n\ndef to_dev(x, name):\n    return x.to(porter_runtime.device(name))\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func) or not updated.func.deep_equals(original.func):
            return updated  # not torch.device, or another rule already replaced the call
        args = updated.args
        if len(args) != 1 or args[0].keyword is not None or args[0].star:
            return updated
        if not isinstance(args[0].value, _OPAQUE) or _formats_a_string(args[0].value):
            return updated
        new = self.runtime_call("device", args[0].value)
        return self.rewrite(original, new, "a device named at run time now resolves on this machine")


def _formats_a_string(node: cst.BaseExpression) -> bool:
    """``"cuda:{}".format(i)``: a formatted device, left to the idiom rules."""
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
            and isinstance(node.func.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)))


#: a `device="cuda"` keyword
_CUDA_DEVICE_KEYWORD = Passes(keyword="device", string=CUDA_SPEC)

#: torch callables whose device comes first or late by position, with its keyword name and
#: whether it is a device type (`"cuda"`: `porter_runtime.device_type()`) or a device.
_POSITIONAL_DEVICE = {
    # the mesh and its factory, under every module torch exports them from (duo-attention
    # imports DeviceMesh from the DTensor package, torch.distributed._tensor: blind round 18)
    **{f"torch.distributed.{module}{name}": (0, "device_type", True)
       for module in ("", "device_mesh.", "_tensor.", "_tensor.device_mesh.", "tensor.", "tensor.device_mesh.")
       for name in ("init_device_mesh", "DeviceMesh")},
    "torch.nn.attention.flex_attention.create_block_mask": (5, "device", False),
    "torch.nn.attention.flex_attention.create_mask": (5, "device", False),
}
_CUDA_DEVICE_ARGUMENT = _CUDA_DEVICE_KEYWORD
for _name, (_at, _keyword, _) in _POSITIONAL_DEVICE.items():
    _last = _name.rsplit(".", 1)[-1]
    _CUDA_DEVICE_ARGUMENT = _CUDA_DEVICE_ARGUMENT | Passes(call=_last, position=_at, string=CUDA_SPEC)
    if _keyword != "device":
        _CUDA_DEVICE_ARGUMENT = _CUDA_DEVICE_ARGUMENT | Passes(call=_last, keyword=_keyword, string=CUDA_SPEC)


class TorchDeviceKeyword(Rule):
    """`device="cuda"` in a torch call becomes `device=porter_runtime.device()`.

    What:
    Rewrites a literal `"cuda"` / `"cuda:N"` passed as `device=` to any torch
    function or class (`torch.zeros`, `torch.randn`, `torch.arange`, `nn.Linear`,
    `torch.Generator`, ...), and passed by position to the torch callables that take
    their device that way: `init_device_mesh("cuda", ...)` / `DeviceMesh("cuda", ...)`
    (a device type: `porter_runtime.device_type()`, also as `device_type="cuda"`) and
    FlexAttention's `create_block_mask(mask_mod, B, H, Q, KV, "cuda")` / `create_mask`.

    Why:
    Without CUDA these calls raise `Torch not compiled with CUDA enabled`.

    Fix safety:
    Safe. Torch accepts a `torch.device` wherever it accepts a device string, and on
    CUDA the runtime's device is exactly the device the string named.

    Known limits:
    Only torch's own callables are matched by name; untyped methods are PT003.
    """

    code = "PT004"
    name = "device-keyword-cuda"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=frozenset({"torch"}), words=frozenset({"cuda"}), strings=CUDA_SPEC,
                  evidence=_CUDA_DEVICE_ARGUMENT, unit=_CUDA_DEVICE_ARGUMENT)

    valid = [
        "import torch\nx = torch.zeros(2, device='cpu')\n",
        "def f(torch):\n    return torch.zeros(2, device='cuda')\n",
        "import numpy as torch\nx = torch.zeros(2, device='cuda')\n",
    ]
    invalid = [
        Example(
            "import torch\nx = torch.zeros(2, device='cuda')\n",
            "import porter_runtime\nimport torch\nx = torch.zeros(2, device=porter_runtime.device())\n",
        ),
        Example(
            "import torch as t\nlayer = t.nn.Linear(4, 4, device=\"cuda:0\")\n",
            "import porter_runtime\nimport torch as t\nlayer = t.nn.Linear(4, 4, device=porter_runtime.device(0))\n",
        ),
        Example(
            "import torch\n\n\ndef sample(n):\n    return torch.randn(n, 3, device=f'cuda')\n",
            "import porter_runtime\nimport torch\n\n\ndef sample(n):\n    return torch.randn(n, 3, device=porter_runtime.device())\n",
        ),
        Example(
            "from torch import randn\nx = randn(3, device = 'cuda')\n",
            "import porter_runtime\nfrom torch import randn\nx = randn(3, device = porter_runtime.device())\n",
        ),
        # an FSDP2 trainer's mesh (lingua) and a FlexAttention benchmark's block mask (attention-gym)
        Example(
            example_code("""
                from torch.distributed.device_mesh import init_device_mesh


                def get_device_mesh(dp_replicate, dp_shard):
                    return init_device_mesh("cuda", mesh_shape=(dp_replicate, dp_shard),
                                            mesh_dim_names=("dp_replicate", "dp_shard"))
                """),
            example_code("""
                import porter_runtime
                from torch.distributed.device_mesh import init_device_mesh


                def get_device_mesh(dp_replicate, dp_shard):
                    return init_device_mesh(porter_runtime.device_type(), mesh_shape=(dp_replicate, dp_shard),
                                            mesh_dim_names=("dp_replicate", "dp_shard"))
                """),
        ),
        Example(  # duo-attention's FSDP2 training: the mesh from the DTensor package
            example_code("""
                from torch.distributed._tensor import DeviceMesh

                mesh = DeviceMesh(device_type="cuda", mesh=[i for i in range(world_size)])
                """),
            example_code("""
                import porter_runtime
                from torch.distributed._tensor import DeviceMesh

                mesh = DeviceMesh(device_type=porter_runtime.device_type(), mesh=[i for i in range(world_size)])
                """),
        ),
        Example(
            example_code("""
                from torch.nn.attention.flex_attention import create_block_mask


                def causal(b, h, q_idx, kv_idx):
                    return q_idx >= kv_idx


                block_mask = create_block_mask(causal, 1, 1, seq_len, seq_len, "cuda", BLOCK_SIZE=128)
                """),
            example_code("""
                import porter_runtime
                from torch.nn.attention.flex_attention import create_block_mask


                def causal(b, h, q_idx, kv_idx):
                    return q_idx >= kv_idx


                block_mask = create_block_mask(causal, 1, 1, seq_len, seq_len, porter_runtime.device(), BLOCK_SIZE=128)
                """),
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.qualname(original.func)
        if name is None or not (name == "torch" or name.startswith("torch.")):
            return updated
        slot = _POSITIONAL_DEVICE.get(name)
        if slot is not None:
            return self._positional(original, updated, *slot)
        return replace_device_keyword(self, original, updated, as_string=False)

    def _positional(self, original: cst.Call, updated: cst.Call, at: int, keyword: str,
                    device_type: bool) -> cst.BaseExpression:
        args = list(updated.args)
        if any(a.star for a in args[: at + 1]):
            return updated
        found = next((i for i, a in enumerate(args) if a.keyword is not None and a.keyword.value == keyword), None)
        if found is None and len(args) > at and all(a.keyword is None for a in args[: at + 1]):
            found = at
        if found is None:
            return updated
        spec = cuda_spec(args[found].value)
        if spec is None or (device_type and spec[0] is not None):
            return updated  # a device type has no index ("cuda:1" is refused as it is)
        value = self.runtime_call("device_type") if device_type else runtime_device(self, spec[0], as_string=False)
        args[found] = args[found].with_changes(value=value)
        return self.rewrite(original, updated.with_changes(args=args), "a literal CUDA device now resolves at run time")


#: `.to("cuda")`, or `device="cuda"` passed by keyword
_MOVES_TO_CUDA = Passes(call="to", position=0, string=CUDA_SPEC) | _CUDA_DEVICE_KEYWORD


class MethodDeviceCuda(Rule):
    """`.to("cuda")` and `device="cuda"` in tensor methods use the runtime's device.

    What:
    Rewrites `x.to("cuda")`, `x.to("cuda:1")`, `x.to(device="cuda")` and
    `device="cuda"` in `x.new_zeros/new_ones/new_empty/new_full/new_tensor(...)`.

    Why:
    Sending a tensor or module to a literal CUDA device fails without CUDA.

    Fix safety:
    Safe. `.to` accepts a `torch.device` wherever it accepts a string, and on CUDA the
    runtime's device is the device the string named.

    Known limits:
    The receiver's type is known only where the file constructs it: a class of the
    repository with its own `to` (porter.project) gets `porter_runtime.device_str()`
    instead, a string as before (on CUDA the very same string). A call on an imported module (`mylib.to("cuda")`) is left alone.
    """

    code = "PT003"
    name = "method-device-cuda"
    safety = Safety.SAFE
    needs = Needs(
        methods=DEVICE_METHODS,
        words=frozenset({"cuda"}),
        strings=CUDA_SPEC,
        evidence=_MOVES_TO_CUDA,
        unit=_MOVES_TO_CUDA,
    )

    valid = [
        "x = x.to('cpu')\n",
        "import mylib\nmylib.to('cuda')\n",
        "x = x.to(device)\n",
        "def f(torch, x):\n    return x.to(torch.float16)\n",
    ]
    invalid = [
        Example(
            "x = x.to('cuda')\n",
            "import porter_runtime\nx = x.to(porter_runtime.device())\n",
        ),
        Example(
            "import torch as t\nmodel = t.nn.Linear(2, 2).to(\"cuda:1\", non_blocking=True)\n",
            "import porter_runtime\nimport torch as t\n"
            "model = t.nn.Linear(2, 2).to(porter_runtime.device(1), non_blocking=True)\n",
        ),
        Example(
            "from torch import ones\ny = ones(2).new_zeros(3, device='cuda')\n",
            "import porter_runtime\nfrom torch import ones\ny = ones(2).new_zeros(3, device=porter_runtime.device())\n",
        ),
        Example(
            "def f(x, torch):\n    return x.to(device='cuda')\n",
            "import porter_runtime\ndef f(x, torch):\n    return x.to(device=porter_runtime.device())\n",
        ),
        # a class of the repository with its own `to(self, device)` that reads a string
        Example(
            "from utils.meters import Meter\n\nmeter = Meter().to('cuda')\n",
            "import porter_runtime\nfrom utils.meters import Meter\n\nmeter = Meter().to(porter_runtime.device_str())\n",
            path="train.py", line=3, message="`Meter` defines its own `to`",
            project=(("utils/meters.py", "class Meter:\n    def to(self, device):\n"
                      "        self.device = device.split(':')[0]\n        return self\n"),),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._receivers: dict = {}  # porter.project.query's cache of this file's instances

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in self.needs.methods:
            return updated
        if self.qualname(func.value) is not None:
            return updated  # a function of an imported module, not a tensor method
        owner = receiver_overrides(self.ctx.project, self.ctx.module, func.value, func.attr.value, self._receivers)
        if owner is not None and any(cuda_spec(a.value) is not None for a in original.args):
            return self._own_method(original, updated, owner)
        if func.attr.value == "to" and updated.args and updated.args[0].keyword is None:
            spec = cuda_spec(updated.args[0].value)
            if spec is not None and not updated.args[0].star:
                new_first = updated.args[0].with_changes(value=self.runtime_call("device", *index_args(spec[0])))
                new = updated.with_changes(args=[new_first, *updated.args[1:]])
                return self.rewrite(original, new, "a literal CUDA device now resolves at run time")
        return replace_device_keyword(self, original, updated, as_string=False)

    def _own_method(self, original: cst.Call, updated: cst.Call, owner: str) -> cst.BaseExpression:
        """A repository class's own ``to("cuda")`` may want the string it was given: it
        gets the runtime's device as a string, which on CUDA is the original string."""
        first = updated.args[0] if updated.args and updated.args[0].keyword is None else None
        spec = cuda_spec(first.value) if first is not None and not first.star else None
        if spec is None:
            self.flag(original, f"`{owner}` defines its own `{original.func.attr.value}`, which may not take a "
                      "`torch.device`; not rewritten", suggestion="x.to(porter_runtime.device_str())")
            return updated
        new_first = first.with_changes(value=self.runtime_call("device_str", *index_args(spec[0])))
        return self.rewrite(original, updated.with_changes(args=[new_first, *updated.args[1:]]),
                            f"`{owner}` defines its own `to`: it gets the device as a string, as before")
