"""A CUDA availability check that skips ``torch.distributed`` setup (PT304)."""

from __future__ import annotations

from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.conditions import dist_guard
from porter.rulebase.evidence import Uses
from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
)


_INITS_PROCESS_GROUP = Uses(dist_guard.INIT, calls_only=True)


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
    Only a guard in the same block as the setup call, ending in `return` (as each of
    its `elif` branches must), is seen;
    a guard around the call of a setup function in another function or file, and
    `if torch.cuda.is_available(): init_process_group(...)`, are PT202's.
    """

    code = "PT304"
    name = "cuda-guard-skips-distributed"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({dist_guard.IS_AVAILABLE}), evidence=_INITS_PROCESS_GROUP)

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
        Example(  # FoundationVision/VAR's dist.py: an `elif` for a run without a launcher, then the group
            dedent("""\
                import os
                import sys

                import torch
                import torch.distributed as tdist


                def initialize(fork=False, backend='nccl', gpu_id_if_not_distibuted=0, timeout=30):
                    global __device
                    if not torch.cuda.is_available():
                        print(f'[dist initialize] cuda is not available, use cpu instead', file=sys.stderr)
                        return
                    elif 'RANK' not in os.environ:
                        __device = torch.device('cuda', gpu_id_if_not_distibuted)
                        return
                    tdist.init_process_group(backend=backend)
                """),
            dedent("""\
                import porter_runtime
                import os
                import sys

                import torch
                import torch.distributed as tdist


                def initialize(fork=False, backend='nccl', gpu_id_if_not_distibuted=0, timeout=30):
                    global __device
                    if not torch.cuda.is_available() and not porter_runtime.is_multiprocess_launch():
                        print(f'[dist initialize] cuda is not available, use cpu instead', file=sys.stderr)
                        return
                    elif 'RANK' not in os.environ:
                        __device = torch.device('cuda', gpu_id_if_not_distibuted)
                        return
                    tdist.init_process_group(backend=backend)
                """),
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
        new_test = self.rewrite(original.test, new_test, "a multi-process launch off CUDA now sets up its "
                                "process group; CUDA and single-process runs take the same branch as before")
        if new_test is original.test:
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
