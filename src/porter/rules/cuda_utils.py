"""``torch.cuda`` utilities: synchronisation, caches, seeds, device queries, memory
statistics, events, NVTX ranges (rewritten to their porter_runtime twins) and streams
(reported).

The rewrites are table-driven: each rule class holds a table of qualified name →
runtime name, and one mixin turns a call of a table entry into the same call of the
runtime twin, arguments untouched. The twins take the same parameters (same names,
same order) as the torch.cuda functions and forward them verbatim on CUDA, so keeping
the argument list is exact. Codes are split by meaning (sync, cache, seeds, queries,
device selection, memory statistics, bf16, events, NVTX) so that a user can
``--ignore`` one kind without losing the others.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety, has_star_args


def _table(names: dict[str, str], *modules: str) -> dict[str, str]:
    """``{"torch.cuda.x": twin}`` plus the same names under torch.cuda's submodules."""
    out = {f"torch.cuda.{name}": twin for name, twin in names.items()}
    for module in modules:
        out.update({f"torch.cuda.{module}.{name}": twin for name, twin in names.items()})
    return out


class _TwinCall:
    """Mixin for rules whose calls become ``porter_runtime.<twin>(same arguments)``.

    Not a Rule subclass, so the registry does not take it for a rule.
    """

    table: ClassVar[dict[str, str]]
    #: Keywords the runtime twin does not accept: such a call is reported instead.
    unsupported: ClassVar[frozenset[str]] = frozenset()
    #: Most positional arguments the twin accepts (None: as many as torch.cuda's).
    max_positional: ClassVar[Optional[int]] = None

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)  # type: ignore[attr-defined]
        if target is None:
            return updated
        twin = self.table[target]
        if not self._fits(original):
            self.flag(original, f"`{target}(...)` uses arguments porter_runtime.{twin} does not take; "  # type: ignore[attr-defined]
                      "not rewritten: drop them, or keep the call under "
                      "`if porter_runtime.device_type() == \"cuda\":`",
                      suggestion=f"porter_runtime.{twin}(...)")
            return updated
        new = updated.with_changes(func=self.runtime(twin))  # type: ignore[attr-defined]
        return self.rewrite(original, new, f"`{target}` fails or does nothing without CUDA; "  # type: ignore[attr-defined]
                            f"porter_runtime.{twin} forwards to it on CUDA")

    def _fits(self, call: cst.Call) -> bool:
        if self.unsupported and has_star_args(call):
            return False
        if any(a.keyword is not None and a.keyword.value in self.unsupported for a in call.args):
            return False
        positional = [a for a in call.args if a.keyword is None and not a.star]
        return self.max_positional is None or len(positional) <= self.max_positional


class CudaSynchronize(_TwinCall, Rule):
    """`torch.cuda.synchronize(...)` becomes `porter_runtime.synchronize(...)`.

    What:
    Rewrites calls of `torch.cuda.synchronize`, keeping the arguments.

    Why:
    Without CUDA, `torch.cuda.synchronize()` raises
    `AssertionError: Torch not compiled with CUDA enabled`. Benchmarks and training
    loops call it around timed regions and before reading results.

    Fix safety:
    Safe. On CUDA `porter_runtime.synchronize(device)` calls
    `torch.cuda.synchronize(device)` with the same argument. On MPS it calls
    `torch.mps.synchronize()` (MPS has one device); on CPU it does nothing, since CPU
    ops are synchronous.

    Known limits:
    Only calls are rewritten: a reference kept for later (`sync = torch.cuda.synchronize`)
    is left alone.
    """

    code = "PT101"
    name = "cuda-synchronize"
    safety = Safety.SAFE
    table = _table({"synchronize": "synchronize"})
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def f(torch):\n    torch.cuda.synchronize()\n",
        "import mylib as torch\ntorch.cuda.synchronize()\n",
        "import torch\ntorch.mps.synchronize()\n",
    ]
    invalid = [
        Example(
            "import torch\ntorch.cuda.synchronize()\n",
            "import porter_runtime\nimport torch\nporter_runtime.synchronize()\n",
        ),
        Example(
            "import torch as t\nt.cuda.synchronize(device)\n",
            "import porter_runtime\nimport torch as t\nporter_runtime.synchronize(device)\n",
        ),
        Example(
            "from torch.cuda import synchronize\n\nsynchronize()\n",
            "import porter_runtime\n\nporter_runtime.synchronize()\n",
        ),
        Example(
            "import torch.cuda as cuda\n\ndef step():\n    cuda.synchronize(device=0)  # wait for the kernels\n",
            # `import torch.cuda as cuda` is left unused and goes: `import porter_runtime`
            # imports torch, and torch imports torch.cuda itself
            "import porter_runtime\n\ndef step():\n"
            "    porter_runtime.synchronize(device=0)  # wait for the kernels\n",
        ),
    ]


class CudaEmptyCache(_TwinCall, Rule):
    """`torch.cuda.empty_cache()` becomes `porter_runtime.empty_cache()`.

    What:
    Rewrites calls of `torch.cuda.empty_cache` (also reached as
    `torch.cuda.memory.empty_cache`).

    Why:
    It does nothing on a machine without CUDA, so on a Mac the MPS cache is never
    released where the author meant to release memory.

    Fix safety:
    Safe. On CUDA the twin calls `torch.cuda.empty_cache()`. On MPS it calls
    `torch.mps.empty_cache()`; on CPU it does nothing, as before.

    Known limits:
    Only calls are rewritten.
    """

    code = "PT102"
    name = "cuda-empty-cache"
    safety = Safety.SAFE
    table = _table({"empty_cache": "empty_cache"}, "memory")
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def f(torch):\n    torch.cuda.empty_cache()\n",
        "import mylib as torch\ntorch.cuda.empty_cache()\n",
        "import gc\ngc.collect()\n",
    ]
    invalid = [
        Example(
            "import torch\n\nif step % 100 == 0:\n    torch.cuda.empty_cache()\n",
            "import porter_runtime\nimport torch\n\nif step % 100 == 0:\n    porter_runtime.empty_cache()\n",
        ),
        Example(
            "import torch as t\nt.cuda.empty_cache()\n",
            "import porter_runtime\nimport torch as t\nporter_runtime.empty_cache()\n",
        ),
        Example(
            "from torch.cuda import empty_cache\nimport gc\n\ngc.collect(); empty_cache()\n",
            "import porter_runtime\nimport gc\n\ngc.collect(); porter_runtime.empty_cache()\n",
        ),
        Example(
            "from torch.cuda.memory import empty_cache as free\nfree()\n",
            "import porter_runtime\nporter_runtime.empty_cache()\n",
        ),
    ]


class CudaManualSeed(_TwinCall, Rule):
    """`torch.cuda.manual_seed(s)` / `manual_seed_all(s)` become the runtime's seeders.

    What:
    Rewrites `torch.cuda.manual_seed(seed)` to `porter_runtime.manual_seed(seed)` and
    `torch.cuda.manual_seed_all(seed)` to `porter_runtime.manual_seed_all(seed)` (also
    through `torch.cuda.random`).

    Why:
    Without CUDA both are silent no-ops: a script that seeds "the GPU" separately from
    `torch.manual_seed` gets an unseeded MPS generator on a Mac.

    Fix safety:
    Safe. On CUDA the twins call `torch.cuda.manual_seed(seed)` and
    `torch.cuda.manual_seed_all(seed)`. On MPS they seed `torch.mps`; on CPU they call
    `torch.manual_seed(seed)`, the generator CPU ops draw from.

    Known limits:
    Seeding does not make MPS results bitwise equal to CUDA ones: the kernels differ.
    """

    code = "PT103"
    name = "cuda-manual-seed"
    safety = Safety.SAFE
    table = _table({"manual_seed": "manual_seed", "manual_seed_all": "manual_seed_all"}, "random")
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def seed_all(torch, s):\n    torch.cuda.manual_seed_all(s)\n",
        "import mylib as torch\ntorch.cuda.manual_seed(0)\n",
        "import torch\ntorch.manual_seed(0)\n",
    ]
    invalid = [
        Example(
            "import random\nimport torch\n\nrandom.seed(0)\ntorch.manual_seed(0)\ntorch.cuda.manual_seed_all(0)\n",
            "import porter_runtime\nimport random\nimport torch\n\nrandom.seed(0)\ntorch.manual_seed(0)\n"
            "porter_runtime.manual_seed_all(0)\n",
        ),
        Example(
            "import torch as t\nt.cuda.manual_seed(args.seed)\n",
            "import porter_runtime\nimport torch as t\nporter_runtime.manual_seed(args.seed)\n",
        ),
        Example(
            "from torch.cuda import manual_seed, manual_seed_all\nmanual_seed(1)\nmanual_seed_all(seed=1)\n",
            "import porter_runtime\nporter_runtime.manual_seed(1)\nporter_runtime.manual_seed_all(seed=1)\n",
        ),
    ]


class CudaDeviceQuery(_TwinCall, Rule):
    """`torch.cuda.device_count()`, `current_device()` and other device queries use runtime twins.

    What:
    Rewrites `torch.cuda.device_count()` → `porter_runtime.device_count()`,
    `current_device()` → `porter_runtime.current_device()`, `get_device_name(d)` →
    `porter_runtime.device_name(d)` and `get_device_properties(d)` →
    `porter_runtime.get_device_properties(d)`.

    Why:
    Without CUDA, `current_device`, `get_device_name` and `get_device_properties`
    raise `AssertionError: Torch not compiled with CUDA enabled`, and `device_count()`
    is 0, which scripts read as "no GPU" (or divide by).

    Fix safety:
    Safe. On CUDA each twin calls the torch.cuda function with the same arguments and
    returns its result. Off CUDA: `device_count()` is `torch.mps.device_count()` on MPS
    and 1 on CPU (one device to run on), `current_device()` is the index 0 (where it
    is passed as a device, PT901 wraps it in `porter_runtime.device(...)`, as torch
    reads a bare 0 as `cuda:0`), `device_name()` is
    the MPS name or `"CPU (<machine>)"`, and `get_device_properties()` is a
    `DeviceProperties` named tuple with `name`, `type`, `total_memory`,
    `multi_processor_count`, `major=0` and `minor=0`.

    Known limits:
    `device_count()` used as a process count (`mp.spawn(nprocs=...)`, a world size) is
    rewritten like any other use and gives 1 process off CUDA. Attributes of CUDA's
    properties object beyond the ones above do not exist off CUDA.
    """

    code = "PT104"
    name = "cuda-device-query"
    safety = Safety.SAFE
    table = _table({
        "device_count": "device_count",
        "current_device": "current_device",
        "get_device_name": "device_name",
        "get_device_properties": "get_device_properties",
    })
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def n(torch):\n    return torch.cuda.device_count()\n",
        "import mylib as torch\nname = torch.cuda.get_device_name(0)\n",
        "import torch\nn = torch.mps.device_count()\n",
    ]
    invalid = [
        Example(
            "import torch\nif torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n",
            "import porter_runtime\nimport torch\nif porter_runtime.device_count() > 1:\n"
            "    model = torch.nn.DataParallel(model)\n",
        ),
        Example(
            "import torch as t\nprint(f\"GPU: {t.cuda.get_device_name(t.cuda.current_device())}\")\n",
            "import porter_runtime\nimport torch as t\n"
            "print(f\"GPU: {porter_runtime.device_name(porter_runtime.current_device())}\")\n",
        ),
        Example(
            "from torch.cuda import get_device_properties\n"
            "total = get_device_properties(0).total_memory\n",
            "import porter_runtime\ntotal = porter_runtime.get_device_properties(0).total_memory\n",
        ),
        # process counts: one process off CUDA instead of none (mp.spawn(nprocs=0) runs nothing)
        Example(
            "import torch\nimport torch.multiprocessing as mp\n\nngpus_per_node = torch.cuda.device_count()\n"
            "args.world_size = ngpus_per_node * args.world_size\n"
            "mp.spawn(main_worker, nprocs=torch.cuda.device_count(), args=(ngpus_per_node, args))\n",
            "import porter_runtime\nimport torch\nimport torch.multiprocessing as mp\n\n"
            "ngpus_per_node = porter_runtime.device_count()\nargs.world_size = ngpus_per_node * args.world_size\n"
            "mp.spawn(main_worker, nprocs=porter_runtime.device_count(), args=(ngpus_per_node, args))\n",
        ),
        Example(
            "import torch as t\nlocal_rank = rank % t.cuda.device_count()\n",
            "import porter_runtime\nimport torch as t\nlocal_rank = rank % porter_runtime.device_count()\n",
        ),
    ]


class CudaSetDevice(_TwinCall, Rule):
    """`torch.cuda.set_device(d)` becomes `porter_runtime.set_device(d)`.

    What:
    Rewrites calls of `torch.cuda.set_device`, typically
    `torch.cuda.set_device(local_rank)` at the start of a distributed worker.

    Why:
    Without CUDA it raises
    `AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'`.

    Fix safety:
    Safe. On CUDA the twin calls `torch.cuda.set_device(d)` with the same argument. On
    MPS and CPU, which have one device, it does nothing.

    Known limits:
    The `with torch.cuda.device(d):` context manager is not rewritten here.
    """

    code = "PT105"
    name = "cuda-set-device"
    safety = Safety.SAFE
    table = _table({"set_device": "set_device"})
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def setup(torch, rank):\n    torch.cuda.set_device(rank)\n",
        "import mylib as torch\ntorch.cuda.set_device(0)\n",
    ]
    invalid = [
        Example(
            "import os\nimport torch\n\nlocal_rank = int(os.environ['LOCAL_RANK'])\ntorch.cuda.set_device(local_rank)\n",
            "import porter_runtime\nimport os\nimport torch\n\nlocal_rank = int(os.environ['LOCAL_RANK'])\n"
            "porter_runtime.set_device(local_rank)\n",
        ),
        Example(
            "import torch as t\nt.cuda.set_device(device=args.gpu)\n",
            "import porter_runtime\nimport torch as t\nporter_runtime.set_device(device=args.gpu)\n",
        ),
        Example(
            "from torch.cuda import set_device\n\ndef worker(rank):\n    set_device(rank)\n",
            "import porter_runtime\n\ndef worker(rank):\n    porter_runtime.set_device(rank)\n",
        ),
    ]


_MEMORY = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "mem_get_info")


class CudaMemoryStats(_TwinCall, Rule):
    """`torch.cuda.memory_allocated()` and the other memory statistics use runtime twins.

    What:
    Rewrites `torch.cuda.memory_allocated`, `max_memory_allocated`, `memory_reserved`,
    `max_memory_reserved`, `reset_peak_memory_stats` and `mem_get_info` (also through
    `torch.cuda.memory`) to the same-named `porter_runtime` functions, arguments kept.

    Why:
    Without CUDA, `memory_allocated` reports 0, `reset_peak_memory_stats` raises
    `AttributeError: module 'torch._C' has no attribute '_cuda_resetPeakMemoryStats'`
    and `mem_get_info` raises `AssertionError: Torch not compiled with CUDA enabled`.

    Fix safety:
    Safe. On CUDA each twin calls the torch.cuda function with the same arguments and
    returns its result. On MPS they report `torch.mps` counters and the
    `torch.accelerator` peaks where this torch has them; on CPU the statistics are 0
    (torch keeps none for CPU) and `mem_get_info()` is (available RAM, physical RAM).

    Known limits:
    `torch.cuda.memory_summary`, `memory_stats` and `max_memory_cached` have no twin and
    are left alone. `except torch.cuda.OutOfMemoryError:` needs no change: it is an
    alias of `torch.OutOfMemoryError` and exists on every build.
    """

    code = "PT106"
    name = "cuda-memory-stats"
    safety = Safety.SAFE
    table = _table({name: name for name in _MEMORY}, "memory")
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def peak(torch):\n    return torch.cuda.max_memory_allocated()\n",
        "import mylib as torch\nused = torch.cuda.memory_allocated()\n",
        "import torch\ntry:\n    step()\nexcept torch.cuda.OutOfMemoryError:\n    skip()\n",
    ]
    invalid = [
        Example(
            "import torch\nprint(f\"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB\")\n"
            "torch.cuda.reset_peak_memory_stats()\n",
            "import porter_runtime\nimport torch\nprint(f\"peak {porter_runtime.max_memory_allocated() / 2**30:.1f} GiB\")\n"
            "porter_runtime.reset_peak_memory_stats()\n",
        ),
        Example(
            "import torch as t\nfree, total = t.cuda.mem_get_info(device)\n",
            "import porter_runtime\nimport torch as t\nfree, total = porter_runtime.mem_get_info(device)\n",
        ),
        Example(
            "from torch.cuda import memory_allocated, memory_reserved\n"
            "stats = (memory_allocated(0), memory_reserved(0))\n",
            "import porter_runtime\nstats = (porter_runtime.memory_allocated(0), porter_runtime.memory_reserved(0))\n",
        ),
        Example(
            "import torch.cuda.memory as cm\nused = cm.max_memory_reserved()\n",
            "import porter_runtime\nimport torch.cuda.memory as cm\nused = porter_runtime.max_memory_reserved()\n",
        ),
    ]


class CudaBf16Supported(_TwinCall, Rule):
    """`torch.cuda.is_bf16_supported()` becomes `porter_runtime.is_bf16_supported()`.

    What:
    Rewrites calls of `torch.cuda.is_bf16_supported`, usually used to pick the AMP
    dtype (`torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16`).

    Why:
    Without CUDA it is False, so a Mac that can run bfloat16 (MPS with torch 2.9 or
    later, or macOS 14) is sent down the float16 path.

    Fix safety:
    Safe. On CUDA the twin returns `torch.cuda.is_bf16_supported()` (the
    `including_emulation` argument forwarded). On MPS it says whether MPS supports
    bfloat16 on this macOS and torch; on CPU it is True.

    Known limits:
    The answer is about the resolved device; code that asks and then still uses a CUDA
    device elsewhere needs the device rules too.
    """

    code = "PT107"
    name = "cuda-bf16-supported"
    safety = Safety.SAFE
    table = _table({"is_bf16_supported": "is_bf16_supported"})
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def pick(torch):\n    return torch.cuda.is_bf16_supported()\n",
        "import mylib as torch\nok = torch.cuda.is_bf16_supported()\n",
    ]
    invalid = [
        Example(
            "import torch\ndtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16\n",
            "import porter_runtime\nimport torch\n"
            "dtype = torch.bfloat16 if porter_runtime.is_bf16_supported() else torch.float16\n",
        ),
        Example(
            "import torch as t\nok = t.cuda.is_bf16_supported(including_emulation=False)\n",
            "import porter_runtime\nimport torch as t\nok = porter_runtime.is_bf16_supported(including_emulation=False)\n",
        ),
        Example(
            "from torch.cuda import is_bf16_supported\nuse_bf16 = is_bf16_supported()\n",
            "import porter_runtime\nuse_bf16 = porter_runtime.is_bf16_supported()\n",
        ),
    ]


class CudaEvent(_TwinCall, Rule):
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
    table = _table({"Event": "Event"}, "streams")
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
            "import porter_runtime\nimport torch\n\nstart = porter_runtime.Event(enable_timing=True)\n"
            "end = porter_runtime.Event(enable_timing=True)\nstart.record()\nrun()\nend.record()\n"
            "ms = start.elapsed_time(end)\n",
        ),
        Example(
            "import torch as t\ndone = t.cuda.Event()\n",
            "import porter_runtime\nimport torch as t\ndone = porter_runtime.Event()\n",
        ),
        Example(
            "from torch.cuda import Event\nstart, end = Event(True), Event(True)\n",
            "import porter_runtime\nstart, end = porter_runtime.Event(True), porter_runtime.Event(True)\n",
        ),
        Example("import torch\nev = torch.cuda.Event(external=True)\n"),
    ]


class CudaNvtx(_TwinCall, Rule):
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
            "import porter_runtime\nimport torch\n\nporter_runtime.nvtx_range_push('forward')\nout = model(x)\n"
            "porter_runtime.nvtx_range_pop()\n",
        ),
        Example(
            "import torch as t\n\nwith t.cuda.nvtx.range('step {}', i):\n    train_step()\n",
            "import porter_runtime\nimport torch as t\n\nwith porter_runtime.nvtx_range('step {}', i):\n    train_step()\n",
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


_STREAM_SUGGESTION = 's = torch.cuda.Stream() if porter_runtime.device_type() == "cuda" else None'
_STREAM_NOTE = ("needs CUDA: MPS and CPU have no user streams; run this work on the default stream "
                "there (`torch.cuda.stream(s) if s is not None else contextlib.nullcontext()`)")


class CudaStream(Rule):
    """`torch.cuda.Stream()`, `torch.cuda.stream(...)` and other stream calls are reported.

    What:
    Reports calls of `torch.cuda.Stream`, `stream`, `current_stream`,
    `default_stream`, `set_stream`, `ExternalStream` and `StreamContext`.

    Why:
    Without CUDA, `torch.cuda.Stream()` raises
    `RuntimeError: torch.cuda.Stream requires CUDA support` and `current_stream()`
    raises `AssertionError: Torch not compiled with CUDA enabled`. MPS exposes no
    user streams, so overlap code must fall back to the default stream.

    Fix safety:
    Review (no rewrite). A fake stream would lie about concurrency; which work may run
    serially instead is the author's call.

    Known limits:
    Only calls are reported; `record_stream` and `wait_stream` on the results are not
    followed.
    """

    code = "PT110"
    name = "cuda-stream"
    safety = Safety.REVIEW
    needs = Needs(
        calls_only=True,
        targets=frozenset(_table({name: name for name in (
            "Stream", "stream", "current_stream", "default_stream", "set_stream",
            "ExternalStream", "StreamContext")}, "streams")),
    )

    valid = [
        "def overlap(torch):\n    return torch.cuda.Stream()\n",
        "import mylib as torch\ns = torch.cuda.Stream()\n",
        "import torch\nok = isinstance(s, torch.cuda.Stream)\n",
    ]
    invalid = [
        Example("import torch\n\ns = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    y = f(x)\n"),
        Example("import torch as t\nt.cuda.current_stream().wait_stream(side)\n"),
        Example("from torch.cuda import Stream, stream\ncopy_stream = Stream(priority=-1)\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is not None:
            self.flag(original, f"`{target}` {_STREAM_NOTE}",
                      suggestion=_STREAM_SUGGESTION)
        return updated
