"""``torch.distributed.barrier(device_ids=...)`` (PT303)."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
)
from porter.rulebase.syntax import (
    argument_pair,
    is_none,
    is_runtime_call,
    replace_arg,
)


class BarrierDeviceIds(Rule):
    """`dist.barrier(device_ids=[rank])` passes the ids through `porter_runtime.barrier_device_ids`.

    What:
    Rewrites `torch.distributed.barrier(device_ids=ids)` (keyword or third positional
    argument) to `barrier(device_ids=porter_runtime.barrier_device_ids(ids))`.

    Why:
    `device_ids` is for NCCL process groups only; under Gloo (the only backend on
    macOS) a barrier with device ids fails.

    Fix safety:
    Safe. On CUDA `barrier_device_ids(ids)` returns `ids` unchanged; off CUDA it is
    None, the barrier's default.

    Known limits:
    Barriers called through a process-group object (`pg.barrier(...)`) are not matched.
    """

    code = "PT303"
    name = "barrier-device-ids"
    safety = Safety.SAFE
    needs = Needs(
        calls_only=True,
        targets=frozenset({"torch.distributed.barrier", "torch.distributed.distributed_c10d.barrier"}),
    )

    valid = [
        "def sync(dist, rank):\n    dist.barrier(device_ids=[rank])\n",
        "import mylib as dist\ndist.barrier(device_ids=[0])\n",
        "import torch.distributed as dist\ndist.barrier()\n",
    ]
    invalid = [
        Example(
            "import torch.distributed as dist\ndist.barrier(device_ids=[local_rank])\n",
            "import porter_runtime\nimport torch.distributed as dist\n"
            "dist.barrier(device_ids=porter_runtime.barrier_device_ids([local_rank]))\n",
        ),
        Example(
            "import torch as t\nt.distributed.barrier(None, False, [t.cuda.current_device()])\n",
            "import porter_runtime\nimport torch as t\n"
            "t.distributed.barrier(None, False, porter_runtime.barrier_device_ids([t.cuda.current_device()]))\n",
        ),
        Example(
            "from torch.distributed import barrier\nbarrier(device_ids=[rank])\n",
            "import porter_runtime\nfrom torch.distributed import barrier\n"
            "barrier(device_ids=porter_runtime.barrier_device_ids([rank]))\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func):
            return updated
        old, ids = argument_pair(original, updated, "device_ids", 2)
        if ids is None or is_none(ids.value) or is_runtime_call(self, old.value):
            return updated
        new = replace_arg(updated, ids, self.runtime_call("barrier_device_ids", ids.value))
        return self.rewrite(original, new, "barrier device ids are for NCCL only; the runtime passes them "
                            "on CUDA and None elsewhere")
