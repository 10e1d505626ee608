"""A module-level Triton import stops failing where Triton is missing (TP605)."""

from __future__ import annotations

from typing import Optional, Union

import libcst as cst

from porter.rulebase.families.thirdparty.kernel_builds import torch_alias
from porter.rulebase.families.thirdparty.triton_imports import made_importable, triton_bindings
from porter.rulebase.families.thirdparty.uses import example_code
from porter.rulebase.rule import Example, Needs, Rule, Safety

_GUARD = """\
try:
{imports}
except ImportError:  # Triton is CUDA-only: off CUDA the kernels are defined, never launched
{import_torch}    if {torch}.cuda.is_available():
        raise
{stand_ins}
"""

_FUSED_NORM = example_code("""
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _rms_norm_fwd(X, W, Y, stride, N, eps, BLOCK_N: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK_N)
        x = tl.load(X + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
        rstd = 1 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(W + cols, mask=cols < N)
        tl.store(Y + row * stride + cols, x * rstd * w, mask=cols < N)


    def rms_norm_ref(x, weight, eps=1e-6):
        rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
        return (x.float() * rstd * weight.float()).to(x.dtype)


    def rms_norm(x, weight, eps=1e-6):
        if not x.is_cuda:
            return rms_norm_ref(x, weight, eps)
        y = torch.empty_like(x)
        N = x.shape[-1]
        _rms_norm_fwd[(x.shape[0],)](x, weight, y, x.stride(0), N, eps, BLOCK_N=triton.next_power_of_2(N))
        return y
    """)


class TritonImport(Rule):
    """A module-level `import triton` no longer stops the module importing where Triton is missing.

    What:
    Wraps the module-level import lines of Triton (`import triton`, `import
    triton.language as tl`, `from triton import cdiv`, `from triton.language.extra
    import libdevice`) of a module that imports torch in `try` / `except
    ImportError:`, which re-raises where torch sees CUDA and binds
    `porter_runtime.triton_stand_in(...)` elsewhere. The stand-ins let the module's
    kernel definitions run at import time (`@triton.jit`, `@triton.autotune(configs=
    [triton.Config(...)], key=...)`, `@triton.heuristics`, `tl.constexpr`
    annotations, `triton.cdiv` in a grid); launching a kernel raises an error that
    names it. The kernels themselves stay TP601's findings.

    Why:
    Triton has no macOS wheel and torch's CPU builds bring none, so `import triton`
    fails on a Mac before any of the module's PyTorch code runs: the `*_ref`
    function beside the kernel, the `if not x.is_cuda:` branch, the model class
    that imports the module for one optional kernel, the package `__init__` that
    imports every kernel module.

    Fix safety:
    Safe. On CUDA the import runs exactly as before and a missing Triton still fails
    it. Without CUDA the module failed to import before; now it imports and only a
    kernel launch fails. Nothing enters `sys.modules`, so code that asks whether
    Triton is installed (`importlib.util.find_spec("triton")`) is told the truth.

    Known limits:
    Left to TP603: a module every import of which, up every chain, the tree catches
    with `except ImportError` (the fallback there must keep running; a note,
    porter.project.import_fallbacks), imports inside functions or under an `if`
    (reported), and modules only code run where CUDA is imports (notes). In a module
    with no `import torch` above the Triton import, the handler imports torch for its
    CUDA test.
    Module-level code that computes with Triton objects (not just defines kernels)
    fails with the stand-in's error at import.
    """

    code = "TP605"
    name = "triton-import"
    safety = Safety.SAFE
    needs = Needs(
        whole_file=True,  # the module's body decides (module-level lines only)
        targets=frozenset({"triton"}),
    )

    valid = [
        # already guarded by the repository
        "import torch\ntry:\n    import triton\nexcept ImportError:\n    triton = None\n",
        # inside a function: runs only when the kernel path is taken
        "import torch\n\ndef fused(x):\n    import triton\n    return x\n",
        # another module of the tree catches its import error and falls back: left alone
        Example(
            "import torch\nimport triton\n\n@triton.jit\ndef _fwd(X):\n    pass\n",
            path="ops/fused_norm.py",
            project=(("ops/__init__.py", ""),
                     ("model.py", "try:\n    from ops.fused_norm import rms_norm\nexcept ImportError:\n"
                                  "    rms_norm = None\n")),
        ),
    ]
    invalid = [
        Example(_FUSED_NORM, _FUSED_NORM.replace(
            "import torch\nimport triton\nimport triton.language as tl\n",
            "import porter_runtime\nimport torch\ntry:\n    import triton\n    import triton.language as tl\n"
            "except ImportError:  # Triton is CUDA-only: off CUDA the kernels are defined, never launched\n"
            "    if torch.cuda.is_available():\n        raise\n"
            "    triton = porter_runtime.triton_stand_in(\"triton\")\n"
            "    tl = porter_runtime.triton_stand_in(\"triton.language\")\n")),
        # from-imports, with the caller's own fallback made importable too
        Example(
            example_code("""
                import torch
                from triton import cdiv
                from triton.language.extra import libdevice as ld  # erf
                from .ops import gelu_kernel
                """),
            example_code("""
                import porter_runtime
                import torch
                try:
                    from triton import cdiv
                    from triton.language.extra import libdevice as ld  # erf
                except ImportError:  # Triton is CUDA-only: off CUDA the kernels are defined, never launched
                    if torch.cuda.is_available():
                        raise
                    cdiv = porter_runtime.triton_stand_in("triton.cdiv")
                    ld = porter_runtime.triton_stand_in("triton.language.extra.libdevice")
                from .ops import gelu_kernel
                """),
        ),
        # torch imported below Triton: not bound yet when the handler runs, so it imports it
        Example(
            "import triton\nimport torch\n",
            "import porter_runtime\ntry:\n    import triton\n"
            "except ImportError:  # Triton is CUDA-only: off CUDA the kernels are defined, never launched\n"
            "    import torch\n\n    if torch.cuda.is_available():\n        raise\n"
            "    triton = porter_runtime.triton_stand_in(\"triton\")\nimport torch\n",
        ),
        # a kernel-only module with no torch import: the handler imports torch for its test
        Example(
            "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef softplus(dt):\n"
            "    return tl.math.log(tl.math.exp(dt) + 1)\n",
            "import porter_runtime\ntry:\n    import triton\n    import triton.language as tl\n"
            "except ImportError:  # Triton is CUDA-only: off CUDA the kernels are defined, never launched\n"
            "    import torch\n\n    if torch.cuda.is_available():\n        raise\n"
            "    triton = porter_runtime.triton_stand_in(\"triton\")\n"
            "    tl = porter_runtime.triton_stand_in(\"triton.language\")\n\n\n@triton.jit\ndef softplus(dt):\n"
            "    return tl.math.log(tl.math.exp(dt) + 1)\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._runs: dict[cst.CSTNode, list[cst.SimpleStatementLine]] = {}
        self._grouped: set[cst.CSTNode] = set()
        # consecutive lines (no blank line or comment between them) become one `try`
        run: list[cst.SimpleStatementLine] = []
        for stmt in [*ctx.module.body, None]:
            wrapped = stmt is not None and made_importable(ctx, stmt)
            if wrapped and run and not stmt.leading_lines:
                run.append(stmt)
                continue
            if run:
                self._runs[run[0]] = run
                self._grouped.update(run[1:])
            run = [stmt] if wrapped else []

    def _torch_before(self, stmt: cst.CSTNode) -> Optional[str]:
        """The name a module-level ``import torch`` above ``stmt`` binds (the handler runs
        while the module is importing: a later import has not bound it yet)."""
        body = list(self.ctx.module.body)
        above = cst.Module(body=body[: body.index(stmt)]) if stmt in body else None
        return torch_alias(above) if above is not None else None

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine
                                  ) -> Union[cst.BaseStatement, cst.RemovalSentinel]:
        if original in self._grouped and not self.ctx.suppressed(original, self.code):
            # inside the `try` its run's first line became: a rewrite of this line too, so
            # that what reads rewrites by line (the ledger, the notes) sees it ported
            self.ctx.record(self, original, "rewrite", "this Triton import moves into the `try` above it, with "
                            "the line before it")
            return cst.RemoveFromParent()
        run = self._runs.get(original)
        if run is None:
            return updated
        lines = [updated, *run[1:]]
        imports = "\n".join("    " + self.ctx.module.code_for_node(line.with_changes(leading_lines=())).rstrip("\n")
                            for line in lines)
        bindings = [b for line in run for b in (triton_bindings(line) or [])]
        stand_ins = "\n".join(f'    {name} = {self.ctx.code_for(self.runtime("triton_stand_in"))}("{path}")'
                              for name, path in dict(bindings).items())
        torch = self._torch_before(original)
        code = _GUARD.format(imports=imports, torch=torch or "torch", stand_ins=stand_ins,
                             import_torch="" if torch else "    import torch\n\n")
        new = cst.parse_statement(code).with_changes(leading_lines=original.leading_lines)
        result = self.rewrite(original, new, "Triton's import no longer stops the module importing off CUDA: "
                              "the kernels are defined there (stand-ins) and only a launch fails")
        if result is original:  # suppressed or kept: its run's other lines stay as they are
            self._grouped.difference_update(run[1:])
        return result
