"""Custom kernels and CUDA-only packages: Triton kernels, `.cu` extensions, deepspeed & co."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.cuda_packages import advice_for
from porter.matching import dotted_name
from porter.rule import Example, Rule, Safety, keyword, positional, string_value
from porter.rules._thirdparty_common import GuardTracker, under

_TRITON_DECORATORS = frozenset({"triton.jit", "triton.autotune", "triton.heuristics"})


def _decorator_name(rule: Rule, decorator: cst.Decorator) -> Optional[str]:
    target = decorator.decorator
    if isinstance(target, cst.Call):
        target = target.func
    return rule.qualname(target)


class _Launches(cst.CSTVisitor):
    """``kernel[grid](...)`` launch sites by kernel name, with the enclosing ``if``."""

    def __init__(self) -> None:
        self.found: dict[str, list[tuple[cst.Call, Optional[cst.If]]]] = {}
        self._ifs: list[cst.If] = []

    def visit_If(self, node: cst.If) -> None:
        self._ifs.append(node)

    def leave_If(self, node: cst.If) -> None:
        self._ifs.pop()

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Subscript) and isinstance(func.value, cst.Name):
            enclosing = self._ifs[-1] if self._ifs else None
            self.found.setdefault(func.value.value, []).append((node, enclosing))


class TritonKernel(Rule):
    """`@triton.jit` kernels are reported with their launch sites and any PyTorch path.

    What:
    Reports each function decorated with `@triton.jit` (or `@triton.autotune` /
    `@triton.heuristics`), naming the kernel, the lines that launch it
    (`kernel[grid](...)`), and, when a launch sits under an `if` that has an `else`,
    that branch as the repository's own PyTorch path behind a flag.

    Why:
    Triton has no macOS wheels and compiles for NVIDIA/AMD GPUs only: `import triton`
    fails on a Mac, and a kernel cannot run on MPS or the CPU.

    Fix safety:
    Review only: a kernel's PyTorch equivalent must be written (or an existing one
    selected) by a human who knows what the kernel computes.

    Known limits:
    Launches through other names (a kernel stored in a dict, passed as an argument)
    are not traced; only launches in the same file are listed.
    """

    code = "TP601"
    whole_file = True  # launch sites anywhere in the module, by line
    name = "triton-kernel"
    safety = Safety.REVIEW
    targets = _TRITON_DECORATORS

    valid = [
        "def jit(fn):\n    return fn\n\n@jit\ndef add_kernel(x):\n    return x\n",
        "import mylib as triton\n\n@triton.jit\ndef add_kernel(x_ptr, n):\n    pass\n",
        "def make(triton):\n    @triton.jit\n    def k(x):\n        pass\n    return k\n",
    ]
    invalid = [
        Example(
            "import triton\nimport triton.language as tl\n\n@triton.jit\n"
            "def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    pass\n\n"
            "def add(x, y):\n    if x.is_cuda:\n        add_kernel[(1,)](x, y, x.numel(), BLOCK=1024)\n"
            "    else:\n        x.add_(y)\n",
        ),
        Example(
            "from triton import autotune, jit\n\n@autotune(configs=[], key=['n'])\n@jit\n"
            "def fused(x_ptr, n):\n    pass\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._launches: Optional[dict] = None

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if not any(_decorator_name(self, d) in _TRITON_DECORATORS for d in node.decorators):
            return
        kernel = node.name.value
        launches = self._launch_sites().get(kernel, [])
        where = ", ".join(f"line {self._line(call)}" for call, _ in launches) or "not in this file"
        self.flag(node, f"Triton kernel `{kernel}` (launched: {where}) needs a CUDA GPU; Triton "
                  "does not install on a Mac", suggestion=self._suggestion(kernel, launches))

    def _launch_sites(self) -> dict:
        if self._launches is None:
            finder = _Launches()
            self.ctx.module.visit(finder)
            self._launches = finder.found
        return self._launches

    def _line(self, node: cst.CSTNode) -> int:
        return self.ctx.positions()[node].start.line

    def _suggestion(self, kernel: str, launches: list) -> str:
        for _, branch in launches:
            if branch is not None and branch.orelse is not None:
                test = self.ctx.code_for(branch.test).strip()
                return (f"the launch is under `if {test}:` (line {self._line(branch)}), whose "
                        "`else` branch is a PyTorch path: keep that condition false off CUDA "
                        "(e.g. `porter_runtime.device_type() == \"cuda\"`) and guard "
                        "`import triton` with try/except ImportError")
        return (f"write a PyTorch function computing what `{kernel}` computes and call it when "
                "porter_runtime.device_type() != \"cuda\"; guard `import triton` with "
                "try/except ImportError")


def _sources(call: cst.Call) -> list[str]:
    """String literals among the `sources=` / second positional argument of a call."""
    arg = keyword(call, "sources")
    args = positional(call)
    value = arg.value if arg is not None else (args[1].value if len(args) > 1 else None)
    if isinstance(value, (cst.List, cst.Tuple)):
        return [s for s in (string_value(e.value) for e in value.elements) if s is not None]
    single = string_value(value) if value is not None else None
    return [single] if single is not None else []


def _ext_name(call: cst.Call) -> str:
    arg = keyword(call, "name")
    args = positional(call)
    value = arg.value if arg is not None else (args[0].value if args else None)
    return (string_value(value) if value is not None else None) or "?"


class CudaExtension(Rule):
    """CUDA C++ extensions (`cpp_extension.load` of `.cu` files, `CUDAExtension`) are reported.

    What:
    Reports `torch.utils.cpp_extension.load(...)` with `.cu` sources,
    `load_inline(..., cuda_sources=...)` and `CUDAExtension(...)` (usually in
    setup.py), naming the extension and its CUDA sources.

    Why:
    Building them needs nvcc and the CUDA toolkit; on a Mac the build fails (`No CUDA
    runtime is found` / `CUDA_HOME environment variable is not set`).

    Fix safety:
    Review only: the kernel's PyTorch equivalent must be written by a human, or the
    extension made optional.

    Known limits:
    Source lists built at run time (globs, joins) are not read; the extension is
    still reported when its call is `CUDAExtension` or `load_inline(cuda_sources=...)`.
    """

    code = "TP602"
    name = "cuda-extension"
    safety = Safety.REVIEW
    targets = frozenset({"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline",
                         "torch.utils.cpp_extension.CUDAExtension"})

    valid = [
        "from torch.utils.cpp_extension import load\nops = load(name='ops', sources=['ops.cpp'])\n",
        "def build(load):\n    return load(name='ops', sources=['ops.cu'])\n",
        "from mylib import CUDAExtension\next = CUDAExtension('ops', ['ops.cu'])\n",
    ]
    invalid = [
        Example("from torch.utils.cpp_extension import load\n"
                "ops = load(name='fused_ops', sources=['ops.cpp', 'ops_kernel.cu'], verbose=True)\n"),
        Example("from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
                "setup(name='pkg', ext_modules=[CUDAExtension('pkg._C', ['csrc/a.cpp', 'csrc/b.cu'])],\n"
                "      cmdclass={'build_ext': BuildExtension})\n"),
        Example("import torch.utils.cpp_extension as ext\n"
                "mod = ext.load_inline('k', cpp_sources=CPP, cuda_sources=CUDA, functions=['f'])\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.qualname(original.func)
        if name not in self.targets:
            return updated
        sources = _sources(original)
        cuda = [s for s in sources if s.endswith((".cu", ".cuh"))]
        kind = name.rsplit(".", 1)[-1]
        if kind == "load" and not cuda:
            return updated
        if kind == "load_inline" and keyword(original, "cuda_sources") is None:
            return updated
        shown = ", ".join(cuda) if cuda else "inline CUDA sources"
        self.flag(original, f"CUDA extension `{_ext_name(original)}` ({shown}) needs nvcc and a CUDA "
                  "GPU; it does not build on a Mac",
                  suggestion="make the extension optional (build it only when "
                  "torch.cuda.is_available() / CUDA_HOME is set) and give its ops a PyTorch "
                  "fallback used when the import fails")
        return updated


#: The CUDA-only packages no other rule ports, with their advice (porter.cuda_packages).
_PACKAGES = {name: advice_for(name) for name in (
    "triton", "deepspeed", "mamba_ssm", "selective_scan_cuda", "causal_conv1d", "liger_kernel",
    "transformer_engine", "fused_dense_lib", "xentropy_cuda_lib", "flash_attn_2_cuda")}


class CudaOnlyPackage(GuardTracker, Rule):
    """Unguarded imports of CUDA-only packages (deepspeed, mamba-ssm, causal-conv1d, ...) are reported.

    What:
    Reports `import` / `from ... import` of triton, deepspeed, mamba_ssm,
    causal_conv1d, liger_kernel, transformer_engine and raw CUDA extension modules
    (`selective_scan_cuda`, `fused_dense_lib`, ...) that are not inside a `try`
    catching ImportError, with the PyTorch path to use instead; when the import sits
    under an `if`, that flag is named.

    Why:
    These packages have no macOS build (or need CUDA at import), so the import fails
    before any code runs: `ModuleNotFoundError: No module named 'mamba_ssm'`.

    Fix safety:
    Review only: choosing the PyTorch path and wiring it in is a human decision.

    Known limits:
    One finding per import statement; uses of the package are not listed.
    """

    code = "TP603"
    name = "cuda-only-package"
    safety = Safety.REVIEW
    targets = frozenset(_PACKAGES)

    valid = [
        "try:\n    import deepspeed\nexcept ImportError:\n    deepspeed = None\n",
        "import mylib.deepspeed as deepspeed\n",
        "from .mamba_ssm import Mamba\n",
    ]
    invalid = [
        Example("import deepspeed\nengine, opt, _, _ = deepspeed.initialize(model=model, config=cfg)\n"),
        Example("from mamba_ssm import Mamba\nlayer = Mamba(d_model=256)\n"),
        Example("if args.fast:\n    from causal_conv1d import causal_conv1d_fn\n"),
        Example("import triton.language as tl\n"),
    ]

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            if self._report(node, name):
                return

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if not node.relative and node.module is not None:
            self._report(node, dotted_name(node.module) or "")

    def _report(self, node: cst.CSTNode, module: str) -> bool:
        root = module.split(".")[0]
        if root not in _PACKAGES or self.guarded() or not under(module, [root]):
            return False
        flag = self.flag_test()
        behind = f" (behind `if {self.ctx.code_for(flag.test).strip()}:`; keep it false off CUDA)" \
            if flag is not None else ""
        self.flag(node, f"`{module}` is CUDA-only and does not install on a Mac{behind}",
                  suggestion=_PACKAGES[root])
        return True
