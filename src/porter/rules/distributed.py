"""``torch.distributed`` and DDP: the NCCL backend and CUDA device ids."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from porter.rulebase import dist_guard
from porter.rulebase.rule import (
    BYTES_GAP,
    Example,
    Needs,
    Rule,
    Safety,
    clean_args,
    string_value,
)
from porter.rulebase.syntax import (
    EQ,
    argument,
    argument_pair,
    is_none,
    is_runtime_call,
    replace_arg,
)

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
    name = "nccl-init-process-group"
    safety = Safety.SAFE
    needs = Needs(
        calls_only=True,
        targets=frozenset({"torch.distributed.init_process_group",
                           "torch.distributed.distributed_c10d.init_process_group"}),
    )

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
            # `dist` is left unused and goes (torch imports torch.distributed itself)
            "import porter_runtime\n\nporter_runtime.init_process_group(backend='nccl', init_method='env://')\n",
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
            "import porter_runtime\nporter_runtime.init_process_group(backend=args.dist_backend, **cfg)\n",
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

    DDP reached through an expression is ported the same way: a conditional
    (`(DDP if dist.is_initialized() else NullDDP)(model, device_ids=[rank])`) or a
    name the file binds to one (`wrapper = DDP`, `wrapper = DDP if ... else ...`).

    Known limits:
    A `device_ids` list built elsewhere (`device_ids=ids`) is reported, not rewritten.
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
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._bound: Optional[set[str]] = None

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


def _inits_process_group(facts) -> bool:
    return facts.uses_any(dist_guard.INIT, calls_only=True)


class CudaGuardSkipsDistributed(Rule):
    """`if not torch.cuda.is_available(): return` before distributed setup also lets a launched CPU run in.

    What:
    Where an `if` whose test is `not torch.cuda.is_available()` (alone or as an
    operand of `or`) returns, and the same block goes on to call
    `init_process_group`, the test becomes
    `not torch.cuda.is_available() and not porter_runtime.is_multiprocess_launch()`.

    Why:
    Research code skips distributed setup without CUDA. Off CUDA, a run started by
    torchrun with several processes then never gets a process group: each process
    trains alone as rank 0, or a later collective fails. With the port, a launcher's
    processes (`WORLD_SIZE` above 1) set up their group (Gloo, PT301).

    Fix safety:
    Safe. On CUDA `not torch.cuda.is_available()` is False and `and` stops there:
    the same branch runs. Off CUDA a plain single-process run (`WORLD_SIZE` unset or
    1) still returns early as before; only a multi-process launch goes on.

    Known limits:
    Only a guard in the same block as the setup call, ending in `return`, is seen;
    a guard around the call of a setup function in another function or file, and
    `if torch.cuda.is_available(): init_process_group(...)`, are PT202's.
    """

    code = "PT304"
    name = "cuda-guard-skips-distributed"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({dist_guard.IS_AVAILABLE}), file_filter=_inits_process_group)

    valid = [
        "import torch\n\ndef setup():\n    if not torch.cuda.is_available():\n        return\n    print('cuda')\n",
        "def setup(torch, dist):\n    if not torch.cuda.is_available():\n        return\n    dist.init_process_group('nccl')\n",
        "import torch\nimport torch.distributed as dist\n\ndef setup():\n    if not torch.cuda.is_available():\n"
        "        args.amp = False\n    dist.init_process_group('gloo')\n",
        "import mylib as torch\nimport torch.distributed as dist\n\ndef setup():\n    if not torch.cuda.is_available():\n"
        "        return\n    dist.init_process_group('gloo')\n",
    ]
    invalid = [
        Example(
            "import torch\nimport torch.distributed as dist\n\ndef init_distributed(args):\n"
            "    if not torch.cuda.is_available():\n        print('not using distributed mode')\n"
            "        args.distributed = False\n        return\n    dist.init_process_group('gloo')\n",
            "import porter_runtime\nimport torch\nimport torch.distributed as dist\n\ndef init_distributed(args):\n"
            "    if not torch.cuda.is_available() and not porter_runtime.is_multiprocess_launch():\n"
            "        print('not using distributed mode')\n"
            "        args.distributed = False\n        return\n    dist.init_process_group('gloo')\n",
        ),
        Example(
            "import os\nimport torch as t\nfrom torch.distributed import init_process_group\n\ndef setup():\n"
            "    if not t.cuda.is_available() or \"RANK\" not in os.environ:\n        return 0, 1\n"
            "    if True:\n        init_process_group(backend=\"gloo\")\n    return int(os.environ[\"RANK\"]), 2\n",
            "import porter_runtime\nimport os\nimport torch as t\nfrom torch.distributed import init_process_group\n\n"
            "def setup():\n    if (not t.cuda.is_available() and not porter_runtime.is_multiprocess_launch()) "
            "or \"RANK\" not in os.environ:\n        return 0, 1\n"
            "    if True:\n        init_process_group(backend=\"gloo\")\n    return int(os.environ[\"RANK\"]), 2\n",
        ),
        Example(
            "from torch.cuda import is_available\nimport porter_runtime\n\ndef setup(backend):\n"
            "    if not is_available(): return\n    porter_runtime.init_process_group(backend)\n",
            "from torch.cuda import is_available\nimport porter_runtime\n\ndef setup(backend):\n"
            "    if not is_available() and not porter_runtime.is_multiprocess_launch(): return\n"
            "    porter_runtime.init_process_group(backend)\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._guards: Optional[set[int]] = None

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        if self._guards is None:
            self._guards = dist_guard.distributed_guards(self)
        if id(original) not in self._guards:
            return updated
        new_test = self._port(original.test, updated.test, top=True)
        if new_test is updated.test:
            return updated
        if self.rewrite(original.test, new_test, "a multi-process launch off CUDA now sets up its process "
                        "group; CUDA and single-process runs take the same branch as before") is original.test:
            return updated
        return updated.with_changes(test=new_test)

    def _port(self, original, updated, top: bool):
        if isinstance(original, cst.BooleanOperation) and isinstance(original.operator, cst.Or):
            left = self._port(original.left, updated.left, top=False)
            right = self._port(original.right, updated.right, top=False)
            if left is updated.left and right is updated.right:
                return updated
            return updated.with_changes(left=left, right=right)
        if dist_guard.negated_availability(self, original) is None:
            return updated
        launch = cst.UnaryOperation(cst.Not(), self.runtime_call("is_multiprocess_launch"))
        new = cst.BooleanOperation(updated.with_changes(lpar=(), rpar=()), cst.And(), launch)
        return new.with_changes(lpar=updated.lpar, rpar=updated.rpar) if top else new.with_changes(
            lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


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

    Known limits:
    A module given as another expression (a call) with `sync_module_states` is
    reported, not rewritten (it would be evaluated twice). `fully_shard` (FSDP2) is
    not handled.
    """

    code = "PT305"
    name = "fsdp-device"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_FSDP)

    valid = [
        "def wrap(FSDP, model):\n    return FSDP(model, device_id=0)\n",
        "import mylib as fsdp\nmodel = fsdp.FullyShardedDataParallel(model, device_id=0)\n",
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
        Example(
            "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "model = FSDP(build(cfg), device_id=0, sync_module_states=True)\n",
            "import porter_runtime\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "model = FSDP(build(cfg), device_id=porter_runtime.device(0), sync_module_states=True)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func) or any(a.star for a in original.args):
            return updated
        new = self._device_id(original, updated)
        new = self._sync(original, new)
        if new is updated:
            return updated
        return self.rewrite(original, new, "FSDP runs on the runtime's device off CUDA; on CUDA it gets "
                            "the same device and sync as before")

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
