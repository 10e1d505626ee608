"""Unguarded imports of CUDA-only packages (TP603): deepspeed, mamba-ssm, causal-conv1d, ..."""

from __future__ import annotations

import ast
from textwrap import dedent

import libcst as cst

from porter.rulebase.conditions.guards import GuardFinder
from porter.rulebase.conditions.guards import parse as parse_ast
from porter.rulebase.cuda_packages import IMPORT_ROOTS, advice_for, is_cuda_only_module
from porter.rulebase.evidence import Imports
from porter.rulebase.families.thirdparty.idle_imports import guardable_unused
from porter.rulebase.families.thirdparty.kernel_builds import COMPILED_MODULES, imports_of, lone_import, optional_import
from porter.rulebase.families.thirdparty.flash_attn_calls import version_import
from porter.rulebase.families.thirdparty.kernel_references import wired_import
from porter.rulebase.families.thirdparty.triton_imports import made_importable
from porter.rulebase.families.thirdparty.uses import GuardTracker, under, uses
from porter.rulebase.matching import ast_dotted_name as dotted_name_ast
from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import bound_names

#: The CUDA-only packages no other rule ports, with their advice (porter.rulebase.cuda_packages).
_PACKAGES = {name: advice_for(name) for name in (
    "triton", "deepspeed", "mamba_ssm", "selective_scan_cuda", "causal_conv1d", "liger_kernel",
    "transformer_engine", "transformer_engine_torch", "fused_dense_lib", "xentropy_cuda_lib",
    "flash_attn_2_cuda", "rotary_emb", "dropout_layer_norm", "fused_softmax_lib",
    "fused_layer_norm_cuda", "amp_C", "causal_conv1d_cuda",
    # beyond deep-learning kernels, with their CPU counterparts
    "cuml", "cudf", "cugraph", "cupy", "cupyx", "pycuda", "cuda", "tensorrt", "torch_tensorrt",
    "tensorrt_llm", "numba.cuda", "flashinfer", "vllm", "auto_gptq", "exllamav2", "nvidia", "rmm",
)}


#: NVIDIA's inference engines. A model exported to one or run by one is a deployment
#: target with no Mac build at all, so an import inside a function (yolov5's
#: ``export_engine``, a ``.engine`` backend) is that option staying CUDA-only, not a
#: blocker: the module imports, and every other path runs. At module level it blocks.
_DEPLOYMENT = ("tensorrt", "torch_tensorrt", "tensorrt_llm")

#: An import naming one of TP603's packages: the words alone (`cuda`, `nvidia`) are in most files.
_IMPORTS_A_PACKAGE = imports_of({name.split(".")[0] for name in (*_PACKAGES, *IMPORT_ROOTS)})


class CudaOnlyPackage(GuardTracker, Rule):
    """Unguarded imports of CUDA-only packages (deepspeed, mamba-ssm, causal-conv1d, ...) are reported.

    What:
    Reports `import` / `from ... import` of triton, deepspeed, mamba_ssm,
    causal_conv1d, liger_kernel, transformer_engine, flashinfer, vllm, raw CUDA
    extension modules (`selective_scan_cuda`, `fused_dense_lib`, `rotary_emb`, ...)
    and CUDA-only packages beyond deep learning (RAPIDS `cuml` / `cudf` / `cugraph`,
    `cupy`, `pycuda`, `tensorrt`, `numba.cuda`) that are not inside a `try` catching
    ImportError with a fallback, with the PyTorch (or CPU library: scikit-learn,
    pandas, numpy) path to use instead; when the import sits under an `if`, that flag
    is named. An `except ImportError:` that re-raises, or only imports another
    CUDA-only module, is no guard. TensorRT (`tensorrt`, `torch_tensorrt`,
    `tensorrt_llm`) imported inside a function is a note: an NVIDIA deployment
    target (an engine export, a `.engine` backend) that stays CUDA-only while the
    module and its other paths run.

    Why:
    These packages have no macOS build (or need CUDA at import), so the import fails
    before any code runs: `ModuleNotFoundError: No module named 'mamba_ssm'`.

    Fix safety:
    Review only: choosing the PyTorch path and wiring it in is a human decision. An
    unused import TP609 guards is not reported.

    An import of the repository's own code is never reported, whatever its name: in
    mamba itself, ``from mamba_ssm.models.config_mamba import MambaConfig`` (and the
    ``from mamba_ssm import porter_runtime`` a port adds) is the code being ported, not a
    package to install (porter.project.model.ProjectModel.provides).

    Known limits:
    One finding per import statement; uses of the package are not listed. A file ported
    alone, without its repository, can't tell its own package from the one on PyPI.
    """

    code = "TP603"
    name = "cuda-only-package"
    safety = Safety.REVIEW
    #: A note in a module whose top level already imports a CUDA-only package (its finding comes first).
    restates_requirement = True
    # Only import statements are reported, so only the functions and classes that hold
    # one are parsed; the module-wide looks (is the import used, are all the uses of
    # an extension in CUDA branches: then it is TP604's) ask for the whole file when a
    # left-out definition names what the import binds (`ctx.see_all_uses_of`).
    needs = Needs(
        targets=frozenset({*_PACKAGES, *IMPORT_ROOTS}),
        byte_patterns=_IMPORTS_A_PACKAGE,
        unit=Imports(_PACKAGES, IMPORT_ROOTS),
    )
    chain_roots = frozenset({*_PACKAGES, *IMPORT_ROOTS})

    valid = [
        "try:\n    import deepspeed\nexcept ImportError:\n    deepspeed = None\n",
        # nanotron: a probe of this module that is False when the import fails guards it (its
        # use was ported: the import is left unused, and never runs off CUDA)
        "from packaging import version\n\n\ndef is_flash_attn_2_10():\n    try:\n        import flash_attn\n\n"
        "        return version.parse(flash_attn.__version__) >= version.parse('2.1.0')\n"
        "    except ImportError:\n        return False\n\n\nif is_flash_attn_2_10():\n"
        "    from flash_attn.flash_attn_interface import flash_attn_func\n",
        # TP604's: the extension is only used for CUDA tensors
        "import torch\nimport rotary_emb\n\ndef rotate(x, c, s):\n    if x.is_cuda:\n        return rotary_emb.apply(x, c, s)\n"
        "    return torch_rotate(x, c, s)\n",
        "import mylib.deepspeed as deepspeed\n",
        "from .mamba_ssm import Mamba\n",
        "from numba import njit, prange\n",  # numba's CPU target
        "try:\n    import cupy as xp\nexcept ImportError:\n    import numpy as xp\n",
        # Megatron-LM: imports only type checkers read, and imports behind a flag that a
        # `try` import sets, here or in the module the flag comes from (its `else` too)
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import transformer_engine as te\n",
        dedent("""\
            try:
                import transformer_engine
                HAVE_TE = True
            except (ImportError, ModuleNotFoundError):
                HAVE_TE = False

            if HAVE_TE:
                try:
                    from transformer_engine.pytorch import quantized_model_init as model_init
                except ImportError:
                    from transformer_engine.pytorch import fp8_model_init as model_init
            """),
        Example(
            dedent("""\
                from megatron.core.utils import HAVE_TE

                def fp8_model_init_class():
                    if not HAVE_TE:
                        return None
                    else:
                        from transformer_engine.pytorch import fp8_model_init
                        return fp8_model_init
                """),
            path="megatron/core/fp8_utils.py",
            project=(("megatron/core/utils.py", "try:\n    import transformer_engine  # noqa: F401\n\n"
                      "    HAVE_TE = True\nexcept ImportError:\n    HAVE_TE = False\n"),),
        ),
    ]
    invalid = [
        Example("import deepspeed\nengine, opt, _, _ = deepspeed.initialize(model=model, config=cfg)\n"),
        Example("from mamba_ssm import Mamba\nlayer = Mamba(d_model=256)\n"),
        Example("if args.fast:\n    from causal_conv1d import causal_conv1d_fn\n"),
        # Triton at a module's top is TP605's (made importable); inside a function it stays here
        Example("def benchmark(fn):\n    from triton.testing import do_bench\n    return do_bench(fn)\n", line=2),
        # a "guard" that re-raises is no guard (line 2)
        Example("try:\n    import deepspeed\nexcept ImportError as e:\n"
                "    raise ImportError('DeepSpeed is required: pip install deepspeed') from e\n"),
        # a compiled extension used outside a CUDA branch (line 1)
        Example("import fused_dense_lib\ny = fused_dense_lib.linear_bias_forward(x, w, b)\n"),
        # flash_attn & co. have rules for their uses; one imported for nothing (line 1)
        Example("import xformers  # registers the ops\nimport torch\n"),
        # beyond deep learning: RAPIDS, CuPy, numba's CUDA target (lines 1-3)
        Example("import cudf\nfrom cuml.cluster import KMeans\nfrom numba import cuda, njit\n"
                "import cupy as cp\n"),
        # TensorRT at module level blocks the import; inside an export function it is a note
        Example("import tensorrt as trt\n\nlogger = trt.Logger(trt.Logger.INFO)\n", line=1,
                message="is CUDA-only and does not install on a Mac"),
        Example(dedent("""\
            def export_engine(model, im, file, half, workspace=4):
                assert im.device.type != "cpu", "export running on CPU but must be on GPU"
                import tensorrt as trt

                builder = trt.Builder(trt.Logger(trt.Logger.INFO))
                return builder
            """), line=3, message="an NVIDIA deployment target"),
    ]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._functions.append(node.name.value)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return super().leave_FunctionDef(original, updated)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            if self._report(node, name):
                return

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        module = dotted_name(node.module) or ""
        names = [] if isinstance(node.names, cst.ImportStar) else [dotted_name(a.name) for a in node.names]
        for name in [module, *(f"{module}.{n}" for n in names if n)]:  # `from numba import cuda`
            if self._report(node, name):
                return

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._seen: set[cst.CSTNode] = set()
        self._functions: list[str] = []
        self._optional: set[cst.CSTNode] = set()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self._line = node
        found = lone_import(node)
        if found is not None and found[0] in COMPILED_MODULES:
            self.ctx.see_all_uses_of([found[1]])
        if optional_import(self.ctx.module, node) is not None or made_importable(self.ctx, node) \
                or wired_import(self, node) or (len(node.body) == 1 and version_import(node.body[0])):
            self._optional.add(node.body[0])  # TP604 / TP605 / TP608 make it optional, TP104 rewrites it

    def _report(self, node: cst.CSTNode, module: str) -> bool:
        if self.ctx.project is not None and self.ctx.project.provides(module):
            return False  # the repository's own package, which holds kernels (mamba_ssm in mamba itself)
        root = next((p for p in _PACKAGES if under(module, [p])), None)
        if root is None or self.guarded():
            return self._unused(node, module)
        if self._under_probe():
            return False  # `if is_flash_v2_installed():` holds only where the import succeeds
        if node in self._optional:
            return False
        if root in _DEPLOYMENT and self._functions:
            self.note(node, f"`{module}` (TensorRT) is imported only when `{self._functions[-1]}` runs: an NVIDIA "
                      "deployment target, which stays CUDA-only; the module and its other paths run without it "
                      "(for information)", suggestion=_PACKAGES[root])
            return True
        if root == "triton" and self.ctx.project is not None and self.ctx.path in self.ctx.project.caught_triton:
            self.note(node, f"`{module}` is CUDA-only, but every import of this module in the repository catches "
                      "its ImportError, so what runs without it is the importers' fallback (PT911 reports one the code "
                      "calls anyway) (for information)", suggestion=_PACKAGES[root])
            return True
        flag = self.flag_test()
        behind = f" (behind `if {self.ctx.code_for(flag.test).strip()}:`; keep it false off CUDA)" \
            if flag is not None else ""
        self.flag(node, f"`{module}` is CUDA-only and does not install on a Mac{behind}",
                  suggestion=_PACKAGES[root])
        return True

    def _under_probe(self) -> bool:
        """Inside an ``if`` whose test holds only where a CUDA-only import succeeded, as the
        guard pass reads it: ``if has_flash():`` (a function of this module or an import
        probe of the tree, porter.project.flags), ``if HAVE_TE and ...:`` where the flag is
        set by a ``try`` import here or in the module it comes from (Megatron-LM's), the
        ``else`` of ``if not HAVE_TE:``; and ``if TYPE_CHECKING:``, which never runs. The
        import never runs off CUDA."""
        stack, in_else = self._stacks()[1], self._in_else
        if not stack:
            return False
        finder = self._guard_pass()
        for node, else_part in zip(stack, in_else):
            try:  # the test alone (not through the guard pass's one-file parse cache)
                expr = ast.parse(self.ctx.code_for(node.test).strip(), mode="eval").body
            except (SyntaxError, ValueError, RecursionError):
                continue
            if not else_part and dotted_name_ast(expr) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                return True
            found = finder.polarity(expr) if finder is not None else None
            if found is not None and found[1] == "import" and found[0] is not else_part:
                return True
        return False

    def _guard_pass(self):
        if not hasattr(self, "_finder"):
            data = self.ctx.module.code.encode()
            tree = parse_ast(data)
            probes = self.ctx.project.import_probes if self.ctx.project is not None else frozenset()
            self._finder = None if tree is None else GuardFinder(tree, data.splitlines(), is_cuda_only_module, probes)
            if self._finder is not None:
                self._finder.find(expressions=False)
        return self._finder

    def _unused(self, node: cst.CSTNode, module: str) -> bool:
        """flash_attn, xformers, apex, ... have rules of their own for every use; an import
        of one that nothing uses (imported for its side effects) fails all the same."""
        if module.split(".")[0] not in IMPORT_ROOTS or self.guarded() or node in self._seen or node in self._optional:
            return False
        bound = bound_names(node)
        if not bound or uses(self.ctx.module, bound, node) > 0 or self._under_probe():
            return False
        self.ctx.see_all_uses_of(bound)
        self._seen.add(node)
        line = getattr(self, "_line", None)
        if line is not None and guardable_unused(self, line) is not None:
            return True  # TP609 guards it
        self.flag(node, f"`{module}` is imported but not used here; the import alone fails without "
                  "CUDA", suggestion="guard it with try/except ImportError, or drop it")
        return True
