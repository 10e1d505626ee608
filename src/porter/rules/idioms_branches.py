"""Branches on a tensor's device type that pick a non-CUDA fallback:
`if x.device.type == "cpu": <pure PyTorch path> else: <CUDA kernel>`."""

from __future__ import annotations

import re
from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.evidence import ComparesDeviceType
from porter.rulebase.families.availability.sides import cuda_residue
from porter.rulebase.rule import BYTES_GAP, Example, Needs, Rule, Safety, string_value


def _is_device_type(node: cst.BaseExpression) -> bool:
    """``x.device.type`` or ``device.type``."""
    if not isinstance(node, cst.Attribute) or node.attr.value != "type":
        return False
    inner = node.value
    return (isinstance(inner, cst.Attribute) and inner.attr.value == "device") or (
        isinstance(inner, cst.Name) and inner.value == "device")


def _cpu_test(node: cst.BaseExpression) -> Optional[int]:
    """Index of the comparison of ``x.device.type == / != "cpu"`` (either order), else None."""
    if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
        return None
    target = node.comparisons[0]
    if not isinstance(target.operator, (cst.Equal, cst.NotEqual)):
        return None
    left, right = node.left, target.comparator
    if _is_device_type(left) and string_value(right) == "cpu":
        return 0
    if _is_device_type(right) and string_value(left) == "cpu":
        return 0
    return None


#: Methods that only bring a value to the CPU or to Python: right on every device.
_TO_HOST = frozenset({"cpu", "detach", "numpy", "tolist", "item", "clone", "contiguous", "float", "to"})


class _ToHostOnly(cst.CSTVisitor):
    """Whether code only moves data to the CPU (``t = t.cpu()``, ``x.detach().cpu().numpy()``)."""

    def __init__(self) -> None:
        self.ok = True

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in _TO_HOST:
            self.ok = False
        elif func.attr.value == "to" and [string_value(a.value) for a in node.args] != ["cpu"]:
            self.ok = False

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.BaseCompoundStatement, cst.Raise)):
            self.ok = False  # control flow: more than moving data
        return super().on_visit(node)


def _to_host_only(node: Optional[cst.CSTNode]) -> bool:
    if node is None:
        return False
    finder = _ToHostOnly()
    node.visit(finder)
    return finder.ok


def _non_cpu_side(node: cst.CSTNode, test: cst.Comparison) -> Optional[cst.CSTNode]:
    """What ``node`` (the if / ternary testing ``test``) runs for a tensor not on the CPU."""
    if node is None or getattr(node, "test", None) is not test:
        return None
    not_cpu = isinstance(test.comparisons[0].operator, cst.NotEqual)
    if isinstance(node, cst.IfExp):
        return node.body if not_cpu else node.orelse
    if not isinstance(node, cst.If):
        return None
    if not_cpu:
        return node.body
    return node.orelse.body if isinstance(node.orelse, cst.Else) else None


#: Words in a name that say a compiled kernel: `fused_bias_act`, `upfirdn2d_op`, `triton_rms_norm`,
#: `_C.forward`, `flash_attn_func` (CUDA itself is porter.rulebase.families.availability.sides's residue).
_KERNEL_WORD = re.compile(r"triton|kernel|fused|flash|xformers|apex|cutlass|tilelang|(?:^|_)(?:c|ext|op|ops|plugin)$",
                          re.IGNORECASE)


class _NamesKernel(cst.CSTVisitor):
    """Whether code names a compiled kernel."""

    def __init__(self) -> None:
        self.found = False

    def visit_Name(self, node: cst.Name) -> None:
        self.found = self.found or bool(_KERNEL_WORD.search(node.value))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.found = self.found or bool(_KERNEL_WORD.search(node.attr.value))


def _skips_portable_work(rule: Rule, node: Optional[cst.CSTNode], test: cst.Comparison) -> bool:
    """Whether ``node`` is an ``if`` with no ``else`` that only skips work on the CPU
    (``if device.type != "cpu": <warm-up>``, also inside ``and`` / ``or``), and that work
    names neither CUDA (what PT202 calls residue: a name or string saying cuda or nccl, a
    CUDA-only package, an import) nor a kernel. On a Mac it runs that work, which is right
    there: the branch chooses no CUDA path."""
    if not isinstance(node, cst.If) or node.orelse is not None \
            or not isinstance(test.comparisons[0].operator, cst.NotEqual):
        return False
    if cuda_residue(rule, node.body, node.body) is not None:
        return False
    finder = _NamesKernel()
    node.body.visit(finder)
    return not finder.found


_QUOTE = rb"(?:'''|\"\"\"|'|\")"
#: What `_compares_with_cpu` looks for, in bytes: `<x>.device.type ==` / `!=` a "cpu"
#: literal, in either order (a mention in a docstring or a comment is not enough).
_CPU_COMPARE = (
    re.compile(rb"type(?<=\btype)(?:" + BYTES_GAP + rb"\))*" + BYTES_GAP + rb"[!=]=" + BYTES_GAP
               + rb"(?:\(" + BYTES_GAP + rb")*[rRuU]?" + _QUOTE + rb"cpu" + _QUOTE),
    re.compile(rb"cpu(?<=['\"]cpu)" + _QUOTE + rb"(?:" + BYTES_GAP + rb"\))*" + BYTES_GAP + rb"[!=]="),
)


#: `<x>.device.type == / != "cpu"`
_COMPARES_WITH_CPU = ComparesDeviceType("cpu")


class DeviceTypeBranch(Rule):
    """`if x.device.type == "cpu":` fallbacks test `!= "cuda"` (unsafe fix).

    What:
    Reports `x.device.type == "cpu"` and `!= "cpu"` in the test of an `if`, `elif`
    or conditional expression, and with `--unsafe-fixes` rewrites them to
    `x.device.type != "cuda"` and `== "cuda"`.

    Why:
    Such a branch usually picks a pure-PyTorch path for the CPU and a CUDA kernel
    (Triton, a CUDA extension) otherwise. On a Mac the tensor is on "mps", so the
    CUDA path runs and fails.

    Fix safety:
    Unsafe. On CUDA and CPU tensors both tests agree, but a tensor on another
    device (`meta`, `xpu`) now takes the fallback on a CUDA machine too, and code
    that truly meant "the CPU" (a CPU-only library) changes branch on MPS.

    A branch that only brings the tensor to the CPU (`if t.device.type != "cpu":
    t = t.cpu()`) is right on every device and is left alone, and so is one that
    only skips work on the CPU (`if device.type != "cpu":` with no `else`, such as a
    warm-up forward pass) when that work names neither CUDA nor a kernel.

    Known limits:
    Only `.device.type` and a variable named `device` are understood;
    `str(x.device) == "cpu"` and `x.is_cpu` are left alone.
    """

    code = "PT906"
    name = "device-type-branch"
    safety = Safety.UNSAFE
    needs = Needs(
        words=frozenset({"device", "type", "cpu"}),  # compared with "cpu"
        strings=re.compile(r"^cpu$"),
        byte_patterns=_CPU_COMPARE,
        evidence=_COMPARES_WITH_CPU,
    )

    valid = [
        "if x.device.type == 'cuda':\n    y = kernel(x)\n",
        "ok = x.device.type == 'cpu'\n",
        "if x.dtype.type == 'cpu':\n    pass\n",
        "import mylib as torch\nif torch.kind == 'cpu':\n    pass\n",
        "def f(torch, x):\n    return 1 if x.device.type == 'cuda' else 2\n",
        # only brings the tensor to the CPU: right on MPS too
        dedent("""\
            def to_numpy(t):
                if t.device.type != "cpu":
                    t = t.cpu()
                return t.detach().numpy()
            """),
        dedent("""\
            import torch

            arr = x.numpy() if x.device.type == 'cpu' else x.detach().to('cpu').numpy()
            """),
        # only skips a warm-up on the CPU: a Mac runs the warm-up, which is right there
        dedent("""\
            import torch

            def detect(model, device, imgsz, half):
                if device.type != 'cpu':
                    model(torch.zeros(1, 3, imgsz, imgsz).to(device).type_as(next(model.parameters())))  # run once
                for img in loader:
                    if device.type != 'cpu' and (old_shape != img.shape):
                        for i in range(3):
                            model(img)[0]
            """),
    ]
    invalid = [
        Example(
            "import torch\n\ndef rms_norm(x, w):\n    if x.device.type == \"cpu\":\n        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * w\n"
            "    return triton_rms_norm(x, w)\n",
            "import torch\n\ndef rms_norm(x, w):\n    if x.device.type != \"cuda\":\n        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)) * w\n"
            "    return triton_rms_norm(x, w)\n",
        ),
        Example(
            "import torch as t\nout = fused(x) if x.device.type != 'cpu' else t.nn.functional.gelu(x)\n",
            "import torch as t\nout = fused(x) if x.device.type == 'cuda' else t.nn.functional.gelu(x)\n",
        ),
        # skips work on the CPU, but the work it runs elsewhere is a kernel
        Example(
            dedent("""\
                import torch
                from . import upfirdn2d_op

                def upfirdn2d(x, k, up=1, down=1):
                    out = upfirdn2d_native(x, k, up, down)
                    if x.device.type != "cpu":
                        out = upfirdn2d_op.upfirdn2d(x, k, up, up, down, down, 0, 0, 0, 0)
                    return out
                """),
            dedent("""\
                import torch
                from . import upfirdn2d_op

                def upfirdn2d(x, k, up=1, down=1):
                    out = upfirdn2d_native(x, k, up, down)
                    if x.device.type == "cuda":
                        out = upfirdn2d_op.upfirdn2d(x, k, up, up, down, down, 0, 0, 0, 0)
                    return out
                """),
        ),
        Example(
            "from torch import nn\nif mode:\n    pass\nelif device.type == 'cpu':\n    act = nn.GELU()\n",
            "from torch import nn\nif mode:\n    pass\nelif device.type != 'cuda':\n    act = nn.GELU()\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._tests: set[cst.Comparison] = set()

    def visit_If(self, node: cst.If) -> None:
        self._collect(node.test, node)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._collect(node.test, node)

    def _collect(self, test: cst.BaseExpression, node: Optional[cst.CSTNode] = None, whole: bool = True) -> None:
        """``whole``: ``test`` is all of ``node``'s test (not a part of an ``and`` / ``or``)."""
        if isinstance(test, cst.BooleanOperation):
            self._collect(test.left, node, whole=False)
            self._collect(test.right, node, whole=False)
        elif isinstance(test, cst.Comparison) and _cpu_test(test) is not None:
            if whole and _to_host_only(_non_cpu_side(node, test)):  # `!= "cpu": t = t.cpu()` is right everywhere
                return
            if _skips_portable_work(self, node, test):  # `!= "cpu": <warm-up>` is right on a Mac too
                return
            self._tests.add(test)

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
        if original not in self._tests:
            return updated
        target = updated.comparisons[0]
        equal = isinstance(target.operator, cst.Equal)
        operator = (cst.NotEqual if equal else cst.Equal)(
            whitespace_before=target.operator.whitespace_before, whitespace_after=target.operator.whitespace_after)
        literal = updated.left if string_value(updated.left) == "cpu" else target.comparator
        quote = literal.value[-1] if isinstance(literal, cst.SimpleString) else '"'
        cuda = cst.SimpleString(f"{quote}cuda{quote}")
        if literal is updated.left:
            new = updated.with_changes(left=cuda, comparisons=[target.with_changes(operator=operator)])
        else:
            new = updated.with_changes(comparisons=[target.with_changes(operator=operator, comparator=cuda)])
        return self.rewrite(original, new, "on a Mac the tensor is on \"mps\", so this branch takes the CUDA path; "
                            "testing for CUDA keeps the fallback for MPS", suggestion=self.ctx.code_for(new))
