"""DDP's CUDA ``device_ids`` / ``output_device`` (PT302)."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from porter.rulebase.rule import (
    BYTES_GAP,
    Example,
    Needs,
    Rule,
    Safety,
    string_value,
)
from porter.rulebase.walk import nodes_of
from porter.rulebase.syntax import (
    argument,
    argument_pair,
    is_none,
    is_runtime_call,
    replace_arg,
)


_DDP = frozenset({"torch.nn.parallel.DistributedDataParallel",
                  "torch.nn.parallel.distributed.DistributedDataParallel",
                  "mmcv.parallel.MMDistributedDataParallel", "mmengine.model.MMDistributedDataParallel"})


class DdpDeviceIds(Rule):
    """DDP's `device_ids=[rank]` / `output_device=rank` become the runtime's per-device values.

    What:
    In `DistributedDataParallel(model, device_ids=[local_rank], output_device=local_rank)`
    rewrites `device_ids=[x]` → `device_ids=porter_runtime.ddp_device_ids(x)` and
    `output_device=x` → `output_device=porter_runtime.ddp_output_device(x)` (also when
    passed positionally). Other `device_ids` values (several ids, a variable) are
    reported.

    Why:
    DDP of a CPU (or MPS) module with device ids raises `ValueError:
    DistributedDataParallel device_ids and output_device arguments only work with
    single-device/multiple-device GPU modules or CPU modules, but got device_ids [0],
    output_device None, and module parameters {device(type='cpu')}.`

    Fix safety:
    Safe. On CUDA `ddp_device_ids(x)` is `[x]` and `ddp_output_device(x)` is `x`: the
    same arguments as before. Off CUDA both are None, which DDP requires there.

    DDP reached through an expression is ported the same way: a conditional
    (`(DDP if dist.is_initialized() else NullDDP)(model, device_ids=[rank])`) or a
    name the file binds to one (`wrapper = DDP`, `wrapper = DDP if ... else ...`).

    The arguments set in a dictionary that the same function then passes to DDP with
    `**` are ported the same way (detectron2's `create_ddp_model`:
    `kwargs["device_ids"] = [comm.get_local_rank()]`, then `DDP(model, **kwargs)`).

    OpenMMLab's `MMDistributedDataParallel` (mmcv, mmengine) is DDP with the same
    arguments, and is ported the same way.

    Known limits:
    A `device_ids` list built elsewhere (`device_ids=ids`) is reported, not rewritten.
    A copy of mmcv inside the repository (ControlNet's `annotator.uniformer.mmcv`) is
    not known to be mmcv.
    Through a conditional, the other class (`NullDDP`) also gets None off CUDA. A
    name bound to DDP is tracked per file, not per scope.
    """

    code = "PT302"
    name = "ddp-device-ids"
    safety = Safety.SAFE
    needs = Needs(
        targets=_DDP,
        whole_file=True,  # `wrapper = DDP` may be bound outside the function that calls it
    )

    valid = [
        "def wrap(DDP, model, rank):\n    return DDP(model, device_ids=[rank])\n",
        "import mylib as nn\nmodel = nn.parallel.DistributedDataParallel(model, device_ids=[rank])\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model, device_ids=None)\n",
    ]
    invalid = [
        Example(
            "from torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(model, device_ids=[local_rank], output_device=local_rank)\n",
            "import porter_runtime\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(model, device_ids=porter_runtime.ddp_device_ids(local_rank), "
            "output_device=porter_runtime.ddp_output_device(local_rank))\n",
        ),
        Example(
            "import torch as t\nmodel = t.nn.parallel.DistributedDataParallel(model, [args.gpu])\n",
            "import porter_runtime\nimport torch as t\n"
            "model = t.nn.parallel.DistributedDataParallel(model, porter_runtime.ddp_device_ids(args.gpu))\n",
        ),
        Example(
            "import torch.nn as nn\n\nmodel = nn.parallel.DistributedDataParallel(\n    model,\n"
            "    device_ids=[rank],\n    find_unused_parameters=True,\n)\n",
            "import porter_runtime\nimport torch.nn as nn\n\nmodel = nn.parallel.DistributedDataParallel(\n    model,\n"
            "    device_ids=porter_runtime.ddp_device_ids(rank),\n    find_unused_parameters=True,\n)\n",
        ),
        Example("from torch.nn.parallel import DistributedDataParallel\nm = DistributedDataParallel(m, device_ids=gpus)\n"),
        Example(
            "import torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
            "model = (DDP if dist.is_initialized() else NullDDP)(model, device_ids=[rank])\n",
            "import porter_runtime\nimport torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
            "model = (DDP if dist.is_initialized() else NullDDP)(model, device_ids=porter_runtime.ddp_device_ids(rank))\n",
        ),
        Example(
            "import torch.nn as nn\n\nwrapper = nn.parallel.DistributedDataParallel if distributed else Identity\n\n"
            "def wrap(model, gpu):\n    return wrapper(model, device_ids=[gpu], output_device=gpu)\n",
            "import porter_runtime\nimport torch.nn as nn\n\nwrapper = nn.parallel.DistributedDataParallel if distributed else Identity\n\n"
            "def wrap(model, gpu):\n    return wrapper(model, device_ids=porter_runtime.ddp_device_ids(gpu), "
            "output_device=porter_runtime.ddp_output_device(gpu))\n",
        ),
        Example(  # mmseg's apis/train.py
            "from mmcv.parallel import MMDistributedDataParallel\n\n"
            "model = MMDistributedDataParallel(\n    model.to(device),\n    device_ids=[local_rank],\n"
            "    broadcast_buffers=False)\n",
            "import porter_runtime\nfrom mmcv.parallel import MMDistributedDataParallel\n\n"
            "model = MMDistributedDataParallel(\n    model.to(device),\n"
            "    device_ids=porter_runtime.ddp_device_ids(local_rank),\n    broadcast_buffers=False)\n",
        ),
        Example(  # detectron2's create_ddp_model: the ids set in the kwargs DDP is given
            "from torch.nn.parallel import DistributedDataParallel\n\n\n"
            "def create_ddp_model(model, **kwargs):\n"
            "    if \"device_ids\" not in kwargs:\n"
            "        kwargs[\"device_ids\"] = [comm.get_local_rank()]\n"
            "    return DistributedDataParallel(model, **kwargs)\n",
            "import porter_runtime\nfrom torch.nn.parallel import DistributedDataParallel\n\n\n"
            "def create_ddp_model(model, **kwargs):\n"
            "    if \"device_ids\" not in kwargs:\n"
            "        kwargs[\"device_ids\"] = porter_runtime.ddp_device_ids(comm.get_local_rank())\n"
            "    return DistributedDataParallel(model, **kwargs)\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._bound: Optional[set[str]] = None
        self._functions: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return updated

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        """``kwargs["device_ids"] = [rank]`` (or ``"output_device"``) in a function that passes
        ``**kwargs`` to DDP."""
        target = original.targets[0].target if len(original.targets) == 1 else None
        if not (self._functions and isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name)
                and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index)):
            return updated
        key = string_value(target.slice[0].slice.value)
        if key not in ("device_ids", "output_device") or is_none(original.value) \
                or is_runtime_call(self, original.value) or not self._splatted_into_ddp(target.value.value):
            return updated
        if key == "output_device":
            new = self.runtime_call("ddp_output_device", updated.value)
        else:
            new = self._device_ids(original, updated.value, "porter_runtime.ddp_device_ids(local_rank)")
            if new is None:
                return updated
        return self.rewrite(original, updated.with_changes(value=new),
                            "DDP takes device ids only for CUDA modules; the runtime passes them on CUDA and None "
                            "elsewhere")

    def _splatted_into_ddp(self, name: str) -> bool:
        return any(
            any(arg.star == "**" and isinstance(arg.value, cst.Name) and arg.value.value == name for arg in call.args)
            and self._reaches_ddp(call.func)
            for call in nodes_of(self._functions[-1], (cst.Call,)))

    def _reaches_ddp(self, node: cst.BaseExpression) -> bool:
        """DDP itself, a conditional with DDP in a branch, or a name bound to either."""
        if self.matches(node):
            return True
        if isinstance(node, cst.IfExp):
            return self._reaches_ddp(node.body) or self._reaches_ddp(node.orelse)
        if isinstance(node, cst.Name) and self.qualname(node) is None:
            if not _assigned(node.value, self.ctx.source):
                return False  # `_DdpNames` finds only names assigned somewhere
            if self._bound is None:
                self._bound = set()
                self.ctx.module.visit(_DdpNames(self))
            return node.value in self._bound
        return False

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if argument(original, "device_ids", 1) is None and argument(original, "output_device", 2) is None:
            return updated  # nothing to rewrite, whatever the callee (and finding out may walk the module)
        if not self._reaches_ddp(original.func):
            return updated
        new = updated
        old, ids = argument_pair(original, updated, "device_ids", 1)
        if ids is not None and not is_none(ids.value) and not is_runtime_call(self, old.value):
            value = self._device_ids(original, ids.value, "device_ids=porter_runtime.ddp_device_ids(local_rank)")
            if value is None:
                return updated
            new = replace_arg(new, ids, value)
        old, out = argument_pair(original, updated, "output_device", 2)
        if out is not None and not is_none(out.value) and not is_runtime_call(self, old.value):
            new = replace_arg(new, new.args[list(updated.args).index(out)],
                              self.runtime_call("ddp_output_device", out.value))
        if new is updated:
            return updated
        return self.rewrite(original, new, "DDP takes device ids only for CUDA modules; the runtime passes "
                            "them on CUDA and None elsewhere")

    def _device_ids(self, original: cst.CSTNode, ids: cst.BaseExpression,
                    suggestion: str) -> Optional[cst.BaseExpression]:
        """``porter_runtime.ddp_device_ids(x)`` for ``[x]``; None, with a finding, for any other ids."""
        single = self._single(ids)
        if single is None:
            self.flag(original, "DDP `device_ids` other than one `[rank]` can't be rewritten exactly; off "
                      "CUDA DDP needs `device_ids=None`", suggestion=suggestion)
            return None
        return self.runtime_call("ddp_device_ids", single)

    @staticmethod
    def _single(node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        """``x`` of a one-element list ``[x]``."""
        if isinstance(node, cst.List) and len(node.elements) == 1 and isinstance(node.elements[0], cst.Element):
            return node.elements[0].value
        return None


def _assigned(name: str, source: bytes) -> bool:
    """Whether ``source`` may assign ``name`` (``name = ...``, ``(name) = ...``): a
    search of the bytes, which spares a walk of the whole module for every call of a
    local name."""
    word = re.escape(name.encode())
    return re.search(word + rb"(?<=\b" + word + rb")(?:" + BYTES_GAP + rb"\))*" + BYTES_GAP + rb"=(?!=)",
                     source) is not None


class _DdpNames(cst.CSTVisitor):
    """Names assigned DDP, or a conditional with DDP in a branch (``wrapper = DDP``)."""

    def __init__(self, rule: DdpDeviceIds) -> None:
        self.rule = rule

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            value = node.value
            if self.rule.matches(value) or (isinstance(value, cst.IfExp) and self.rule._reaches_ddp(value)):
                self.rule._bound.add(node.targets[0].target.value)
