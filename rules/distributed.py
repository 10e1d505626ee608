"""``torch.distributed`` and DDP: the NCCL backend and CUDA device ids."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rule import Example, Rule, Safety, clean_args, string_value

from ._common import EQ, argument, argument_pair, is_none, is_runtime_call, replace_arg

_INIT_PARAMS = ("backend", "init_method", "timeout", "world_size", "rank", "store",
                "group_name", "pg_options", "device_id")


class NcclInitProcessGroup(Rule):
    """`dist.init_process_group("nccl", ...)` becomes `porter_runtime.init_process_group("nccl", ...)`.

    What:
    Rewrites `torch.distributed.init_process_group(...)` to
    `porter_runtime.init_process_group(...)` with the same arguments (positional ones
    after the backend become keywords) when the backend is a literal naming NCCL
    (`"nccl"`, `backend="nccl"`, `"cpu:gloo,cuda:nccl"`) or is not a literal
    (`backend=args.dist_backend`, a variable, `**cfg`): such a value is NCCL on a
    CUDA machine in practice. Calls with a literal non-NCCL backend ("gloo"), a choice
    between literals that includes one (`"nccl" if ... else "gloo"`) or no backend
    are left alone.

    Why:
    macOS builds of torch have only Gloo: `init_process_group("nccl")` raises
    `RuntimeError: Distributed package doesn't have NCCL built in`.

    Fix safety:
    Safe. On CUDA the runtime calls `torch.distributed.init_process_group` with exactly
    the caller's arguments (a `None` backend stays `None`). Off CUDA it passes
    `porter_runtime.dist_backend(backend)`: Gloo in place of NCCL, other backends
    kept. A multi-process launch on MPS raises a clear error instead (Gloo can't send
    MPS tensors).

    Known limits:
    Calls with `*args` are reported, not rewritten. `dist.new_group(backend="nccl")`
    is not handled.
    """

    code = "PT301"
    calls_only = True
    name = "nccl-init-process-group"
    safety = Safety.SAFE
    targets = frozenset({"torch.distributed.init_process_group",
                         "torch.distributed.distributed_c10d.init_process_group"})

    valid = [
        "def setup(dist):\n    dist.init_process_group('nccl')\n",
        "import mylib as dist\ndist.init_process_group('nccl')\n",
        "import torch.distributed as dist\ndist.init_process_group('gloo', rank=r, world_size=n)\n",
        "import torch.distributed as dist\ndist.init_process_group(init_method='env://')\n",
        "import torch, torch.distributed as dist\ndist.init_process_group('nccl' if torch.cuda.is_available() else 'gloo')\n",
    ]
    invalid = [
        Example(
            "import torch.distributed as dist\n\ndist.init_process_group(backend='nccl', init_method='env://')\n",
            "import porter_runtime\nimport torch.distributed as dist\n\n"
            "porter_runtime.init_process_group(backend='nccl', init_method='env://')\n",
        ),
        Example(
            "import torch as t\nt.distributed.init_process_group(\"nccl\", \"tcp://127.0.0.1:23456\", world_size=2, rank=rank)\n",
            "import porter_runtime\nimport torch as t\nporter_runtime.init_process_group(\"nccl\", "
            "init_method=\"tcp://127.0.0.1:23456\", world_size=2, rank=rank)\n",
        ),
        Example(
            "from torch.distributed import init_process_group\n\ndef setup(rank, world_size):\n"
            "    backend = 'nccl'\n    init_process_group(backend, rank=rank, world_size=world_size)\n",
            "import porter_runtime\n\ndef setup(rank, world_size):\n"
            "    backend = 'nccl'\n    porter_runtime.init_process_group(backend, rank=rank, world_size=world_size)\n",
        ),
        Example(
            "import torch.distributed as dist\ndist.init_process_group(backend=args.dist_backend, **cfg)\n",
            "import porter_runtime\nimport torch.distributed as dist\n"
            "porter_runtime.init_process_group(backend=args.dist_backend, **cfg)\n",
        ),
        Example("import torch.distributed as dist\ndist.init_process_group(*launch_args)\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func):
            return updated
        if any(a.star == "*" for a in original.args):
            self.flag(original, "`init_process_group(*args)`: the backend can't be seen; NCCL is not built "
                      "on macOS", suggestion="porter_runtime.init_process_group(*args)")
            return updated
        if not self._may_be_nccl(original):
            return updated
        new = updated.with_changes(func=self.runtime("init_process_group"), args=self._keyword_args(updated))
        return self.rewrite(original, new, "NCCL is not built on macOS; the runtime uses Gloo off CUDA "
                            "and forwards unchanged on CUDA")

    @staticmethod
    def _may_be_nccl(call: cst.Call) -> bool:
        backend = argument(call, "backend", 0)
        if backend is None:
            return any(a.star == "**" for a in call.args)  # a backend may hide in **kwargs
        value = string_value(backend.value)
        if isinstance(backend.value, cst.IfExp):  # "nccl" if ... else "gloo": the author's choice
            choices = [string_value(backend.value.body), string_value(backend.value.orelse)]
            if None not in choices and any("nccl" not in c.lower() for c in choices):  # type: ignore[union-attr]
                return False
        return "nccl" in value.lower() if value is not None else not is_none(backend.value)

    @staticmethod
    def _keyword_args(call: cst.Call) -> list[cst.Arg]:
        """The runtime takes only the backend positionally: name the others."""
        args = list(call.args)
        for i, arg in enumerate(args):
            if i and arg.keyword is None and not arg.star and i < len(_INIT_PARAMS):
                args[i] = arg.with_changes(keyword=cst.Name(_INIT_PARAMS[i]), equal=EQ)
        return clean_args(args) if args != list(call.args) else args


_DDP = frozenset({"torch.nn.parallel.DistributedDataParallel",
                  "torch.nn.parallel.distributed.DistributedDataParallel"})


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

    Known limits:
    A `device_ids` list built elsewhere (`device_ids=ids`) is reported, not rewritten.
    """

    code = "PT302"
    calls_only = True
    name = "ddp-device-ids"
    safety = Safety.SAFE
    targets = _DDP

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
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func):
            return updated
        new = updated
        old, ids = argument_pair(original, updated, "device_ids", 1)
        if ids is not None and not is_none(ids.value) and not is_runtime_call(self, old.value):
            single = self._single(ids.value)
            if single is None:
                self.flag(original, "DDP `device_ids` other than one `[rank]` can't be rewritten exactly; off "
                          "CUDA DDP needs `device_ids=None`",
                          suggestion="device_ids=porter_runtime.ddp_device_ids(local_rank)")
                return updated
            new = replace_arg(new, ids, self.runtime_call("ddp_device_ids", single))
        old, out = argument_pair(original, updated, "output_device", 2)
        if out is not None and not is_none(out.value) and not is_runtime_call(self, old.value):
            new = replace_arg(new, new.args[list(updated.args).index(out)],
                              self.runtime_call("ddp_output_device", out.value))
        if new is updated:
            return updated
        return self.rewrite(original, new, "DDP takes device ids only for CUDA modules; the runtime passes "
                            "them on CUDA and None elsewhere")

    @staticmethod
    def _single(node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        """``x`` of a one-element list ``[x]``."""
        if isinstance(node, cst.List) and len(node.elements) == 1 and isinstance(node.elements[0], cst.Element):
            return node.elements[0].value
        return None


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
    calls_only = True
    name = "barrier-device-ids"
    safety = Safety.SAFE
    targets = frozenset({"torch.distributed.barrier", "torch.distributed.distributed_c10d.barrier"})

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
