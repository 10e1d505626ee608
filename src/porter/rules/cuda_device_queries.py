"""``torch.cuda`` queries: device properties and counts, memory statistics, bf16 support
(rewritten to their porter_runtime twins; porter.rulebase.families.devices.twin_calls).
"""

from __future__ import annotations

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.devices.count_tests import tested_counts
from porter.rulebase.families.devices.twin_calls import TwinCall, twin_table
from porter.rulebase.syntax import int_value
from porter.rulebase.families.thirdparty.uses import example_code


class CudaDeviceQuery(TwinCall, Rule):
    """`torch.cuda.device_count()`, `current_device()` and other device queries use runtime twins.

    What:
    Rewrites `torch.cuda.device_count()` → `porter_runtime.device_count()`,
    `current_device()` → `porter_runtime.current_device()`, `get_device_name(d)` →
    `porter_runtime.device_name(d)`, `get_device_properties(d)` →
    `porter_runtime.get_device_properties(d)` and `get_device_capability(d)` →
    `porter_runtime.get_device_capability(d)`.

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
    `multi_processor_count`, `major=0` and `minor=0`; `get_device_capability()` is
    `(0, 0)` to match: no CUDA compute capability, so a test for at least one
    (`if major < 8: warnings.warn(...)`, `>= (8, 0)`) takes the code's path for GPUs
    older than it asks for, the path without the kernel that needs them (LongLoRA's
    `replace_llama_attn` only warned there, and stopped on the CPU).

    A count compared with 0 (`torch.cuda.device_count() == 0`, `> 0`, `< 1`) is a
    test for CUDA, as `torch.cuda.is_available()` is, and stays as written: what it
    guards is CUDA's code (detectron2's tests return early `if device_count() == 0`
    and then name `"cuda:0"`), which a count of 1 off CUDA would run on a Mac. So is a
    count one step from such a test: assigned to a name that its function compares
    with 0 (or tests for truth), or passed to a function or class of the module whose
    parameter is (detectron2's demo hands it to `AsyncPredictor(cfg, num_gpus=...)`,
    which picks `"cuda:{i}" if num_gpus > 0 else "cpu"`;
    porter.rulebase.families.devices.count_tests).

    Known limits:
    `device_count()` used as a process count (`mp.spawn(nprocs=...)`, a world size) is
    rewritten like any other use and gives 1 process off CUDA. Attributes of CUDA's
    properties object beyond the ones above do not exist off CUDA.
    """

    code = "PT104"
    name = "cuda-device-query"
    safety = Safety.SAFE
    table = twin_table({
        "device_count": "device_count",
        "current_device": "current_device",
        "get_device_name": "device_name",
        "get_device_properties": "get_device_properties",
        "get_device_capability": "get_device_capability",
    })
    needs = Needs(calls_only=True, targets=frozenset(table), whole_file=True)  # a count tested in a helper (count_tests)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._tests: set[cst.Call] = set()

    def visit_Comparison(self, node: cst.Comparison) -> None:
        """A count compared with 0 is left as written (the class's docstring)."""
        if len(node.comparisons) == 1 and isinstance(node.left, cst.Call) and not node.left.args:
            op, right = type(node.comparisons[0].operator), int_value(node.comparisons[0].comparator)
            if right is not None and (right == 0 and op in (cst.Equal, cst.NotEqual, cst.GreaterThan, cst.LessThanEqual)
                                      or right == 1 and op in (cst.LessThan, cst.GreaterThanEqual)):
                self._tests.add(node.left)

    def visit_Module(self, node: cst.Module) -> None:
        self._tests |= tested_counts(node, lambda call: not call.args
                                     and self.matches(call.func) == "torch.cuda.device_count")

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if original in self._tests and self.matches(original.func) == "torch.cuda.device_count":
            return updated
        return super().leave_Call(original, updated)

    valid = [
        "def n(torch):\n    return torch.cuda.device_count()\n",
        Example(  # detectron2's tests/test_export_torchscript.py: a test for CUDA, and CUDA's code after it
            "import torch\n\n\ndef devices():\n    if torch.cuda.device_count() == 0:\n        return [None]\n"
            "    return ['cpu', 'cuda:0']\n"),
        Example(  # detectron2's demo/predictor.py: the helper picks "cpu" for a count of 0
            example_code("""
            import torch


            class VisualizationDemo:
                def __init__(self, cfg, parallel=False):
                    if parallel:
                        num_gpu = torch.cuda.device_count()
                        self.predictor = AsyncPredictor(cfg, num_gpus=num_gpu)


            class AsyncPredictor:
                def __init__(self, cfg, num_gpus: int = 1):
                    for gpuid in range(max(num_gpus, 1)):
                        cfg.MODEL.DEVICE = "cuda:{}".format(gpuid) if num_gpus > 0 else "cpu"
            """)),
        "import mylib as torch\nname = torch.cuda.get_device_name(0)\n",
        "import torch\nn = torch.mps.device_count()\n",
    ]
    invalid = [
        Example(  # LongLoRA's llama_attn_replace.py
            example_code("""
            import warnings

            import torch


            def forward_noflashattn(query_states, key_states):
                return torch.matmul(query_states, key_states.transpose(2, 3))


            def replace_llama_attn(use_flash_attn=True, use_full=False, inference=False):
                if use_flash_attn:
                    cuda_major, cuda_minor = torch.cuda.get_device_capability()
                    if cuda_major < 8:
                        warnings.warn(
                            "Flash attention is only supported on A100 or H100 GPU during training due to head dim > 64 backward."
                        )
            """),
            example_code("""
            import porter_runtime
            import warnings

            import torch


            def forward_noflashattn(query_states, key_states):
                return torch.matmul(query_states, key_states.transpose(2, 3))


            def replace_llama_attn(use_flash_attn=True, use_full=False, inference=False):
                if use_flash_attn:
                    cuda_major, cuda_minor = porter_runtime.get_device_capability()
                    if cuda_major < 8:
                        warnings.warn(
                            "Flash attention is only supported on A100 or H100 GPU during training due to head dim > 64 backward."
                        )
            """),
        ),
        Example(
            "import torch\nif torch.cuda.device_count() > 1:\n    model = torch.nn.DataParallel(model)\n",
            "import porter_runtime\nimport torch\nif porter_runtime.device_count() > 1:\n"
            "    model = torch.nn.DataParallel(model)\n",
        ),
        Example(
            "import torch as t\nprint(f\"GPU: {t.cuda.get_device_name(t.cuda.current_device())}\")\n",
            "import porter_runtime\n"
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
            "import porter_runtime\nimport torch.multiprocessing as mp\n\n"
            "ngpus_per_node = porter_runtime.device_count()\nargs.world_size = ngpus_per_node * args.world_size\n"
            "mp.spawn(main_worker, nprocs=porter_runtime.device_count(), args=(ngpus_per_node, args))\n",
        ),
        Example(
            "import torch as t\nlocal_rank = rank % t.cuda.device_count()\n",
            "import porter_runtime\nlocal_rank = rank % porter_runtime.device_count()\n",
        ),
    ]


_MEMORY = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "mem_get_info", "memory_stats", "reset_accumulated_memory_stats",
           "memory_summary")
#: NVML readings: in torch.cuda, not in torch.cuda.memory.
_NVML = ("power_draw", "utilization", "temperature", "clock_rate")


class CudaMemoryStats(TwinCall, Rule):
    """`torch.cuda.memory_allocated()` and the other memory statistics use runtime twins.

    What:
    Rewrites `torch.cuda.memory_allocated`, `max_memory_allocated`, `memory_reserved`,
    `max_memory_reserved`, `reset_peak_memory_stats`, `mem_get_info`, `memory_stats`,
    `reset_accumulated_memory_stats`, `memory_summary` (also through
    `torch.cuda.memory`) and the NVML readings `power_draw`, `utilization`,
    `temperature` and `clock_rate` to the same-named `porter_runtime` functions,
    arguments kept.

    Why:
    Without CUDA, `memory_allocated` reports 0, `reset_peak_memory_stats` raises
    `AttributeError: module 'torch._C' has no attribute '_cuda_resetPeakMemoryStats'`
    and `mem_get_info` raises `AssertionError: Torch not compiled with CUDA enabled`.
    `memory_stats()` returns `{}`, so the memory monitors of LLM trainers
    (`stats["active_bytes.all.peak"]`, `stats["num_ooms"]`) raise KeyError; the NVML
    readings (`power_draw()`) and `reset_accumulated_memory_stats()` raise.

    Fix safety:
    Safe. On CUDA each twin calls the torch.cuda function with the same arguments and
    returns its result. On MPS they report `torch.mps` counters and the
    `torch.accelerator` peaks where this torch has them; on CPU the statistics are 0
    (torch keeps none for CPU) and `mem_get_info()` is (available RAM, physical RAM).
    Off CUDA `memory_stats()` holds CUDA's keys for allocated, reserved and active
    bytes (current and peak) from those counters and answers 0 for any other key (no
    retries, no OOMs); the NVML readings are 0; `reset_accumulated_memory_stats()` does
    nothing; `memory_summary()` is one line with the counters.

    Known limits:
    `max_memory_cached` has no twin and is left alone. `except torch.cuda.OutOfMemoryError:` needs no change: it is an
    alias of `torch.OutOfMemoryError` and exists on every build.
    """

    code = "PT106"
    name = "cuda-memory-stats"
    safety = Safety.SAFE
    table = {**twin_table({name: name for name in _MEMORY}, "memory"), **twin_table({name: name for name in _NVML})}
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
            "import porter_runtime\nprint(f\"peak {porter_runtime.max_memory_allocated() / 2**30:.1f} GiB\")\n"
            "porter_runtime.reset_peak_memory_stats()\n",
        ),
        Example(
            "import torch as t\nfree, total = t.cuda.mem_get_info(device)\n",
            "import porter_runtime\nfree, total = porter_runtime.mem_get_info(device)\n",
        ),
        Example(
            "from torch.cuda import memory_allocated, memory_reserved\n"
            "stats = (memory_allocated(0), memory_reserved(0))\n",
            "import porter_runtime\nstats = (porter_runtime.memory_allocated(0), porter_runtime.memory_reserved(0))\n",
        ),
        Example(  # a trainer's memory monitor, as torchtitan and lingua write it
            example_code("""
            import torch


            def get_peak_stats(device):
                cuda_info = torch.cuda.memory_stats(device)
                max_active = cuda_info["active_bytes.all.peak"]
                num_ooms = cuda_info["num_ooms"]
                return max_active, num_ooms, torch.cuda.power_draw()


            def reset_peak_stats():
                torch.cuda.reset_peak_memory_stats()
                torch.cuda.reset_accumulated_memory_stats()
            """),
            example_code("""
            import porter_runtime


            def get_peak_stats(device):
                cuda_info = porter_runtime.memory_stats(device)
                max_active = cuda_info["active_bytes.all.peak"]
                num_ooms = cuda_info["num_ooms"]
                return max_active, num_ooms, porter_runtime.power_draw()


            def reset_peak_stats():
                porter_runtime.reset_peak_memory_stats()
                porter_runtime.reset_accumulated_memory_stats()
            """),
        ),
        Example(
            "import torch.cuda.memory as cm\nused = cm.max_memory_reserved()\n",
            "import porter_runtime\nimport torch.cuda.memory as cm\nused = porter_runtime.max_memory_reserved()\n",
        ),
    ]


class CudaBf16Supported(TwinCall, Rule):
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
    table = twin_table({"is_bf16_supported": "is_bf16_supported"})
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
            "import porter_runtime\nok = porter_runtime.is_bf16_supported(including_emulation=False)\n",
        ),
        Example(
            "from torch.cuda import is_bf16_supported\nuse_bf16 = is_bf16_supported()\n",
            "import porter_runtime\nuse_bf16 = porter_runtime.is_bf16_supported()\n",
        ),
    ]
