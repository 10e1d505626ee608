"""Custom kernels and CUDA-only packages: Triton kernels, `.cu` extensions, deepspeed & co."""

from __future__ import annotations

import re
from typing import Optional, Union

import libcst as cst

from porter.rulebase.cuda_packages import COMPILED, IMPORT_ROOTS, advice_for
from porter.rulebase.matching import dotted_name
from porter.rulebase.needs import literal_patterns
from porter.rulebase.rule import (
    BYTES_GAP,
    Example,
    Needs,
    Rule,
    Safety,
    keyword,
    positional,
    string_value,
)
from porter.rulebase.syntax import bound_names
from porter.rulebase.families.thirdparty import GuardTracker, example_code, under, uses

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
    name = "triton-kernel"
    safety = Safety.REVIEW
    needs = Needs(
        whole_file=True,  # launch sites anywhere in the module, by line
        targets=_TRITON_DECORATORS,
    )

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


class _Strings(cst.CSTVisitor):
    """Every string literal and f-string text part in a subtree."""

    def __init__(self) -> None:
        self.found: list[str] = []

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        value = string_value(node)
        if value is not None:
            self.found.append(value)

    def visit_FormattedStringText(self, node: cst.FormattedStringText) -> None:
        self.found.append(node.value)


def _sources(call: cst.Call) -> list[str]:
    """The CUDA source names anywhere in a call's arguments: literals in lists,
    ``os.path.join(here, "kernel.cu")``, f-strings (``f"{root}/k.cu"``)."""
    strings = _Strings()
    for arg in call.args:
        arg.value.visit(strings)
    return [s for s in strings.found if s.endswith((".cu", ".cuh"))]


def _cuda_test(test: cst.BaseExpression) -> Optional[bool]:
    """True for a test that holds only for CUDA tensors (``x.is_cuda``,
    ``x.device.type == "cuda"``, or an ``and`` with one), False for its negation."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _cuda_test(test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.Attribute):
        return True if test.attr.value == "is_cuda" else None
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(test.left, cst.Attribute) and test.left.attr.value == "type" \
                and string_value(target.comparator) == "cuda":
            return {cst.Equal: True, cst.NotEqual: False}.get(type(target.operator))
        return None
    if isinstance(test, cst.BooleanOperation):
        sides = (_cuda_test(test.left), _cuda_test(test.right))
        want = isinstance(test.operator, cst.And)  # `a.is_cuda and ...` / `not a.is_cuda or ...`
        return want if want in sides else None
    return None


def _returns(block: cst.BaseSuite) -> bool:
    """Whether a block always ends by leaving (``return`` / ``raise``)."""
    last = block.body[-1] if isinstance(block, cst.IndentedBlock) and block.body else None
    if isinstance(block, cst.SimpleStatementSuite):
        last = block
    small = last.body[-1] if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else None
    return isinstance(small, (cst.Return, cst.Raise))


class _Gates(cst.CSTVisitor):
    """Counts the uses of ``names`` that run only for CUDA tensors (inside
    ``if x.is_cuda:``, after ``if not x.is_cuda: return ...``) and the others."""

    def __init__(self, names: set[str]) -> None:
        self.names, self.depth, self.gated, self.open = names, 0, 0, 0

    def _in(self, node: Optional[cst.CSTNode], gated: bool) -> None:
        if node is not None:
            self.depth += gated
            node.visit(self)
            self.depth -= gated

    def visit_If(self, node: Union[cst.If, cst.IfExp]) -> bool:
        polarity = _cuda_test(node.test)
        if polarity is None:
            return True
        node.test.visit(self)
        self._in(node.body, polarity)
        self._in(node.orelse, not polarity)
        return False

    visit_IfExp = visit_If  # the same gating for `a if x.is_cuda else b`

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        gated = False
        for stmt in node.body:
            self._in(stmt, gated)
            gated = gated or (isinstance(stmt, cst.If) and stmt.orelse is None
                              and _cuda_test(stmt.test) is False and _returns(stmt.body))
        return False

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.names:
            if self.depth:
                self.gated += 1
            else:
                self.open += 1


def only_cuda_uses(module: cst.Module, name: str) -> bool:
    """``name`` is used, and only where the code already runs for CUDA tensors alone."""
    gates = _Gates({name})
    module.visit(gates)
    return gates.gated > 0 and gates.open == 0


_BUILDERS = frozenset({"torch.utils.cpp_extension.load", "torch.utils.cpp_extension.load_inline"})


def _cuda_build(rule: Rule, call: cst.Call) -> bool:
    """`load(...)` with a `.cu`/`.cuh` source or `load_inline(..., cuda_sources=...)`."""
    name = rule.qualname(call.func)
    if name == "torch.utils.cpp_extension.load":
        return bool(_sources(call))
    return name == "torch.utils.cpp_extension.load_inline" and keyword(call, "cuda_sources") is not None


def optional_builds(rule: Rule) -> set[cst.Call]:
    """Module-level ``ext = load(...)`` CUDA builds whose ``ext`` only CUDA branches use."""
    found = set()
    for stmt in rule.ctx.module.body:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if not isinstance(small, cst.Assign) or len(small.targets) != 1 or not isinstance(small.value, cst.Call):
            continue
        target = small.targets[0].target
        if isinstance(target, cst.Name) and _cuda_build(rule, small.value) \
                and only_cuda_uses(rule.ctx.module, target.value):
            found.add(small.value)
    return found


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
def _imports_of(roots) -> tuple["re.Pattern[bytes]", ...]:
    """Byte patterns for an import statement naming one of ``roots`` as its top-level
    module (``from numba import cuda``, ``import os, cupy as cp``, ``import rotary_emb``):
    two patterns, each starting with its keyword, so both are searched at C speed."""
    names = rb"(?:" + b"|".join(re.escape(root).encode() for root in sorted(roots)) + rb")\b"
    return (
        re.compile(rb"from(?<=\bfrom)" + BYTES_GAP + names),
        re.compile(rb"import(?<=\bimport)" + BYTES_GAP
                   + rb"(?:[A-Za-z_][\w.]*(?:" + BYTES_GAP + rb"as" + BYTES_GAP + rb"\w+)?" + BYTES_GAP + rb","
                   + BYTES_GAP + rb")*" + names),
    )


#: An import naming one of TP603's packages: the words alone (`cuda`, `nvidia`) are in most files.
_IMPORTS_A_PACKAGE = _imports_of({name.split(".")[0] for name in (*_PACKAGES, *IMPORT_ROOTS)})
#: Compiled CUDA extension modules, imported by their module name (`import rotary_emb`).
_COMPILED = frozenset(COMPILED)
#: A use of one needs its import (`rotary_emb` alone is an attribute in most models);
#: a builder, its module's name.
_IMPORTS_AN_EXTENSION = (*_imports_of(_COMPILED), *literal_patterns(["cpp_extension"]))


def _lone_import(stmt: cst.CSTNode) -> Optional[tuple[str, str]]:
    """(module, bound name) of a statement ``import m`` / ``import m as n`` of one module."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if not isinstance(small, cst.Import) or len(small.names) != 1:
        return None
    alias = small.names[0]
    module = dotted_name(alias.name) or ""
    bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else module
    return (module, bound) if "." not in module else None


def optional_import(module: cst.Module, stmt: cst.CSTNode) -> Optional[str]:
    """The bound name when ``stmt`` is a module-level import of a compiled CUDA extension
    that only CUDA branches use, in a module that imports torch (for the CUDA test)."""
    found = _lone_import(stmt)
    if found is None or found[0] not in _COMPILED or stmt not in module.body:
        return None
    if torch_alias(module) is None:
        return None
    return found[1] if only_cuda_uses(module, found[1]) else None


def torch_alias(module: cst.Module) -> Optional[str]:
    """The name a module-level ``import torch`` / ``import torch as t`` binds, or None."""
    for stmt in module.body:
        found = _lone_import(stmt)
        if found is not None and found[0] == "torch":
            return found[1]
    return None


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
    CUDA-only module, is no guard.

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
    # Only import statements are reported, so only the functions and classes that hold
    # one are parsed; the module-wide looks (is the import used, are all the uses of
    # an extension in CUDA branches: then it is TP604's) ask for the whole file when a
    # left-out definition names what the import binds (`ctx.see_all_uses_of`).
    needs = Needs(
        targets=frozenset({*_PACKAGES, *IMPORT_ROOTS}),
        byte_patterns=_IMPORTS_A_PACKAGE,
        unit_filter=lambda unit, file: _imports_any(unit.facts.imported, {*_PACKAGES, *IMPORT_ROOTS}),
    )
    chain_roots = frozenset({*_PACKAGES, *IMPORT_ROOTS})

    valid = [
        "try:\n    import deepspeed\nexcept ImportError:\n    deepspeed = None\n",
        # TP604's: the extension is only used for CUDA tensors
        "import torch\nimport rotary_emb\n\ndef rotate(x, c, s):\n    if x.is_cuda:\n        return rotary_emb.apply(x, c, s)\n"
        "    return torch_rotate(x, c, s)\n",
        "import mylib.deepspeed as deepspeed\n",
        "from .mamba_ssm import Mamba\n",
        "from numba import njit, prange\n",  # numba's CPU target
        "try:\n    import cupy as xp\nexcept ImportError:\n    import numpy as xp\n",
    ]
    invalid = [
        Example("import deepspeed\nengine, opt, _, _ = deepspeed.initialize(model=model, config=cfg)\n"),
        Example("from mamba_ssm import Mamba\nlayer = Mamba(d_model=256)\n"),
        Example("if args.fast:\n    from causal_conv1d import causal_conv1d_fn\n"),
        Example("import triton.language as tl\n"),
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
    ]

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

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        found = _lone_import(node)
        if found is not None and found[0] in _COMPILED:
            self.ctx.see_all_uses_of([found[1]])
        if optional_import(self.ctx.module, node) is not None:
            self._optional = node.body[0]  # TP604 makes it optional

    def _report(self, node: cst.CSTNode, module: str) -> bool:
        root = next((p for p in _PACKAGES if under(module, [p])), None)
        if root is None or self.guarded():
            return self._unused(node, module)
        if node is getattr(self, "_optional", None):
            return False
        flag = self.flag_test()
        behind = f" (behind `if {self.ctx.code_for(flag.test).strip()}:`; keep it false off CUDA)" \
            if flag is not None else ""
        self.flag(node, f"`{module}` is CUDA-only and does not install on a Mac{behind}",
                  suggestion=_PACKAGES[root])
        return True

    def _unused(self, node: cst.CSTNode, module: str) -> bool:
        """flash_attn, xformers, apex, ... have rules of their own for every use; an import
        of one that nothing uses (imported for its side effects) fails all the same."""
        if module.split(".")[0] not in IMPORT_ROOTS or self.guarded() or node in self._seen:
            return False
        bound = bound_names(node)
        if not bound or uses(self.ctx.module, bound, node) > 0:
            return False
        self.ctx.see_all_uses_of(bound)
        self._seen.add(node)
        self.flag(node, f"`{module}` is imported but not used here; the import alone fails without "
                  "CUDA", suggestion="guard it with try/except ImportError, or drop it")
        return True


def _imports_any(imported: set[str], packages: set[str]) -> bool:
    """Whether one of the ``imported`` names (porter.engine.prefilter's facts) is, or lies
    under, one of ``packages``."""
    return any(under(name, packages) for name in imported)


#: On CUDA the failed import still raises where it did (the CUDA branches need the
#: extension); only without CUDA does the name become None.
_GUARDED_IMPORT = """\
try:
    {stmt}
except ImportError:  # CUDA-only extension: off CUDA the PyTorch path runs without it
    if {torch}.cuda.is_available():
        raise
    {name} = None
"""


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
        targets=frozenset({*_COMPILED, *_BUILDERS}),
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
        stmt = updated.with_changes(leading_lines=())
        code = _GUARDED_IMPORT.format(stmt=self.ctx.module.code_for_node(stmt).strip(), name=name,
                                      torch=torch_alias(self.ctx.module))
        new = cst.parse_statement(code).with_changes(leading_lines=updated.leading_lines)
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


_NVML_INIT = frozenset({"pynvml.nvmlInit", "pynvml.smi.nvidia_smi.getInstance", "nvidia_smi.nvmlInit"})


class NvmlInit(GuardTracker, Rule):
    """`pynvml.nvmlInit()` outside a `try` is reported: it fails where there is no NVIDIA driver.

    What:
    Reports calls of `pynvml.nvmlInit()` (however imported; also the `nvidia_smi`
    module of nvidia-ml-py3) that no `try` around them catches.

    Why:
    pynvml / nvidia-ml-py are pure Python and install anywhere, so the requirement
    is fine on a Mac; the call then raises `NVMLError_LibraryNotFound` because there
    is no NVIDIA driver. GPU monitoring code (memory, utilisation, temperature logs)
    stops the program with it.

    Fix safety:
    Review only: the monitoring must be skipped off CUDA, or read from
    `porter_runtime.memory_allocated()` / `mem_get_info()`.

    Known limits:
    The other NVML calls are not reported: they only run after `nvmlInit()`.
    """

    code = "TP606"
    name = "nvml-init"
    safety = Safety.REVIEW
    needs = Needs(calls_only=True, targets=_NVML_INIT)

    valid = [
        "import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError:\n    pynvml = None\n",
        "def f(pynvml):\n    pynvml.nvmlInit()\n",
        "from mylib import nvmlInit\nnvmlInit()\n",
    ]
    invalid = [
        Example(example_code("""
            import pynvml

            def gpu_memory_gb(index=0):
                pynvml.nvmlInit()
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                return pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**30
            """)),
        Example("from pynvml import nvmlInit as init\ninit()\n"),
    ]

    def visit_Try(self, node: cst.Try) -> None:
        self._stacks()[0].append(bool(node.handlers))  # any handler: NVMLError is no ImportError

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func) is None or self.guarded():
            return updated
        self.flag(original, "NVML needs the NVIDIA driver: nvmlInit() raises NVMLError_LibraryNotFound "
                  "off CUDA (the pynvml package itself installs everywhere)",
                  suggestion="wrap the GPU monitoring in `if porter_runtime.device_type() == \"cuda\":` "
                  "(or try/except pynvml.NVMLError), or use porter_runtime.memory_allocated()")
        return updated
