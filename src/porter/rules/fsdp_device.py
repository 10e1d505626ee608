"""FSDP's CUDA ``device_id`` and ``sync_module_states`` (PT305)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
)
from porter.rulebase.syntax import (
    argument,
    argument_pair,
    is_none,
    is_runtime_call,
    replace_arg,
)


_FSDP = frozenset({"torch.distributed.fsdp.FullyShardedDataParallel",
                   "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel"})
_FSDP_PARAMS = ("module", "process_group", "sharding_strategy", "cpu_offload", "auto_wrap_policy",
                "backward_prefetch", "mixed_precision", "ignored_modules", "param_init_fn", "device_id",
                "sync_module_states")


class FsdpDevice(Rule):
    """FSDP's `device_id=local_rank` and `sync_module_states=True` go through the runtime.

    What:
    In `FullyShardedDataParallel(module, ...)` rewrites `device_id=x` →
    `device_id=porter_runtime.device(x)` (an integer index, `torch.cuda.current_device()`,
    a device) and `sync_module_states=s` →
    `sync_module_states=porter_runtime.fsdp_sync_module_states(module, s)` when the
    module is a name or attribute. An FSDP call with no `device_id` is reported:
    off CUDA FSDP then finds no accelerator.

    Why:
    Off CUDA, `device_id=0` raises `Cannot access accelerator device when none is
    available`, FSDP without `device_id` raises `FSDP needs a non-CPU accelerator
    device`, and `sync_module_states=True` raises `The module has CPU parameters or
    buffers when sync_module_states=True, which requires them to be on GPU`.

    Fix safety:
    Safe. On CUDA `porter_runtime.device(i)` is `torch.device("cuda", i)`, the device
    FSDP makes of `i` (a device is returned as it is), and
    `fsdp_sync_module_states(module, s)` returns `s`, so FSDP syncs as before. Off
    CUDA FSDP runs on the resolved device, and the runtime broadcasts rank 0's
    parameters and buffers itself before FSDP starts (what `sync_module_states` does
    on CUDA), then passes False.

    In `functools.partial(FSDP, ...)` the bound `device_id` is rewritten the same way, and
    with a bound `sync_module_states=True` the partial binds
    `porter_runtime.fsdp_syncing(FSDP)`: `FSDP` itself on CUDA, elsewhere FSDP called
    with `sync_module_states` passed through `fsdp_sync_module_states` with the module
    the partial is later called with.

    Known limits:
    A module given as another expression (a call) with `sync_module_states` is
    reported, not rewritten (it would be evaluated twice). `fully_shard` (FSDP2) is
    not handled.
    """

    code = "PT305"
    name = "fsdp-device"
    safety = Safety.SAFE
    # Not calls_only: `partial(FSDP, ...)` names FSDP without calling it.
    needs = Needs(targets=_FSDP)

    valid = [
        "def wrap(FSDP, model):\n    return FSDP(model, device_id=0)\n",
        "import mylib as fsdp\nmodel = fsdp.FullyShardedDataParallel(model, device_id=0)\n",
        # a partial of something else that takes a device_id
        "import functools\nfrom mylib import Wrapper\nwrap = functools.partial(Wrapper, device_id=0)\n",
        "import porter_runtime\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "model = FSDP(model, device_id=porter_runtime.device(rank), sync_module_states=False)\n",
    ]
    invalid = [
        Example(
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
            "model = FSDP(model, device_id=local_rank, sync_module_states=True, use_orig_params=True)\n",
            "import porter_runtime\nimport torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n\n"
            "model = FSDP(model, device_id=porter_runtime.device(local_rank), "
            "sync_module_states=porter_runtime.fsdp_sync_module_states(model, True), use_orig_params=True)\n",
        ),
        Example(
            "import torch as t\nfrom torch.distributed import fsdp\n\n"
            "self.model = fsdp.FullyShardedDataParallel(self.model, device_id=t.cuda.current_device())\n",
            "import porter_runtime\nimport torch as t\nfrom torch.distributed import fsdp\n\n"
            "self.model = fsdp.FullyShardedDataParallel(self.model, device_id=porter_runtime.device(t.cuda.current_device()))\n",
        ),
        Example(
            "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\nmodel = FSDP(model, auto_wrap_policy=policy)\n",
        ),
        Example(  # FSDP bound in a partial (a wrapper factory that a trainer calls with each block)
            dedent("""\
            import functools

            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            wrap = functools.partial(FSDP, device_id=local_rank, sync_module_states=True, use_orig_params=True)
            """),
            dedent("""\
            import porter_runtime
            import functools

            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            wrap = functools.partial(porter_runtime.fsdp_syncing(FSDP), device_id=porter_runtime.device(local_rank), sync_module_states=True, use_orig_params=True)
            """),
        ),
        Example(
            "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "model = FSDP(build(cfg), device_id=0, sync_module_states=True)\n",
            "import porter_runtime\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "model = FSDP(build(cfg), device_id=porter_runtime.device(0), sync_module_states=True)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self._partial(original):
            return self._bound_keywords(original, updated)
        if not self.matches(original.func) or any(a.star for a in original.args):
            return updated
        new = self._device_id(original, updated)
        new = self._sync(original, new)
        if new is updated:
            return updated
        return self.rewrite(original, new, "FSDP runs on the runtime's device off CUDA; on CUDA it gets "
                            "the same device and sync as before")

    def _partial(self, call: cst.Call) -> bool:
        """``functools.partial(FSDP, ...)``: the keywords FSDP gets later, module unknown."""
        first = call.args[0] if call.args else None
        return (first is not None and first.keyword is None and not first.star
                and self.matches(call.func, "functools.partial") is not None and self.matches(first.value) is not None)

    def _bound_keywords(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        new = updated
        old, arg = argument_pair(original, updated, "device_id", None)
        if old is not None and not is_none(old.value) and not _runtime_device(self, old.value):
            new = replace_arg(updated, arg, self.runtime_call("device", arg.value))
        sync, _ = argument_pair(original, updated, "sync_module_states", None)
        fsdp = updated.args[0].value
        if sync is not None and not is_runtime_call(self, sync.value) and not (
                isinstance(sync.value, cst.Name) and sync.value.value == "False"):
            if isinstance(fsdp, (cst.Name, cst.Attribute)):
                new = new.with_changes(args=[new.args[0].with_changes(value=self.runtime_call("fsdp_syncing", fsdp)),
                                             *new.args[1:]])
            else:
                self.flag(sync, "FSDP's `sync_module_states` bound by `partial` requires GPU tensors; off CUDA rank "
                          "0's states must be broadcast before FSDP, and the module is not known here",
                          suggestion="pass sync_module_states=porter_runtime.fsdp_sync_module_states(module, True) "
                          "where the partial is called with the module")
        if new is updated:
            return updated
        return self.rewrite(original, new, "FSDP bound by `partial` gets the runtime's device, and off CUDA syncs "
                            "the module it is called with before FSDP starts; on CUDA the same device and sync")

    def _device_id(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        old, arg = argument_pair(original, updated, "device_id", _FSDP_PARAMS.index("device_id"))
        if old is None:
            self.flag(original, "FSDP without `device_id` needs an accelerator: off CUDA it raises "
                      "\"FSDP needs a non-CPU accelerator device\"", suggestion="device_id=porter_runtime.device()")
            return updated
        if is_none(old.value) or _runtime_device(self, old.value):
            return updated
        return replace_arg(updated, arg, self.runtime_call("device", arg.value))

    def _sync(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        index = _FSDP_PARAMS.index("sync_module_states")
        old, _ = argument_pair(original, updated, "sync_module_states", index)
        if old is None or is_runtime_call(self, old.value) or (isinstance(old.value, cst.Name)
                                                                and old.value.value == "False"):
            return updated
        module = argument(original, "module", 0)
        if module is None or not isinstance(module.value, (cst.Name, cst.Attribute)):
            self.flag(original, "FSDP's `sync_module_states=True` requires GPU tensors; off CUDA rank 0's "
                      "states must be broadcast before FSDP", suggestion="sync_module_states="
                      "porter_runtime.fsdp_sync_module_states(module, True) with the module in a variable")
            return updated
        arg = updated.args[list(original.args).index(old)]
        value = updated.args[list(original.args).index(module)].value
        return replace_arg(updated, arg, self.runtime_call("fsdp_sync_module_states", value, arg.value))


def _runtime_device(rule: Rule, node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and rule.matches(node.func, "porter_runtime.device") is not None
