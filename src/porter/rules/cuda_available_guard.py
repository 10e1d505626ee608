"""``torch.cuda.is_available()`` guards that mean "is there an accelerator" (PT202)."""

from __future__ import annotations

from textwrap import dedent

from porter.rulebase.conditions.availability_checks import IS_AVAILABLE
from porter.rulebase.families.availability.guard import GuardDecisions
from porter.rulebase.families.availability.roles import AvailabilityRoles
from porter.rulebase.evidence import ReadsFlag, Uses
from porter.rulebase.rule import Example, Needs, Rule, Safety

class CudaAvailableGuard(GuardDecisions, AvailabilityRoles, Rule):
    """`if torch.cuda.is_available():` around device-neutral code tests `is_accelerator_available()`.

    What:
    Rewrites `torch.cuda.is_available()` to `porter_runtime.is_accelerator_available()` where it is the test of an
    `if`/`elif` or a ternary (alone or as an operand of `and`), and the code it guards no longer needs CUDA once
    porter's other rules ran: no name or string mentioning cuda or nccl, no import, nothing from a CUDA-only package
    (apex, flash_attn, xformers, triton, bitsandbytes, deepspeed, ...). porter's own calls
    (`porter_runtime.device(f"cuda:{r}")`) and CUDA backend flags (`torch.backends.cuda.*`,
    `torch.backends.cudnn.*`: harmless elsewhere) don't count as needing CUDA. A guard that is already right on
    every device is left alone with no finding: its CUDA side only sets CUDA backend flags or picks "nccl", its
    other side (if any) only picks "gloo". An `elif torch.cuda.is_available():` whose `else` only reports and stops
    (`print(...)`; `sys.exit(1)`) becomes that `else`, led by `porter_runtime.require_device(msg)`. A device ternary
    left as it is (`f"cuda:{rank}" if torch.cuda.is_available() else "cpu"`) is a note (severity "info"): its CPU
    arm runs off CUDA; so is the answer used as a repeat count (`(torch.device("cuda"),) *
    torch.cuda.is_available()`), and a check that only keeps a question about CUDA's own device from being asked
    without CUDA (`not torch.cuda.is_available() or torch.cuda.is_bf16_supported()`, `torch.cuda.is_available() and
    torch.cuda.get_device_capability()[0] >= 8` outside an `if` test; porter.rulebase.conditions.cuda_query_guard),
    and any use in a function (or module) that also asks `torch.backends.mps.is_available()`: its own device choice
    already has an MPS branch; and any use in test code (a test's CUDA gate or case, which the suite skips off CUDA)
    or in a module that builds CUDA kernels (`setup.py`, `cpp_extension`: only CUDA compiles them), unless its other
    branch raises (then the build stops off CUDA: a finding); and a flag set from it that nothing reads
    (`self.sync_cuda = torch.cuda.is_available()` with no other `.sync_cuda` in the repository); and a module's own
    flag that only requirements read (`HAS_CUDA = torch.cuda.is_available()` then `if not HAS_CUDA: raise ...`,
    which PT903 ports); and a half-precision flag set from it (`opt.half = torch.cuda.is_available() and opt.device
    != "cpu"`): off CUDA the code runs in float32, a speed choice that runs everywhere; and a flag whose every use
    picks between names (`"onnxruntime-gpu" if cuda else "onnxruntime"`, porter.rulebase.conditions.name_choice):
    off CUDA the CPU name, which runs. Every other use (`use_cuda = torch.cuda.is_available()`, `assert`, `not ...`,
    a guard around CUDA-only code) is reported with a suggestion, except where the answer is only printed
    (`print(...)`, an f-string) or only composes a message (`if not torch.cuda.is_available(): DESCRIPTION +=
    "Running on CPU"`: a note), and where it is a requirement (`assert torch.cuda.is_available()`, `if not ...:
    raise`): PT903's.

    Why:
    `torch.cuda.is_available()` is False on a Mac, so code that means "is there an
    accelerator" runs on the CPU although MPS is there.

    Fix safety:
    Safe. With CUDA both calls are True, so the same branch runs. Without CUDA the
    runtime says whether MPS or XPU is there (never a faked `is_available()`), and
    the guarded code, being free of CUDA-only calls, runs there. `PORTER_DEVICE=cpu`
    makes it False. A required `elif`: on CUDA the same setup runs (the `else` never
    did) and `require_device` does nothing; elsewhere the setup runs on the resolved
    device instead of the program stopping. A guard whose code still needs CUDA is
    reported, except where that code only releases, collects or measures CUDA memory
    (`torch.cuda.empty_cache()`, `ipc_collect()`, under `with torch.cuda.device(...)`):
    skipping it changes no result, so it is a note; so is a test's CUDA case (in test
    code: `["cpu"] + (["cuda"] if torch.cuda.is_available() else [])`, a CUDA-vs-CPU
    comparison), skipped off CUDA as the test intends while its other cases run.

    Known limits:
    The guarded code's callees are not followed: a guarded call of a local function
    that uses a CUDA extension would now run on a Mac. The check is syntactic and
    conservative: a guarded `print("cuda ok")` keeps the guard as it was. Arguments
    `pin_memory=torch.cuda.is_available()` are left to PT401.
    """

    code = "PT202"
    name = "cuda-available-guard"
    safety = Safety.SAFE
    # a unit that reads the module's own flag too: a flag only requirements read is a note
    needs = Needs(targets=frozenset({IS_AVAILABLE}), unit=Uses(IS_AVAILABLE) | ReadsFlag(IS_AVAILABLE))

    valid = [
        "def f(torch):\n    if torch.cuda.is_available():\n        model.half()\n",
        "import mylib as torch\nuse_gpu = torch.cuda.is_available()\n",
        "import torch\nloader = DataLoader(ds, pin_memory=torch.cuda.is_available())\n",
        "import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
        "import torch\nprint('CUDA:', torch.cuda.is_available())\nlog(f'cuda={torch.cuda.is_available()}')\n",
        # right on every device: CUDA-only flags and the NCCL/gloo choice
        dedent("""\
            import torch

            if torch.cuda.is_available():
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
            """),
        dedent("""\
            import torch as t
            from torch.backends import cudnn

            if args.gpu and t.cuda.is_available():
                cudnn.benchmark = True
            """),
        # CUDA's own diagnostics (OLMo-core's trainer and utils): nothing to do elsewhere
        dedent("""\
            import contextlib
            import torch

            @contextlib.contextmanager
            def cuda_sync_debug_mode(debug_mode):
                current_mode = None
                try:
                    if torch.cuda.is_available():
                        current_mode = torch.cuda.get_sync_debug_mode()
                        torch.cuda.set_sync_debug_mode(debug_mode)
                    yield
                finally:
                    if current_mode is not None:
                        torch.cuda.set_sync_debug_mode(current_mode)

            def fit(self):
                if torch.cuda.is_available():
                    torch.cuda.set_sync_debug_mode("warn")
            """),
        dedent("""\
            import torch
            import torch.distributed as dist

            backend = "gloo" if not torch.cuda.is_available() else "nccl"
            dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
            """),
        # TP604's optional extension: its import stays fatal where CUDA is
        dedent("""\
            import torch

            try:
                import rotary_emb
            except ImportError:
                if torch.cuda.is_available():
                    raise
                rotary_emb = None
            """),
        dedent("""\
            from torch.cuda import is_available

            if is_available():
                backend = 'nccl'
            else:
                backend = 'gloo'
            """),
    ]
    invalid = [
        Example(
            "import torch\n\nif torch.cuda.is_available():\n    torch.backends.cudnn.benchmark = True\n"
            "    model = model.to(device)\n",
            "import porter_runtime\nimport torch\n\nif porter_runtime.is_accelerator_available():\n"
            "    torch.backends.cudnn.benchmark = True\n    model = model.to(device)\n",
        ),
        Example(
            "import torch as t\n\nif args.gpu and t.cuda.is_available():\n    model = nn.DataParallel(model)\n",
            "import porter_runtime\n\nif args.gpu and porter_runtime.is_accelerator_available():\n"
            "    model = nn.DataParallel(model)\n",
        ),
        Example(
            "from torch.cuda import is_available\nbatch = 64 if is_available() else 8\n",
            "import porter_runtime\nbatch = 64 if porter_runtime.is_accelerator_available() else 8\n",
        ),
        Example("import torch\nuse_cuda = not args.no_cuda and torch.cuda.is_available()\n"),
        Example("import torch\nif torch.cuda.is_available():\n    model = apex.amp.initialize(model)\n    x = x.cuda()\n"),
        Example("import torch\nif not torch.cuda.is_available():\n    args.amp = False\n"),
        Example(  # PyTorch-GAN: the flag picks a legacy CUDA type, which a Mac lacks: kept, reported
            dedent("""\
                import torch

                cuda = True if torch.cuda.is_available() else False
                Tensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
                z = Tensor(np.random.normal(0, 1, (batch_size, latent_dim)))
                """),
            line=3, message="chooses a legacy CUDA tensor type",
        ),
        Example(  # dino's init_distributed_mode: the one-process setup needs no CUDA, the else only refuses
            dedent("""\
                import os
                import sys
                import torch

                def init_distributed_mode(args):
                    if "RANK" in os.environ:
                        args.rank = int(os.environ["RANK"])
                    elif torch.cuda.is_available():
                        print("Will run the code on one GPU.")
                        args.rank, args.gpu, args.world_size = 0, 0, 1
                    else:
                        print("Does not support training without GPU.")
                        sys.exit(1)
                """),
            dedent("""\
                import porter_runtime
                import os

                def init_distributed_mode(args):
                    if "RANK" in os.environ:
                        args.rank = int(os.environ["RANK"])
                    else:
                        porter_runtime.require_device("Does not support training without GPU.")
                        print("Will run the code on one GPU.")
                        args.rank, args.gpu, args.world_size = 0, 0, 1
                """),
        ),
        Example(  # the setup itself still needs CUDA: reported, not rewritten
            dedent("""\
                from torch.cuda import is_available

                if args.resume:
                    load(args.resume)
                elif is_available():
                    import apex
                    apex.amp.register_half_function(torch, "einsum")
                else:
                    raise SystemExit("needs a GPU")
                """),
            line=5, message="still needs CUDA",
        ),
        Example(  # porter's own rewrite inside the guard does not hold it back
            dedent("""\
                import porter_runtime
                import torch

                def setup(rank):
                    if torch.cuda.is_available():
                        porter_runtime.set_device(rank)
                        return porter_runtime.device(f"cuda:{rank}")
                """),
            dedent("""\
                import porter_runtime

                def setup(rank):
                    if porter_runtime.is_accelerator_available():
                        porter_runtime.set_device(rank)
                        return porter_runtime.device(f"cuda:{rank}")
                """),
            line=5, message="also admits MPS",
        ),
        Example(  # guided-diffusion's TrainLoop sets a flag that nothing reads: a note
            dedent("""\
                import torch as th

                class TrainLoop:
                    def __init__(self, model, batch_size):
                        self.model = model
                        self.batch_size = batch_size
                        self.sync_cuda = th.cuda.is_available()
                """),
            line=7, message="the flag it sets is read nowhere",
        ),
        Example(  # the module's own flag, read only by a requirement (PT903 ports it): a note
            dedent("""\
                import torch

                HAS_CUDA = torch.cuda.is_available()

                def setup():
                    if not HAS_CUDA:
                        raise RuntimeError("distributed training requires CUDA")
                """),
            line=3, message="read only by requirements",
        ),
        Example(  # half precision only on CUDA: off CUDA float32 runs, a speed choice (a note)
            dedent("""\
                import torch

                def parse_opt(opt):
                    opt.half = torch.cuda.is_available() and opt.device != "cpu"  # FP16 for fastest results
                    return opt
                """),
            line=4, message="half precision",
        ),
        Example(  # a flag that only picks a package and a provider: the CPU ones run off CUDA (a note)
            dedent("""\
                import torch

                def load_onnx(w, device):
                    cuda = torch.cuda.is_available() and device.type != "cpu"  # use CUDA
                    check_requirements(("onnx", "onnxruntime-gpu" if cuda else "onnxruntime"))
                    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]
                    return onnxruntime.InferenceSession(w, providers=providers)
                """),
            line=4, message="only picks between names",
        ),
        Example(  # the same flag also guards code: a finding
            dedent("""\
                import torch

                def load_onnx(w, device):
                    cuda = torch.cuda.is_available() and device.type != "cpu"
                    providers = ["CUDAExecutionProvider"] if cuda else ["CPUExecutionProvider"]
                    if cuda:
                        torch.backends.cudnn.benchmark = True
                    return cuda, providers
                """),
            line=4, message="if it means",
        ),
        Example(  # a flag that is read decides something: a finding
            dedent("""\
                import torch as th

                class TrainLoop:
                    def __init__(self, model):
                        self.sync_cuda = th.cuda.is_available()

                    def step(self):
                        if self.sync_cuda:
                            th.cuda.synchronize()
                """),
            line=5, message="if it means \"is there an accelerator\"",
        ),
        Example(  # the example picks MPS itself: right on a Mac as written, a note
            dedent("""\
                import torch

                def main(args):
                    use_cuda = args.cuda and torch.cuda.is_available()
                    use_mps = args.mps and torch.backends.mps.is_available()
                    if use_cuda:
                        device = torch.device("cuda")
                    elif use_mps:
                        device = torch.device("mps")
                    else:
                        device = torch.device("cpu")
                    return device
                """),
            line=4, message="so it picks MPS on a Mac as written: for information",
        ),
        Example(  # the devices a test runs on: CUDA's entry is left out off CUDA, the CPU one runs
            dedent("""\
                import torch

                class ShampooGraftingTest(unittest.TestCase):
                    available_devices = (torch.device("cpu"),) + (
                        torch.device("cuda"),
                    ) * torch.cuda.is_available()
                """),
            line=6, message="they are left out and the rest runs: for information",
        ),
        Example(  # the check only keeps CUDA's bf16 question off machines without CUDA: a note
            dedent("""\
                import torch

                def default_precision(training: bool) -> str:
                    if not torch.cuda.is_available() or torch.cuda.is_bf16_supported():
                        return "bf16-mixed" if training else "bf16-true"
                    return "16-mixed" if training else "16-true"
                """),
            line=4, message="only keeps a question about CUDA's own device",
        ),
        Example("import torch\n\nuse_bf16 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8\n",
                line=3, message="only keeps a question about CUDA's own device"),  # the same shield, assigned
        Example(  # torchtune's tests: a flag for the GPU tests' skipif, in test code, is a note
            dedent("""\
                import pytest
                import torch

                cuda_available = torch.cuda.is_available()

                @pytest.mark.skipif(not cuda_available, reason="The test requires GPUs to run.")
                def test_get_dtype_bf16():
                    assert torch.cuda.is_bf16_supported()
                """),
            path="tests/training/test_precision.py", line=4, message="in test code",
        ),
        Example(  # S4's optional kernels: the guard decides whether nvcc compiles them, a note
            dedent("""\
                import torch.cuda
                from setuptools import setup
                from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension

                ext_modules = []
                if torch.cuda.is_available() and CUDA_HOME is not None:
                    ext_modules.append(CUDAExtension("structured_kernels", ["cauchy.cpp", "cauchy_cuda.cu"]))
                setup(name="structured_kernels", ext_modules=ext_modules, cmdclass={"build_ext": BuildExtension})
                """),
            path="extensions/kernels/setup.py", line=6, message="in a module that builds CUDA kernels",
        ),
        Example(  # Deformable-DETR's ops: the other branch raises, so the README's build stops off CUDA
            dedent("""\
                import torch
                from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

                extension = CppExtension
                if torch.cuda.is_available() and CUDA_HOME is not None:
                    extension = CUDAExtension
                else:
                    raise NotImplementedError('Cuda is not availabel')
                """),
            path="models/ops/setup.py", line=5, message="its other branch stops the program",
        ),
        Example(  # an early exit right before a CUDA device query: a note
            dedent("""\
                import torch

                def attention_config(flash):
                    if not torch.cuda.is_available() or not flash:
                        return
                    props = torch.cuda.get_device_properties(torch.device("cuda"))
                    return "flash" if props.major >= 8 else "math"
                """),
            line=4, message="only keeps a question about CUDA's own device",
        ),
        Example(  # the other operand is no CUDA query: still a finding
            dedent("""\
                import torch

                def default_precision(args) -> str:
                    if not torch.cuda.is_available() or args.fp32:
                        return "32-true"
                    return "16-mixed"
                """),
            line=4, message="if it means",
        ),
        Example(  # cleanrl's multi-GPU script: the CPU fallback runs off CUDA, so a note, not a finding
            dedent("""\
                import torch

                device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() and args.cuda else "cpu")
                """),
            line=3, message="without CUDA it picks the CPU, which runs: for information",
        ),
        Example(  # OpenRLHF's loss normaliser: a CUDA index admitted to MPS would be cuda:0 on a Mac
            dedent("""\
                import torch


                def iter_grad_accum_global_norm(values):
                    device = torch.cuda.current_device() if torch.cuda.is_available() else "cpu"
                    return torch.tensor(values, device=device).norm()
                """),
            line=5, message="the CUDA choice is a device index",
        ),
        Example(  # a test skipped off CUDA never runs on a Mac: its guard is a note, not a finding
            dedent("""\
                import unittest

                import torch

                @unittest.skipIf(not torch.cuda.is_available(), "Skip when CUDA is not available")
                class ShampooGPUTest(unittest.TestCase):
                    def test_step(self):
                        model = torch.nn.Linear(4, 4).cuda()
                """),
            line=5, message="for information: a test skipped off CUDA, line 5",
        ),
        Example(  # ChatGLM-6B's api.py: memory clean-up after each request, skipped off CUDA: a note
            dedent("""\
                import torch

                CUDA_DEVICE = "cuda:0"

                def torch_gc():
                    if torch.cuda.is_available():
                        with torch.cuda.device(CUDA_DEVICE):
                            torch.cuda.empty_cache()
                            torch.cuda.ipc_collect()
                """),
            line=6, message="only releases or measures CUDA memory",
        ),
        Example(  # a test that skips itself off CUDA (Megatron-LM's unit tests): a note, as the decorator's
            dedent("""\
                import pytest
                import torch


                class TestNcclAllocator:
                    def test_nccl_mem_register_and_allreduce(self):
                        if not torch.cuda.is_available():
                            pytest.skip("CUDA is required for NCCL allocator tests")
                        buffer = torch.ones(4, device="cuda")
                """),
            line=7, message="a test skipped off CUDA: for information",
        ),
        Example(  # PixArt-alpha's gradio demos (blind round 17): the guard only extends the page's text
            "import torch\n\nDESCRIPTION = '# PixArt'\nif not torch.cuda.is_available():\n"
            "    DESCRIPTION += '<p>Running on CPU: this demo does not work on CPU.</p>'\n",
            line=4, message="only composes a message"),
        Example(  # a CUDA-only flag is harmless elsewhere: device-neutral code next to it is ported
            dedent("""\
                import torch

                if torch.cuda.is_available():
                    torch.backends.cuda.matmul.allow_tf32 = True
                    model = model.to(device)
                """),
            dedent("""\
                import porter_runtime
                import torch

                if porter_runtime.is_accelerator_available():
                    torch.backends.cuda.matmul.allow_tf32 = True
                    model = model.to(device)
                """),
        ),
    ]
