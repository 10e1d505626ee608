"""``torch.cuda`` calls that act on the device: synchronize, empty_cache, manual_seed,
set_device (rewritten to their porter_runtime twins; porter.rulebase.families.devices.twin_calls).
"""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.devices.twin_calls import TwinCall, twin_table
from porter.rulebase.families.thirdparty.uses import example_code


class CudaSynchronize(TwinCall, Rule):
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
    table = twin_table({"synchronize": "synchronize"})
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def f(torch):\n    torch.cuda.synchronize()\n",
        "import mylib as torch\ntorch.cuda.synchronize()\n",
        "import torch\ntorch.mps.synchronize()\n",
    ]
    invalid = [
        Example(
            "import torch\ntorch.cuda.synchronize()\n",
            "import porter_runtime\nporter_runtime.synchronize()\n",
        ),
        Example(
            "import torch as t\nt.cuda.synchronize(device)\n",
            "import porter_runtime\nporter_runtime.synchronize(device)\n",
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


class CudaEmptyCache(TwinCall, Rule):
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
    table = twin_table({"empty_cache": "empty_cache"}, "memory")
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "def f(torch):\n    torch.cuda.empty_cache()\n",
        "import mylib as torch\ntorch.cuda.empty_cache()\n",
        "import gc\ngc.collect()\n",
    ]
    invalid = [
        Example(
            "import torch\n\nif step % 100 == 0:\n    torch.cuda.empty_cache()\n",
            "import porter_runtime\n\nif step % 100 == 0:\n    porter_runtime.empty_cache()\n",
        ),
        Example(
            "import torch as t\nt.cuda.empty_cache()\n",
            "import porter_runtime\nporter_runtime.empty_cache()\n",
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


class CudaManualSeed(TwinCall, Rule):
    """`torch.cuda.manual_seed(s)` / `manual_seed_all(s)` become the runtime's seeders, and
    the generator state's get and set its twins.

    What:
    Rewrites `torch.cuda.manual_seed(seed)` to `porter_runtime.manual_seed(seed)` and
    `torch.cuda.manual_seed_all(seed)` to `porter_runtime.manual_seed_all(seed)` (also
    through `torch.cuda.random`); `torch.cuda.get_rng_state`, `set_rng_state`,
    `get_rng_state_all` and `set_rng_state_all` become the runtime's functions of the same
    names.

    Why:
    Without CUDA the seeders are silent no-ops: a script that seeds "the GPU" separately from
    `torch.manual_seed` gets an unseeded MPS generator on a Mac. The state functions raise
    ("Torch not compiled with CUDA enabled"): Megatron-LM's model-parallel RNG tracker and
    every checkpoint that saves the CUDA generator's state stop there (blind round 8).

    Fix safety:
    Safe. On CUDA the twins call `torch.cuda.manual_seed(seed)` and
    `torch.cuda.manual_seed_all(seed)`. On MPS they seed `torch.mps`; on CPU they call
    `torch.manual_seed(seed)`, the generator CPU ops draw from. The state twins forward to
    torch.cuda's on CUDA, and elsewhere get and set the state of that same generator
    (MPS's, or the CPU's); a state saved by a CUDA generator (a checkpoint resumed on a
    Mac) is not restored there, with a warning.

    Known limits:
    Seeding does not make MPS results bitwise equal to CUDA ones: the kernels differ.
    `torch.cuda.default_generators` and other internals stay findings.
    """

    code = "PT103"
    name = "cuda-manual-seed"
    safety = Safety.SAFE
    table = twin_table({name: name for name in ("manual_seed", "manual_seed_all", "get_rng_state", "set_rng_state",
                                                "get_rng_state_all", "set_rng_state_all")}, "random")
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
            "import porter_runtime\nporter_runtime.manual_seed(args.seed)\n",
        ),
        Example(
            "from torch.cuda import manual_seed, manual_seed_all\nmanual_seed(1)\nmanual_seed_all(seed=1)\n",
            "import porter_runtime\nporter_runtime.manual_seed(1)\nporter_runtime.manual_seed_all(seed=1)\n",
        ),
        Example(  # Megatron-LM's CudaRNGStatesTracker.add, and a checkpoint's RNG states
            dedent("""\
                import torch


                def add(self, name, seed):
                    orig_rng_state = torch.cuda.get_rng_state()
                    torch.cuda.manual_seed(seed)
                    self.states_[name] = torch.cuda.get_rng_state()
                    torch.cuda.set_rng_state(orig_rng_state)


                def rng_states():
                    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()}
                """),
            dedent("""\
                import porter_runtime
                import torch


                def add(self, name, seed):
                    orig_rng_state = porter_runtime.get_rng_state()
                    porter_runtime.manual_seed(seed)
                    self.states_[name] = porter_runtime.get_rng_state()
                    porter_runtime.set_rng_state(orig_rng_state)


                def rng_states():
                    return {"cpu": torch.get_rng_state(), "cuda": porter_runtime.get_rng_state_all()}
                """),
        ),
    ]


class CudaSetDevice(TwinCall, Rule):
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
    The `with torch.cuda.device(d):` context manager is PT114's.
    """

    code = "PT105"
    name = "cuda-set-device"
    safety = Safety.SAFE
    table = twin_table({"set_device": "set_device"})
    needs = Needs(calls_only=True, targets=frozenset(table))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        """``set_device(torch.cuda.device(i))`` (nanotron) is ``set_device(i)``: torch takes the
        context manager's index; the inner call would stay a CUDA call for the next run."""
        args = original.args
        if self.matches(original.func) is not None and len(args) == 1 and args[0].keyword is None \
                and not args[0].star and isinstance(args[0].value, cst.Call) \
                and self.matches(args[0].value.func, "torch.cuda.device") is not None:
            inner = args[0].value.args
            outer = updated.args[0].value
            if len(inner) == 1 and inner[0].keyword is None and not inner[0].star and isinstance(outer, cst.Call):
                # the rewrite puts back the comments the inner call held
                updated = updated.with_changes(args=[updated.args[0].with_changes(value=outer.args[0].value)])
        return super().leave_Call(original, updated)

    valid = [
        "def setup(torch, rank):\n    torch.cuda.set_device(rank)\n",
        "import mylib as torch\ntorch.cuda.set_device(0)\n",
    ]
    invalid = [
        Example(
            "import os\nimport torch\n\nlocal_rank = int(os.environ['LOCAL_RANK'])\ntorch.cuda.set_device(local_rank)\n",
            "import porter_runtime\nimport os\n\nlocal_rank = int(os.environ['LOCAL_RANK'])\n"
            "porter_runtime.set_device(local_rank)\n",
        ),
        Example(
            "import torch as t\nt.cuda.set_device(device=args.gpu)\n",
            "import porter_runtime\nporter_runtime.set_device(device=args.gpu)\n",
        ),
        Example(
            "from torch.cuda import set_device\n\ndef worker(rank):\n    set_device(rank)\n",
            "import porter_runtime\n\ndef worker(rank):\n    porter_runtime.set_device(rank)\n",
        ),
        Example(
            "import torch\n\n\ndef set_rank_device(device_id):\n    torch.cuda.set_device(torch.cuda.device(device_id))\n",
            "import porter_runtime\n\n\ndef set_rank_device(device_id):\n    porter_runtime.set_device(device_id)\n",
        ),
    ]


class CudaDeviceContext(TwinCall, Rule):
    """`with torch.cuda.device(d):` becomes `with porter_runtime.cuda_device(d):`.

    What:
    Rewrites calls of `torch.cuda.device`, the context manager that makes a device
    current for a block: Triton wrappers enter `torch.cuda.device(x.device.index)` before
    each kernel launch (causal-conv1d, flash-linear-attention, mamba), so that the launch
    goes to the tensor's GPU.

    Why:
    Without CUDA, entering it raises (`x.device.index` is None for a CPU or MPS tensor:
    `TypeError` from `torch.cuda._exchange_device`; an integer: "Torch not compiled with
    CUDA enabled"), so the function fails before it reaches its PyTorch path.

    Fix safety:
    Safe. On CUDA `porter_runtime.cuda_device(d)` returns `torch.cuda.device(d)` itself,
    with the same argument. On MPS and CPU, which have one device, it returns a context
    that does nothing.

    Known limits:
    Only calls are rewritten: `torch.cuda.device` as a type (`isinstance`) stays, and so
    does `torch.cuda.device_of(t)`. The call inside `torch.cuda.set_device(...)` is PT105's.
    """

    code = "PT114"
    name = "cuda-device-context"
    safety = Safety.SAFE
    table = twin_table({"device": "cuda_device"})
    needs = Needs(calls_only=True, targets=frozenset(table))

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._inner: set[int] = set()  # the calls PT105 takes apart: set_device(torch.cuda.device(i))

    def visit_Call(self, node: cst.Call) -> None:
        if len(node.args) == 1 and isinstance(node.args[0].value, cst.Call) \
                and self.matches(node.func, "torch.cuda.set_device") is not None:
            self._inner.add(id(node.args[0].value))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if id(original) in self._inner:
            return updated
        return super().leave_Call(original, updated)

    valid = [
        "def f(torch, x):\n    with torch.cuda.device(x.device.index):\n        pass\n",
        "import torch\n\ndef on_gpu(d):\n    return isinstance(d, torch.cuda.device)\n",
        "import torch\ntorch.cuda.set_device(torch.cuda.device(0))\n",
    ]
    invalid = [
        Example(
            example_code("""\
                import torch
                import triton


                def causal_conv1d_varlen_states(x, cu_seqlens, state_len):
                    states = torch.zeros(batch, state_len, dim, dtype=x.dtype, device=x.device)
                    with torch.cuda.device(x.device.index):
                        _causal_conv1d_varlen_states[grid](x, cu_seqlens, states, state_len)
                    return states
                """),
            example_code("""\
                import porter_runtime
                import torch
                import triton


                def causal_conv1d_varlen_states(x, cu_seqlens, state_len):
                    states = torch.zeros(batch, state_len, dim, dtype=x.dtype, device=x.device)
                    with porter_runtime.cuda_device(x.device.index):
                        _causal_conv1d_varlen_states[grid](x, cu_seqlens, states, state_len)
                    return states
                """),
        ),
        Example(
            "import torch as t\n\nwith t.cuda.device(rank):\n    buf = t.empty(8)\n",
            "import porter_runtime\nimport torch as t\n\nwith porter_runtime.cuda_device(rank):\n    buf = t.empty(8)\n",
        ),
    ]


class ForkRngDevices(TwinCall, Rule):
    """`torch.random.fork_rng(devices=[...])` becomes `porter_runtime.fork_rng(...)`.

    What:
    Rewrites calls of `torch.random.fork_rng` that name the devices to fork
    (`devices=[torch.cuda.current_device()]`, or the first positional argument) and
    leave the device type to torch, or name "cuda".

    Why:
    torch takes the device type from the current accelerator and falls back to "cuda"
    where there is none, so on a CPU-only machine `fork_rng(devices=[0])` raises
    `AssertionError: Torch not compiled with CUDA enabled` (LLM trainers fork the RNG
    this way around their evaluation and generation steps).

    Fix safety:
    Safe. On CUDA the twin is torch's `fork_rng` called with the caller's arguments.
    Elsewhere it forks the resolved device's generator (MPS's beside the CPU's; on the
    CPU only the CPU's, which `fork_rng` always forks).

    Known limits:
    A call without `devices` is left alone: torch then forks every visible device of
    the type, none on a CPU-only machine. A `device_type` other than "cuda" is kept.
    """

    code = "PT112"
    name = "fork-rng-devices"
    safety = Safety.SAFE
    table = {"torch.random.fork_rng": "fork_rng"}
    needs = Needs(calls_only=True, targets=frozenset(table))

    valid = [
        "import torch\nwith torch.random.fork_rng():\n    noise = torch.randn(4)\n",
        "import torch\nwith torch.random.fork_rng(devices=[], device_type='mps'):\n    noise = torch.randn(4)\n",
        "def f(torch):\n    return torch.random.fork_rng(devices=[0])\n",
    ]
    invalid = [
        Example(
            example_code("""
            import torch


            def generate(model, prompts):
                with torch.random.fork_rng(devices=[torch.cuda.current_device()]):
                    torch.manual_seed(42)
                    return model.generate(prompts)
            """),
            example_code("""
            import porter_runtime
            import torch


            def generate(model, prompts):
                with porter_runtime.fork_rng(devices=[torch.cuda.current_device()]):
                    torch.manual_seed(42)
                    return model.generate(prompts)
            """),
        ),
        Example(
            "from torch.random import fork_rng\nwith fork_rng([local_rank], device_type='cuda'):\n    x = sample()\n",
            "import porter_runtime\nwith porter_runtime.fork_rng([local_rank], device_type='cuda'):\n    x = sample()\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func) is None or not _forks_cuda_devices(original):
            return updated
        return super().leave_Call(original, updated)


def _forks_cuda_devices(call: cst.Call) -> bool:
    """Devices named (keyword or first positional), device type left out or "cuda"."""
    if any(a.star for a in call.args):
        return False
    devices = any(a.keyword is None for a in call.args[:1]) or any(
        a.keyword is not None and a.keyword.value == "devices" for a in call.args)
    kind = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "device_type"), None)
    if kind is None:
        return devices
    return devices and isinstance(kind, cst.SimpleString) and kind.evaluated_value == "cuda"
