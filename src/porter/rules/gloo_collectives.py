"""What Gloo, the backend off CUDA, does not do that NCCL does (PT306)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.evidence import CallsMethod, Uses
from porter.rulebase.rule import Example, Needs, Rule, Safety, keyword, positional
from porter.rulebase.syntax import is_runtime_call

_GATHER = frozenset({"torch.distributed.all_gather_into_tensor",
                     "torch.distributed.distributed_c10d.all_gather_into_tensor"})
_SCATTER = frozenset({"torch.distributed.reduce_scatter", "torch.distributed.reduce_scatter_tensor",
                      "torch.distributed.distributed_c10d.reduce_scatter",
                      "torch.distributed.distributed_c10d.reduce_scatter_tensor"})
_EVIDENCE = Uses(_GATHER, calls_only=True) | (Uses(_SCATTER, calls_only=True) & CallsMethod("get_future"))


class GlooCollectives(Rule):
    """Collectives that Gloo runs differently from NCCL go through the runtime.

    What:
    Rewrites the input of `dist.all_gather_into_tensor(out, x)` to
    `porter_runtime.collective_input(x)`, and the future of an async reduce-scatter,
    `dist.reduce_scatter_tensor(out, x, async_op=True).get_future()`, to
    `porter_runtime.work_future(dist.reduce_scatter_tensor(...), out)`. A future asked
    of a reduce-scatter's work kept in a name (`work.get_future()` later) is reported.

    Why:
    Off CUDA the process group is Gloo (porter switches nccl to gloo there), and torch
    2.13's Gloo (checked on this CPU build) raises where NCCL runs:
    `all_gather_into_tensor` of an input that requires grad ("A view was created in
    no_grad mode and is being modified inplace with grad mode enabled"; a race with
    Gloo's worker thread, so on some calls and not others), and
    `get_future()` of a reduce-scatter's work ("Work::getFuture not implemented").

    Fix safety:
    Safe. On CUDA `collective_input(x)` is `x` and `work_future(work, out)` is
    `work.get_future()`. Off CUDA the input is detached (c10d collectives are not
    differentiable on any backend, so the gathered values are the same), and where
    Gloo has no future the runtime waits for the work and returns a completed future
    of `[out]`, the value NCCL's future gives. An output that is not a plain name or
    attribute (it would be evaluated twice) is reported instead.

    Known limits:
    Collectives called through a process-group object (`pg.allgather_into_tensor`) and
    the functional collectives are not matched.
    """

    code = "PT306"
    name = "gloo-collectives"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_GATHER | _SCATTER, evidence=_EVIDENCE)

    valid = [
        "import torch.distributed as dist\ndist.all_gather(outs, x)\n",
        "import torch.distributed as dist\nwork = dist.all_reduce(x, async_op=True)\nfut = work.get_future()\n",
        "import mylib as dist\ndist.all_gather_into_tensor(out, x)\n",
        "import torch.distributed as dist\ndist.reduce_scatter_tensor(out, x)\n",
    ]
    invalid = [
        Example(  # ZeRO-style: gather the flat parameter shards of every rank
            "import torch.distributed as dist\n\n\ndef gather_params(flat, shard, group):\n"
            "    dist.all_gather_into_tensor(flat, shard, group=group)\n    return flat\n",
            "import porter_runtime\nimport torch.distributed as dist\n\n\ndef gather_params(flat, shard, group):\n"
            "    dist.all_gather_into_tensor(flat, porter_runtime.collective_input(shard), group=group)\n"
            "    return flat\n",
        ),
        Example(  # overlap the gradient reduce-scatter with the next bucket's backward
            "import torch.distributed as dist\n\n\ndef reduce_bucket(grad_shard, bucket):\n"
            "    fut = dist.reduce_scatter_tensor(grad_shard, bucket, op=dist.ReduceOp.AVG, async_op=True)"
            ".get_future()\n    return fut.then(lambda f: f.value()[0])\n",
            "import porter_runtime\nimport torch.distributed as dist\n\n\ndef reduce_bucket(grad_shard, bucket):\n"
            "    fut = porter_runtime.work_future(dist.reduce_scatter_tensor(grad_shard, bucket, "
            "op=dist.ReduceOp.AVG, async_op=True), grad_shard)\n    return fut.then(lambda f: f.value()[0])\n",
        ),
        Example(  # the work kept, its future asked later: reported
            "import torch.distributed as dist\n\n\ndef step(out, grads):\n"
            "    work = dist.reduce_scatter_tensor(out, grads, async_op=True)\n"
            "    futures = [work.get_future()]\n    return futures\n",
            line=6, message="Work::getFuture not implemented",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._works: set[str] = set()  # names bound to a reduce-scatter's async work

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and self._async_scatter(node.value):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self._works.add(target.target.value)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func, *_GATHER):
            return self._gather(original, updated)
        func = original.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "get_future" and not original.args):
            return updated
        work = func.value
        if isinstance(work, cst.Call) and self._async_scatter(work):
            output = _output(work)
            if output is None:
                self.flag(original, _FUTURE + "; its output is not a plain name, so it is not rewritten",
                          suggestion="porter_runtime.work_future(work, output)")
                return updated
            new = self.runtime_call("work_future", updated.func.value, output)  # type: ignore[attr-defined]
            return self.rewrite(original, new, _FUTURE + "; the runtime completes the future off CUDA")
        if isinstance(work, cst.Name) and work.value in self._works:
            self.flag(original, _FUTURE, suggestion="porter_runtime.work_future(work, output)")
        return updated

    def _gather(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        given = keyword(updated, "input_tensor")
        if given is None:
            plain = positional(updated)
            given = plain[1] if len(plain) > 1 else None
        if given is None or given.star or is_runtime_call(self, given.value):
            return updated
        wrapped = given.with_changes(value=self.runtime_call("collective_input", given.value))
        new = updated.with_changes(args=[wrapped if a is given else a for a in updated.args])
        return self.rewrite(original, new, "Gloo (the backend off CUDA) can't gather an input that requires grad; "
                            "the runtime detaches it there (collectives are not differentiable)")

    def _async_scatter(self, call: cst.Call) -> bool:
        flag = keyword(call, "async_op")
        return self.matches(call.func, *_SCATTER) and flag is not None and not (
            isinstance(flag.value, cst.Name) and flag.value.value == "False")


_FUTURE = "Gloo (the backend off CUDA) has no future for a reduce-scatter (Work::getFuture not implemented)"


def _output(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The reduce-scatter's output, where evaluating it again is harmless."""
    given = keyword(call, "output")
    plain = positional(call)
    value = given.value if given is not None else plain[0].value if plain else None
    node = value
    while isinstance(node, cst.Attribute):
        node = node.value
    return value if isinstance(node, cst.Name) else None
