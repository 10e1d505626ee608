"""Triton kernels (TP601): `@triton.jit` kernels and their launches."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.walk import nodes_of

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


def _returns_a_value(function: cst.FunctionDef) -> bool:
    """A ``return x`` in the function's own body: a Triton kernel launched from Python
    returns nothing, so this is a device function that kernels call."""
    return any(r.value is not None and not (isinstance(r.value, cst.Name) and r.value.value == "None")
               for r in nodes_of(function.body, cst.Return))


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

    A `@triton.jit` function that returns a value, or that another kernel of the file
    calls and nothing launches, is a device function: the kernels that call it carry the
    finding (fla's native-sparse-attention `_bitonic_merge`, blind round 16).

    Known limits:
    Launches through other names (a kernel stored in a dict, passed as an argument)
    are not traced; only launches in the same file are listed.
    """

    code = "TP601"
    name = "triton-kernel"
    safety = Safety.REVIEW
    #: A note in a module whose top level already imports a CUDA-only package (its finding comes first).
    restates_requirement = True
    needs = Needs(
        whole_file=True,  # launch sites anywhere in the module, by line
        targets=_TRITON_DECORATORS,
    )

    valid = [
        "def jit(fn):\n    return fn\n\n@jit\ndef add_kernel(x):\n    return x\n",
        "import mylib as triton\n\n@triton.jit\ndef add_kernel(x_ptr, n):\n    pass\n",
        "def make(triton):\n    @triton.jit\n    def k(x):\n        pass\n    return k\n",
        # fla-org/native-sparse-attention's ops/utils.py: device functions, called by kernels
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef _compare_and_swap(x, ids, flip, i: tl.constexpr):\n"
        "    return x, ids\n\n\n@triton.jit\ndef argsort(x, ids, dim: tl.constexpr):\n"
        "    x, ids = _compare_and_swap(x, ids, 0, dim)\n    return x, ids\n",
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
        self._kernel_calls: Optional[dict[str, set[str]]] = None  # kernel -> the names it calls

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if not any(_decorator_name(self, d) in _TRITON_DECORATORS for d in node.decorators):
            return
        kernel = node.name.value
        launches = self._launch_sites().get(kernel, [])
        if not launches and (_returns_a_value(node) or self._called_in_a_kernel(kernel)):
            return  # a device function (`x, ids = _bitonic_merge(...)` inside a kernel): the kernel's finding covers it
        where = ", ".join(f"line {self._line(call)}" for call, _ in launches) or "not in this file"
        self.flag(node, f"Triton kernel `{kernel}` (launched: {where}) needs a CUDA GPU; Triton "
                  "does not install on a Mac", suggestion=self._suggestion(kernel, launches))

    def _called_in_a_kernel(self, name: str) -> bool:
        """Whether another ``@triton.jit`` function of this file calls ``name`` (a plain call)."""
        if self._kernel_calls is None:
            self._kernel_calls = {}
            for function in nodes_of(self.ctx.module, cst.FunctionDef):
                if any(_decorator_name(self, d) in _TRITON_DECORATORS for d in function.decorators):
                    self._kernel_calls[function.name.value] = {
                        c.func.value for c in nodes_of(function.body, cst.Call) if isinstance(c.func, cst.Name)}
        return any(name in called for kernel, called in self._kernel_calls.items() if kernel != name)

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
