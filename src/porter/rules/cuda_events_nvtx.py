"""``torch.cuda`` events and NVTX ranges (rewritten to their porter_runtime twins;
porter.rulebase.families.devices.twin_calls).
"""

from __future__ import annotations

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.devices.twin_calls import TwinCall, twin_table


class CudaEvent(TwinCall, Rule):
    """`torch.cuda.Event(...)` becomes `porter_runtime.Event(...)`.

    What:
    Rewrites `torch.cuda.Event(enable_timing=True)` (and `blocking`, `interprocess`)
    to `porter_runtime.Event(...)`, keeping the arguments, so timing code with
    `start.record()`, `end.record()`, `torch.cuda.synchronize()` and
    `start.elapsed_time(end)` keeps working.

    Why:
    Without CUDA, creating one raises
    `RuntimeError: Tried to instantiate dummy base class Event`.

    Fix safety:
    Safe. On CUDA `porter_runtime.Event(...)` returns
    `torch.cuda.Event(enable_timing=..., blocking=..., interprocess=...)` built from the
    same arguments. On MPS it is a `torch.mps.Event`; on CPU a wall-clock event whose
    `elapsed_time` is in milliseconds, like CUDA's.

    Known limits:
    A call with `external=` (or `*args`/`**kwargs`) is reported, not rewritten: the
    runtime's twin has no `external`. `isinstance(x, torch.cuda.Event)` is left alone.
    """

    code = "PT108"
    name = "cuda-event"
    safety = Safety.SAFE
    table = twin_table({"Event": "Event"}, "streams")
    needs = Needs(calls_only=True, targets=frozenset(table))
    unsupported = frozenset({"external"})
    max_positional = 3

    valid = [
        "def timer(torch):\n    return torch.cuda.Event(enable_timing=True)\n",
        "import mylib as torch\nstart = torch.cuda.Event(enable_timing=True)\n",
        "import torch\nok = isinstance(e, torch.cuda.Event)\n",
    ]
    invalid = [
        Example(
            "import torch\n\nstart = torch.cuda.Event(enable_timing=True)\nend = torch.cuda.Event(enable_timing=True)\n"
            "start.record()\nrun()\nend.record()\nms = start.elapsed_time(end)\n",
            "import porter_runtime\n\nstart = porter_runtime.Event(enable_timing=True)\n"
            "end = porter_runtime.Event(enable_timing=True)\nstart.record()\nrun()\nend.record()\n"
            "ms = start.elapsed_time(end)\n",
        ),
        Example(
            "import torch as t\ndone = t.cuda.Event()\n",
            "import porter_runtime\ndone = porter_runtime.Event()\n",
        ),
        Example(
            "from torch.cuda import Event\nstart, end = Event(True), Event(True)\n",
            "import porter_runtime\nstart, end = porter_runtime.Event(True), porter_runtime.Event(True)\n",
        ),
        Example("import torch\nev = torch.cuda.Event(external=True)\n"),
    ]


class CudaNvtx(TwinCall, Rule):
    """`torch.cuda.nvtx.range_push/range_pop/range` become the runtime's NVTX twins.

    What:
    Rewrites `torch.cuda.nvtx.range_push(msg)` → `porter_runtime.nvtx_range_push(msg)`,
    `range_pop()` → `porter_runtime.nvtx_range_pop()` and `range(msg, ...)` (a context
    manager and decorator) → `porter_runtime.nvtx_range(msg, ...)`.

    Why:
    Without CUDA they raise
    `RuntimeError: NVTX functions not installed. Are you sure you have a CUDA build?`.

    Fix safety:
    Safe. On CUDA the twins call the torch.cuda.nvtx functions with the same arguments
    and return their results. Elsewhere (and on a CUDA build without NVTX) they open and
    close `torch.autograd.profiler.record_function` ranges, which show in
    `torch.profiler` traces.

    Known limits:
    `torch.cuda.nvtx.mark` and `range_start`/`range_end` have no twin and are left
    alone.
    """

    code = "PT109"
    name = "cuda-nvtx"
    safety = Safety.SAFE
    table = {
        "torch.cuda.nvtx.range_push": "nvtx_range_push",
        "torch.cuda.nvtx.range_pop": "nvtx_range_pop",
        "torch.cuda.nvtx.range": "nvtx_range",
    }
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def step(torch):\n    torch.cuda.nvtx.range_push('fwd')\n",
        "import mylib as torch\ntorch.cuda.nvtx.range_pop()\n",
        "import torch\nwith torch.profiler.record_function('fwd'):\n    pass\n",
    ]
    invalid = [
        Example(
            "import torch\n\ntorch.cuda.nvtx.range_push('forward')\nout = model(x)\ntorch.cuda.nvtx.range_pop()\n",
            "import porter_runtime\n\nporter_runtime.nvtx_range_push('forward')\nout = model(x)\n"
            "porter_runtime.nvtx_range_pop()\n",
        ),
        Example(
            "import torch as t\n\nwith t.cuda.nvtx.range('step {}', i):\n    train_step()\n",
            "import porter_runtime\n\nwith porter_runtime.nvtx_range('step {}', i):\n    train_step()\n",
        ),
        Example(
            "from torch.cuda import nvtx\n\n@nvtx.range('loss')\ndef loss(x):\n    return x.sum()\n",
            "import porter_runtime\n\n@porter_runtime.nvtx_range('loss')\ndef loss(x):\n    return x.sum()\n",
        ),
        Example(
            "from torch.cuda.nvtx import range_push as push\npush('data')\n",
            "import porter_runtime\nporter_runtime.nvtx_range_push('data')\n",
        ),
    ]
