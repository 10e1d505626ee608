"""Dtypes MPS can't hold (float64, complex128; bfloat16 before macOS 14) reaching the device:
a dtype passed with a move (PT604) and `.double()` on the device (PT606); NumPy arrays are PT605."""

from __future__ import annotations

import re
from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.evidence import Calls, CallsMethod, Name, String
from porter.rulebase.rule import (
    CUDA_SPEC,
    Example,
    Needs,
    Rule,
    Safety,
    keyword,
    positional,
)
from porter.rulebase.families.devices.moved_names import Assignments, moved_names, parameters
from porter.rulebase.syntax import DeviceMoves, is_device_expr, is_device_move

#: Dtypes that ``porter_runtime.supported_dtype`` may replace on MPS.
HAZARD_DTYPES = frozenset({
    "torch.float64", "torch.double", "torch.complex128", "torch.cdouble", "torch.bfloat16",
})


def _dtype_arg(rule: Rule, call: cst.Call, method: bool) -> Optional[cst.Arg]:
    """The hazardous dtype argument of a torch call or of ``.to(...)``."""
    named = keyword(call, "dtype")
    if named is not None:
        return named if rule.qualname(named.value) in HAZARD_DTYPES else None
    if not method:
        return None
    # ``.to(torch.float64)`` or ``.to(device, torch.float64)``
    for arg in positional(call)[:2]:
        if rule.qualname(arg.value) in HAZARD_DTYPES:
            return arg
    return None


#: a move PT604 can see: a CUDA literal (an f-string's too), `porter_runtime.device(...)`,
#: `.cuda()` or an index of the current CUDA device (`device=torch.cuda.current_device()`)
_SEES_A_MOVE = String(CUDA_SPEC, word="cuda") | Name("porter_runtime") | CallsMethod("cuda") | \
    Calls("current_device")


class DeviceDtype(DeviceMoves, Rule):
    """A float64 / complex128 / bfloat16 dtype sent to the device goes through `porter_runtime.supported_dtype`.

    What:
    Rewrites a hard-coded `torch.float64`, `torch.double`, `torch.complex128`,
    `torch.cdouble` or `torch.bfloat16` where the tensor visibly goes to the CUDA or
    runtime device: `dtype=` in a torch call that also has such a `device=`
    (`torch.zeros(3, dtype=torch.float64, device="cuda")`, `nn.Linear(..., dtype=...,
    device=...)`), a torch call chained with `.cuda()` / `.to("cuda")`, and the dtype
    of `.to(...)` that moves to the device in the same call or next to a move
    (`x.cuda().to(torch.float64)`, `x.to(dtype=torch.bfloat16).cuda()`).

    Why:
    MPS has no float64: `TypeError: Cannot convert a MPS Tensor to float64 dtype as
    the MPS framework doesn't support float64. Please use float32 instead.`
    complex128 fails in ops, and bfloat16 needs macOS 14 with torch before 2.9.

    Fix safety:
    Safe. `porter_runtime.supported_dtype(dtype)` returns `dtype` unchanged on CUDA
    and CPU; only on MPS does it substitute float32 / complex64, with one warning
    naming the dtype and the reason.

    Known limits:
    Only moves to a literal CUDA device, `torch.device("cuda"...)` or
    `porter_runtime.device(...)` count: `x.to(device, torch.float64)` with a device
    variable is left alone, as the variable may be the CPU. `.double()` and float64
    from NumPy are PT606 and PT605.
    """

    code = "PT604"
    name = "device-dtype"
    safety = Safety.SAFE
    needs = Needs(targets=HAZARD_DTYPES, evidence=_SEES_A_MOVE)

    valid = [
        "import torch\nx = torch.zeros(3, dtype=torch.float64)\n",
        "import torch\nx = torch.zeros(3, dtype=torch.float64, device='cpu')\n",
        "import torch\ny = x.to(device, torch.float64)\n",
        "def f(torch, x):\n    return x.cuda().to(torch.float64)\n",
        "import numpy as torch\nx = torch.zeros(3, dtype=torch.float64).cuda()\n",
    ]
    invalid = [
        Example(  # Megatron-LM's module.py: the device an index of the current CUDA device, or an f-string
            # (PT901 and PT005 port those devices in the same pass)
            dedent("""\
                import torch


                def init_weight(self, rank):
                    self.weight = torch.empty(4, dtype=torch.bfloat16, device=torch.cuda.current_device())
                    self.bias = torch.zeros(4, device=f"cuda:{rank}", dtype=torch.bfloat16)
                """),
            dedent("""\
                import porter_runtime
                import torch


                def init_weight(self, rank):
                    self.weight = torch.empty(4, dtype=porter_runtime.supported_dtype(torch.bfloat16), device=torch.cuda.current_device())
                    self.bias = torch.zeros(4, device=f"cuda:{rank}", dtype=porter_runtime.supported_dtype(torch.bfloat16))
                """),
        ),
        Example(  # Megatron-LM's unit tests: a name holding the current CUDA device's index
            "import torch\n\n\ndef test_jit_compiled_helpers():\n    device = torch.cuda.current_device()\n"
            "    q = torch.randn(2, 8, device=device, dtype=torch.bfloat16)\n",
            "import porter_runtime\nimport torch\n\n\ndef test_jit_compiled_helpers():\n"
            "    device = torch.cuda.current_device()\n"
            "    q = torch.randn(2, 8, device=device, dtype=porter_runtime.supported_dtype(torch.bfloat16))\n",
        ),
        Example(
            "import torch\nx = torch.zeros(3, dtype=torch.float64, device='cuda')\n",
            "import porter_runtime\nimport torch\n"
            "x = torch.zeros(3, dtype=porter_runtime.supported_dtype(torch.float64), device='cuda')\n",
        ),
        Example(
            "import porter_runtime\nimport torch as t\nlayer = t.nn.Linear(4, 4, dtype=t.bfloat16, device=porter_runtime.device())\n",
            "import porter_runtime\nimport torch as t\n"
            "layer = t.nn.Linear(4, 4, dtype=porter_runtime.supported_dtype(t.bfloat16), device=porter_runtime.device())\n",
        ),
        Example(
            "from torch import float64\ny = x.cuda().to(float64)\nz = x.to(dtype=float64).cuda()\n",
            "import porter_runtime\nfrom torch import float64\n"
            "y = x.cuda().to(porter_runtime.supported_dtype(float64))\n"
            "z = x.to(dtype=porter_runtime.supported_dtype(float64)).cuda()\n",
        ),
        Example(
            "import torch\ny = x.to('cuda:0', torch.double, non_blocking=True)\n"
            "w = torch.tensor(data, dtype=torch.float64).to(torch.device('cuda'))\n",
            "import porter_runtime\nimport torch\n"
            "y = x.to('cuda:0', porter_runtime.supported_dtype(torch.double), non_blocking=True)\n"
            "w = torch.tensor(data, dtype=porter_runtime.supported_dtype(torch.float64)).to(torch.device('cuda'))\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        arg = self._hazard(original)
        if arg is None:
            return updated
        index = list(original.args).index(arg)
        value = self.runtime_call("supported_dtype", updated.args[index].value)
        args = list(updated.args)
        args[index] = args[index].with_changes(value=value)
        return self.rewrite(original, updated.with_changes(args=args),
                            "a float64/complex128/bfloat16 dtype on the device now uses a dtype it supports")

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._index_names: set[str] = set()  # names assigned torch.cuda.current_device()

    def visit_Assign(self, node: cst.Assign) -> None:
        """``device = torch.cuda.current_device()``: the name holds a CUDA index, which PT901
        ports where it is passed as ``device=`` (Megatron-LM's unit tests)."""
        if isinstance(node.value, cst.Call) and self.matches(node.value.func, "torch.cuda.current_device"):
            self._index_names.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))

    def _holds_index(self, node: cst.BaseExpression) -> bool:
        return isinstance(node, cst.Name) and node.value in self._index_names

    def _hazard(self, call: cst.Call) -> Optional[cst.Arg]:
        func = call.func
        name = self.qualname(func)
        if name is not None and name.startswith("torch."):
            arg = _dtype_arg(self, call, method=False)
            device = keyword(call, "device")
            on_device = self.beside_device_move(call) or (device is not None and (
                is_device_expr(self, device.value) or self._holds_index(device.value)))
            return arg if on_device else None
        if not isinstance(func, cst.Attribute) or func.attr.value != "to" or name is not None:
            return None
        if self.qualname(func.value) is not None:
            return None
        on_device = self.beside_device_move(call) or is_device_move(self, call)
        return _dtype_arg(self, call, method=True) if on_device else None




class DoubleOnDevice(DeviceMoves, Rule):
    """`.double()` next to a move to the device becomes `porter_runtime.double(...)`.

    What:
    Rewrites `x.double()` (a tensor or a module) when it is chained with a move to
    the CUDA or runtime device: `model.double().cuda()` becomes
    `porter_runtime.double(model).cuda()`, and `x.cuda().double()` becomes
    `porter_runtime.double(x.cuda())`. Also when the tensor becomes a module's
    state, which moves with the module: `self.register_buffer("betas",
    torch.linspace(b1, b2, T).double())` and `nn.Parameter(w.double())` (a diffusion
    schedule kept in float64, then `model.to(device)`).

    Why:
    MPS has no float64: `TypeError: Cannot convert a MPS Tensor to float64 dtype as
    the MPS framework doesn't support float64. Please use float32 instead.`

    Fix safety:
    Safe. On CUDA (and CPU) `porter_runtime.double(x)` is `x.double()`, whatever `x`
    is. On MPS it is `x.float()`, which converts the same tensors, with one warning
    naming float64 and the reason.

    Also `x.double()` where `x` is a function's local name that every assignment there
    binds to a moved tensor (`value = torch.rand(n, d).cuda() * 0.01`, then
    `f(value.double())`: Deformable-DETR's operator tests).

    Known limits:
    Only a move in the same expression (`.cuda()`, `.to("cuda")`,
    `.to(porter_runtime.device())`), a local name bound only to one, or a buffer /
    parameter is seen. A file that
    defines its own `double` method gets findings instead. A module whose float64
    buffers never leave the CPU gets float32 ones on a Mac too (with the warning).
    """

    code = "PT606"
    name = "double-on-device"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"double"}))

    valid = [
        "y = x.double()\n",
        "y = x.double().to(device)\n",
        "import numpy as np\ny = np.double(3).cuda()\n",
        # a name also bound to a host tensor: not known to be on the device
        "import torch\n\ndef f(flag):\n    x = torch.rand(2).cuda()\n    if flag:\n        x = torch.rand(2)\n"
        "    return x.double()\n",
    ]
    invalid = [
        Example(
            "probe = LinearProbe(4).double().cuda()\n",
            "import porter_runtime\nprobe = porter_runtime.double(LinearProbe(4)).cuda()\n",
        ),
        Example(
            "import torch as t\ny = x.to(t.device('cuda')).double()\n",
            "import porter_runtime\nimport torch as t\ny = porter_runtime.double(x.to(t.device('cuda')))\n",
        ),
        Example(
            "import porter_runtime\nfrom torch import tensor\ny = tensor([1.0]).double().to(porter_runtime.device(), non_blocking=True)\n",
            "import porter_runtime\nfrom torch import tensor\n"
            "y = porter_runtime.double(tensor([1.0])).to(porter_runtime.device(), non_blocking=True)\n",
        ),
        Example("class P:\n    def double(self):\n        return self\n\np = P().double().cuda()\n"),
        Example(  # an operator's test script: names bound at its top level, read there and in a function
            dedent("""\
                import torch

                value = torch.rand(2, 8).cuda()
                weight = torch.rand(8).cuda()


                def check(func):
                    return torch.autograd.gradcheck(func, (value.double(), weight.double()))
                """),
            dedent("""\
                import porter_runtime
                import torch

                value = torch.rand(2, 8).cuda()
                weight = torch.rand(8).cuda()


                def check(func):
                    return torch.autograd.gradcheck(func, (porter_runtime.double(value), porter_runtime.double(weight)))
                """),
        ),
        Example(  # Deformable-DETR's operator test: local names bound to moved tensors, then made float64
            dedent("""\
                import torch


                @torch.no_grad()
                def check_forward_equal_with_pytorch_double():
                    value = torch.rand(N, S, M, D).cuda() * 0.01
                    weights = torch.rand(N, Lq, M, L, P).cuda() + 1e-5
                    weights /= weights.sum(-1, keepdim=True)
                    return attention_core(value.double(), weights.double()).detach().cpu()
                """),
            dedent("""\
                import porter_runtime
                import torch


                @torch.no_grad()
                def check_forward_equal_with_pytorch_double():
                    value = torch.rand(N, S, M, D).cuda() * 0.01
                    weights = torch.rand(N, Lq, M, L, P).cuda() + 1e-5
                    weights /= weights.sum(-1, keepdim=True)
                    return attention_core(porter_runtime.double(value), porter_runtime.double(weights)).detach().cpu()
                """),
        ),
        Example(  # ... and its gradient check, which sets requires_grad on them first
            dedent("""\
                import torch
                from torch.autograd import gradcheck


                def check_gradient_numerical(channels=4, grad_value=True):
                    value = torch.rand(N, S, M, channels).cuda() * 0.01
                    value.requires_grad = grad_value
                    return gradcheck(MSDeformAttnFunction.apply, (value.double(), shapes, 2))
                """),
            dedent("""\
                import porter_runtime
                import torch
                from torch.autograd import gradcheck


                def check_gradient_numerical(channels=4, grad_value=True):
                    value = torch.rand(N, S, M, channels).cuda() * 0.01
                    value.requires_grad = grad_value
                    return gradcheck(MSDeformAttnFunction.apply, (porter_runtime.double(value), shapes, 2))
                """),
        ),
        Example(  # a float64 noise schedule: buffers move to the device with the module
            dedent("""\
                import torch
                import torch.nn as nn


                class GaussianDiffusionTrainer(nn.Module):
                    def __init__(self, model, beta_1, beta_T, T):
                        super().__init__()
                        self.register_buffer(
                            'betas', torch.linspace(beta_1, beta_T, T).double())
                        self.scale = nn.Parameter(torch.ones(1).double())
                """),
            dedent("""\
                import porter_runtime
                import torch
                import torch.nn as nn


                class GaussianDiffusionTrainer(nn.Module):
                    def __init__(self, model, beta_1, beta_T, T):
                        super().__init__()
                        self.register_buffer(
                            'betas', porter_runtime.double(torch.linspace(beta_1, beta_T, T)))
                        self.scale = nn.Parameter(porter_runtime.double(torch.ones(1)))
                """),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._own = bool(_DEFINES_DOUBLE.search(ctx.source))
        self._on_device: list[frozenset[str]] = []  # per enclosing function: names that hold moved tensors

    def visit_Module(self, node: cst.Module) -> None:
        self._on_device.append(moved_names(self, node))  # a script's top level: `value = torch.rand(...).cuda()`

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        own = Assignments()
        node.body.visit(own)
        outer = self._on_device[-1] if self._on_device else frozenset()
        params = parameters(node)
        # the function's own moved names, and the module's that it reads without binding them
        self._on_device.append(moved_names(self, node) | frozenset(
            name for name in outer if name not in own.values and name not in params))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._on_device.pop()
        return updated

    def visit_Call(self, node: cst.Call) -> None:
        super().visit_Call(node)
        state = _module_state(self, node)
        if state is not None:
            self._moved.add(id(state))
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "double" and isinstance(func.value, cst.Name) \
                and self._on_device and func.value.value in self._on_device[-1]:
            self._moved.add(id(node))  # Deformable-DETR's test.py: `value = torch.rand(...).cuda() * 0.01`

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "double" or original.args:
            return updated
        if self.qualname(func.value) is not None:
            return updated  # ``np.double(...)``: a module's function
        if not self.beside_device_move(original):
            return updated
        if self._own:
            self.flag(original, "`.double()` may call this file's own `double` method; not rewritten",
                      suggestion="porter_runtime.double(x)")
            return updated
        new = self.runtime_call("double", updated.func.value)  # type: ignore[attr-defined]
        return self.rewrite(original, new, "float64 on the device becomes float32 on MPS only")


_DEFINES_DOUBLE = re.compile(rb"\bdef\s+double\s*\(")
_PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def _module_state(rule: Rule, call: cst.Call) -> Optional[cst.BaseExpression]:
    """The tensor ``X.register_buffer(name, tensor)`` or ``nn.Parameter(tensor)`` makes part
    of a module: it goes wherever ``module.to(device)`` sends the module."""
    if rule.qualname(call.func) in _PARAMETER:
        given = keyword(call, "data") or (positional(call)[:1] or [None])[0]
    elif isinstance(call.func, cst.Attribute) and call.func.attr.value == "register_buffer" \
            and rule.qualname(call.func.value) is None:
        given = keyword(call, "tensor") or (positional(call)[1:2] or [None])[0]
    else:
        return None
    return given.value if given is not None else None
