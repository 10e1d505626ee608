"""CUDA C++ extensions (TP602): `cpp_extension.load` of `.cu` files, `CUDAExtension`."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.families.thirdparty.kernel_builds import cuda_sources, optional_builds
from porter.rulebase.families.thirdparty.uses import example_code
from porter.rulebase.rule import Example, Needs, Rule, Safety, keyword, positional, string_value


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

    Any `.cu` / `.cuh` string in the call counts, also inside `os.path.join(here,
    "kernel.cu")`, lists and f-strings. A module-level build that TP604 makes optional
    (its ops have a PyTorch path) is TP604's.

    Known limits:
    Source lists built elsewhere (a glob, a variable) are not read; the extension is
    still reported when its call is `CUDAExtension` or `load_inline(cuda_sources=...)`.
    """

    code = "TP602"
    name = "cuda-extension"
    safety = Safety.REVIEW
    needs = Needs(
        whole_file=True,  # which builds TP604 makes optional depends on the whole module
        targets=frozenset({"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline",
                           "torch.utils.cpp_extension.CUDAExtension"}),
    )

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
        # sources assembled at run time; no PyTorch path for the op (line 4)
        Example(example_code("""
            import os
            from torch.utils.cpp_extension import load
            here = os.path.dirname(__file__)
            _ext = load("fused", [os.path.join(here, "fused.cpp"), f"{here}/fused_kernel.cu"])

            def fused(x):
                return _ext.forward(x)
            """)),
    ]

    def _optional(self) -> set[cst.Call]:
        if not hasattr(self, "_builds"):
            self._builds = optional_builds(self)
        return self._builds

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.qualname(original.func)
        if name not in self.targets or original in self._optional():
            return updated
        sources = cuda_sources(original)
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
