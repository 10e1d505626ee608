"""A CUDA extension only CUDA branches use becomes optional (TP604)."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.families.thirdparty.kernel_builds import (
    BUILDERS,
    COMPILED_MODULES,
    guarded_import,
    imports_of,
    optional_builds,
    optional_import,
)
from porter.rulebase.families.thirdparty.uses import example_code
from porter.rulebase.needs import literal_patterns
from porter.rulebase.rule import Example, Needs, Rule, Safety

#: A use of one needs its import (`rotary_emb` alone is an attribute in most models);
#: a builder, its module's name.
_IMPORTS_AN_EXTENSION = (*imports_of(COMPILED_MODULES), *literal_patterns(["cpp_extension"]))



class CudaExtensionOptional(Rule):
    """A CUDA extension that the code only uses for CUDA tensors becomes optional.

    What:
    Where every use of a compiled CUDA extension sits in a branch that runs only for
    CUDA tensors (`if x.is_cuda:`, `if x.device.type == "cuda":`, after `if not
    x.is_cuda: return ...`), the module's own PyTorch path already covers other
    devices and only the build or import stops it. A module-level `import rotary_emb`
    (`fused_dense_lib`, `dropout_layer_norm`, `selective_scan_cuda`, ...) is wrapped
    in `try` / `except ImportError:` that re-raises where torch sees CUDA and sets the
    name to None elsewhere, and a module-level
    `ext = load(name, sources)` (or `load_inline(..., cuda_sources=...)`) of CUDA
    sources becomes `ext = porter_runtime.build_cuda_extension(load, name, sources)`.

    Why:
    The import fails (`ModuleNotFoundError: No module named 'rotary_emb'`) and the
    build fails (no nvcc, no CUDA_HOME) before the PyTorch path can run.

    Fix safety:
    Safe. On CUDA the extension is imported, or built with the caller's arguments at
    the same moment (import time), exactly as before, and a missing one fails the
    import as before (found on an H100: setting it to None there moved the failure to
    an `AttributeError` at the first CUDA call). Without CUDA no tensor is
    on CUDA, so the branches that use the extension never run.

    Known limits:
    Only tensor tests count as CUDA branches (`torch.cuda.is_available()` may be
    ported to "any accelerator"); uses in other files are not seen. A module without
    a module-level `import torch` is left to TP603. An extension with
    any other use is reported by TP602 / TP603 instead.
    """

    code = "TP604"
    name = "cuda-extension-optional"
    safety = Safety.SAFE
    needs = Needs(
        whole_file=True,  # every use in the module decides
        targets=frozenset({*COMPILED_MODULES, *BUILDERS}),
        byte_patterns=_IMPORTS_AN_EXTENSION,
    )

    valid = [
        # used outside a CUDA branch: TP603 reports it
        "import rotary_emb\nout = rotary_emb.apply(x, c, s)\n",
        # already optional
        "try:\n    import rotary_emb\nexcept ImportError:\n    rotary_emb = None\n\n"
        "def f(x):\n    if x.is_cuda:\n        return rotary_emb.apply(x)\n    return x\n",
        # a lookalike module of the same name in a package
        "from .ops import rotary_emb\n\ndef f(x):\n    if x.is_cuda:\n        return rotary_emb.apply(x)\n    return x\n",
        # shadowed builder
        "def build(load):\n    ext = load('k', ['k.cu'])\n",
    ]
    invalid = [
        Example(
            example_code("""
            import torch
            import rotary_emb  # flash-attention/csrc/rotary


            def apply_rotary(x, cos, sin):
                if not x.is_cuda:
                    return rotate_half_torch(x, cos, sin)
                out = torch.empty_like(x)
                rotary_emb.apply_rotary(*x.chunk(2, -1), cos, sin, *out.chunk(2, -1), False)
                return out
            """),
            example_code("""
            import torch
            try:
                import rotary_emb  # flash-attention/csrc/rotary
            except ImportError:  # CUDA-only extension: off CUDA the PyTorch path runs without it
                if torch.cuda.is_available():
                    raise
                rotary_emb = None


            def apply_rotary(x, cos, sin):
                if not x.is_cuda:
                    return rotate_half_torch(x, cos, sin)
                out = torch.empty_like(x)
                rotary_emb.apply_rotary(*x.chunk(2, -1), cos, sin, *out.chunk(2, -1), False)
                return out
            """),
        ),
        Example(
            example_code("""
            import os
            import torch.nn.functional as F
            from torch.utils.cpp_extension import load as build

            _here = os.path.dirname(os.path.abspath(__file__))
            _fused = build(name="bias_gelu", sources=[os.path.join(_here, "csrc", f) for f in (
                "bias_gelu.cpp", "bias_gelu_kernel.cu")])


            def bias_gelu(x, bias):
                if x.device.type == "cuda" and x.dtype == torch.float16:
                    return _fused.forward(x, bias)
                return F.gelu(x + bias, approximate="tanh")
            """),
            example_code("""
            import porter_runtime
            import os
            import torch.nn.functional as F
            from torch.utils.cpp_extension import load as build

            _here = os.path.dirname(os.path.abspath(__file__))
            _fused = porter_runtime.build_cuda_extension(build, name="bias_gelu", sources=[os.path.join(_here, "csrc", f) for f in (
                "bias_gelu.cpp", "bias_gelu_kernel.cu")])


            def bias_gelu(x, bias):
                if x.device.type == "cuda" and x.dtype == torch.float16:
                    return _fused.forward(x, bias)
                return F.gelu(x + bias, approximate="tanh")
            """),
        ),
    ]

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine,
                                  updated: cst.SimpleStatementLine) -> cst.BaseStatement:
        name = optional_import(self.ctx.module, original)
        if name is None:
            return updated
        new = guarded_import(self, original, updated, "CUDA-only extension: off CUDA the PyTorch path runs without it",
                             name)
        return self.rewrite(original, new, f"`{name}` is imported where it exists (CUDA); the module's "
                            "PyTorch path runs without it")

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not hasattr(self, "_builds"):
            self._builds = optional_builds(self)
        if original not in self._builds:
            return updated
        first = updated.args[0] if updated.args else None
        comma = first.comma if first is not None and isinstance(first.comma, cst.Comma) \
            else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        builder = cst.Arg(updated.func, comma=comma if first is not None else cst.MaybeSentinel.DEFAULT)
        new = updated.with_changes(func=self.runtime("build_cuda_extension"), args=[builder, *updated.args])
        return self.rewrite(original, new, "the CUDA extension is built only where CUDA is; the "
                            "module's PyTorch path runs elsewhere")
