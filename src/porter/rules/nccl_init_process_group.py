"""``torch.distributed.init_process_group`` with the NCCL backend (PT301)."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.rule import (
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
    is_none,
)


#: DeepSpeed's own group setup: ``dist_backend`` is its first parameter.
_DEEPSPEED = frozenset({"deepspeed.init_distributed", "deepspeed.comm.init_distributed",
                        "deepspeed.comm.comm.init_distributed"})
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

    DeepSpeed's `deepspeed.init_distributed(dist_backend=X)` keeps its call, X becoming
    `porter_runtime.dist_backend(X)`: X on CUDA, Gloo in place of NCCL elsewhere.

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
                           "torch.distributed.distributed_c10d.init_process_group", *_DEEPSPEED}),
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
            "import porter_runtime\nporter_runtime.init_process_group(\"nccl\", "
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
        Example(  # gpt-neox's initialize.py: the backend is its config's ("nccl")
            "import deepspeed\n\n\ndef _initialize_distributed(neox_args):\n"
            "    deepspeed.init_distributed(\n        dist_backend=neox_args.distributed_backend,\n"
            "        auto_mpi_discovery=True,\n    )\n",
            "import porter_runtime\nimport deepspeed\n\n\ndef _initialize_distributed(neox_args):\n"
            "    deepspeed.init_distributed(\n        dist_backend=porter_runtime.dist_backend(neox_args.distributed_backend),\n"
            "        auto_mpi_discovery=True,\n    )\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if not target:
            return updated
        if target in _DEEPSPEED:
            return self._deepspeed(original, updated)
        if any(a.star == "*" for a in original.args):
            self.flag(original, "`init_process_group(*args)`: the backend can't be seen; NCCL is not built "
                      "on macOS", suggestion="porter_runtime.init_process_group(*args)")
            return updated
        if not self._may_be_nccl(original):
            return updated
        new = updated.with_changes(func=self.runtime("init_process_group"), args=self._keyword_args(updated))
        return self.rewrite(original, new, "NCCL is not built on macOS; the runtime uses Gloo off CUDA "
                            "and forwards unchanged on CUDA")

    def _deepspeed(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """``deepspeed.init_distributed(dist_backend=X)``: X through porter_runtime.dist_backend,
        X itself on CUDA (gpt-neox passes its config's "nccl", blind round 10)."""
        backend = argument(original, "dist_backend", 0)
        if backend is None or backend.star or is_none(backend.value) or not self._may_be_nccl(original, "dist_backend"):
            return updated
        value = backend.value
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "dist_backend":
            return updated  # a second run: already the runtime's
        index = list(original.args).index(backend)
        args = list(updated.args)
        args[index] = args[index].with_changes(value=self.runtime_call("dist_backend", args[index].value))
        return self.rewrite(original, updated.with_changes(args=args), "NCCL is not built on macOS; "
                            "porter_runtime.dist_backend gives Gloo off CUDA and the same backend on CUDA")

    @staticmethod
    def _may_be_nccl(call: cst.Call, name: str = "backend") -> bool:
        backend = argument(call, name, 0)
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
