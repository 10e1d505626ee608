"""Dtypes MPS can't hold (float64, complex128; bfloat16 before macOS 14) reaching the device."""

from __future__ import annotations

from textwrap import dedent

import re
from typing import Optional

import libcst as cst

from porter.rulebase.evidence import CallsMethod, MovesResultOf, Name, String
from porter.rulebase.families.numpy_dtypes import known_not_float64
from porter.rulebase.rule import (
    BYTES_GAP,
    CUDA_SPEC,
    Example,
    Needs,
    Rule,
    Safety,
    keyword,
    positional,
)
from porter.rulebase.syntax import is_device_expr

#: Dtypes that ``porter_runtime.supported_dtype`` may replace on MPS.
HAZARD_DTYPES = frozenset({
    "torch.float64", "torch.double", "torch.complex128", "torch.cdouble", "torch.bfloat16",
})


def is_device_move(rule: Rule, node: cst.BaseExpression) -> bool:
    """``x.cuda(...)``, or ``x.to(...)`` with a device that :func:`is_device_expr`."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    if rule.qualname(node.func.value) is not None:
        return False  # ``mylib.cuda()``: a module's function, not a method
    method = node.func.attr.value
    if method == "cuda":
        return True
    if method != "to":
        return False
    device = keyword(node, "device")
    given = positional(node)
    candidates = [device] if device is not None else given[:1]
    return any(is_device_expr(rule, a.value) for a in candidates)


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


#: a move PT604 can see: a CUDA literal, `porter_runtime.device(...)` or `.cuda()`
_SEES_A_MOVE = String(CUDA_SPEC, word="cuda") | Name("porter_runtime") | CallsMethod("cuda")


class DeviceDtype(Rule):
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

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._moved: set[int] = set()  # calls whose result a device move receives

    def visit_Call(self, node: cst.Call) -> None:
        if is_device_move(self, node):
            self._moved.add(id(node.func.value))  # type: ignore[attr-defined]

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

    def _hazard(self, call: cst.Call) -> Optional[cst.Arg]:
        func = call.func
        name = self.qualname(func)
        if name is not None and name.startswith("torch."):
            arg = _dtype_arg(self, call, method=False)
            device = keyword(call, "device")
            on_device = id(call) in self._moved or (device is not None and is_device_expr(self, device.value))
            return arg if on_device else None
        if not isinstance(func, cst.Attribute) or func.attr.value != "to" or name is not None:
            return None
        if self.qualname(func.value) is not None:
            return None
        on_device = id(call) in self._moved or is_device_move(self, call) or is_device_move(self, func.value)
        return _dtype_arg(self, call, method=True) if on_device else None


_NOT_PAREN = rb"[^()'\"#]"
#: ``from_numpy(...)`` whose closing parenthesis is followed by ``.to`` / ``.cuda``, in
#: the bytes. The arguments are scanned two parentheses deep; deeper, or at a string or
#: a comment (whose parentheses need not pair), the file passes, as it does where
#: ``from_numpy`` is not called at once (``as fn``, ``(torch.from_numpy)(a)``).
_MOVED_FROM_NUMPY = re.compile(
    rb"from_numpy(?<=\bfrom_numpy)" + BYTES_GAP + rb"(?:[^(]|\((?:" + _NOT_PAREN + rb"|\((?:" + _NOT_PAREN
    + rb"|\(" + _NOT_PAREN + rb"*\))*\))*+(?:[(#'\"]|\)" + BYTES_GAP + rb"\." + BYTES_GAP + rb"(?:to|cuda)\b))")


#: PT605 reports only a `from_numpy(...)` call that is itself the receiver of a move;
#: most files call from_numpy and move the tensor later, or never.
_MOVES_FROM_NUMPY = MovesResultOf("torch.from_numpy")


class FromNumpyToDevice(Rule):
    """`torch.from_numpy(a)` moved to a device with no dtype is reported.

    What:
    Reports `torch.from_numpy(a).cuda()`, `torch.from_numpy(a).to(device)` and
    other moves of a NumPy array's tensor that set no dtype: NumPy arrays are
    float64 by default.

    Why:
    MPS has no float64: `TypeError: Cannot convert a MPS Tensor to float64 dtype as
    the MPS framework doesn't support float64. Please use float32 instead.`

    Fix safety:
    Review only: the array's dtype is known only at run time. The suggestion is
    exact on CUDA: `porter_runtime.to_device(t)` moves a tensor exactly like
    `.to(device)` there and casts float64 to float32 (with a warning) only on MPS.

    Known limits:
    Only a move in the same expression is seen; a tensor stored in a variable and
    moved later is not. An array whose dtype is in plain sight and is not float64 is
    left alone: made with `.astype("float32")` or `np.zeros(..., dtype=np.uint8)` in the
    same function (a `self.` field: anywhere in the class), or by
    `linear_sum_assignment`, or `np.array(img)` of a PIL image (Pillow has no float64
    mode); indexing, `transpose` and `reshape` keep that dtype. Any
    other array (a parameter, a file's contents) is reported, float32 or not.
    """

    code = "PT605"
    name = "from-numpy-to-device"
    safety = Safety.REVIEW
    needs = Needs(targets=frozenset({"torch.from_numpy"}), evidence=_MOVES_FROM_NUMPY, unit=_MOVES_FROM_NUMPY,
                  byte_patterns=_MOVED_FROM_NUMPY)

    valid = [
        "import torch\nx = torch.from_numpy(a).float().cuda()\n",
        "import torch\nx = torch.from_numpy(a).to(device, dtype=torch.float32)\n",
        "import torch\nx = torch.from_numpy(a).to(torch.float32).cuda()\n",
        "import porter_runtime\nimport torch\n"
        "x = torch.from_numpy(a).to(porter_runtime.supported_dtype(torch.float64)).to(porter_runtime.device())\n",
        "def f(torch, a):\n    return torch.from_numpy(a).cuda()\n",
        "import mylib as torch\nx = torch.from_numpy(a).cuda()\n",
        # the dtype is in plain sight and is not float64
        dedent("""\
            import numpy as np
            import torch

            z = np.random.RandomState(0).randn(n_sample, 512).astype("float32")
            latent = torch.from_numpy(z).to(device)
            """),
        dedent("""\
            import numpy as np
            import torch

            class PrioritizedReplayBuffer:
                def __init__(self, capacity, obs_shape, device):
                    self.buffer_obs = np.zeros((capacity,) + obs_shape, dtype=np.uint8)
                    self.buffer_actions = np.zeros(capacity, dtype=np.int64)
                    self.device = device

                def sample(self, indices):
                    return {
                        "observations": torch.from_numpy(self.buffer_obs[indices]).to(self.device),
                        "actions": torch.from_numpy(self.buffer_actions[indices]).to(self.device).unsqueeze(1),
                    }
            """),
        dedent("""\
            import torch
            from scipy.optimize import linear_sum_assignment

            def noise_assignment(x_start, noise):
                dist = torch.cdist(x_start.flatten(1), noise.flatten(1))
                _, assign = linear_sum_assignment(dist.cpu())
                return torch.from_numpy(assign).to(dist.device)
            """),
        dedent("""\
            import numpy as np
            import torch
            from PIL import Image, ImageDraw


            def letter_mask(x, device):
                img = Image.new("RGB", (x.shape[-1], x.shape[-1]), color="white")
                ImageDraw.Draw(img).text((50, 0), "S", fill=(0, 0, 0))
                img_np = np.array(img)
                img_np = img_np.transpose(2, 0, 1)
                return torch.from_numpy(img_np).to(device)
            """),
    ]
    invalid = [
        Example("import torch\nx = torch.from_numpy(a).cuda()\n"),
        Example(  # RandomState.randn is float64
            dedent("""\
                import numpy as np
                import torch

                z = np.random.RandomState(seed).randn(1, G.z_dim)
                z = torch.from_numpy(z).to(device)
                """),
            line=5, message="float64",
        ),
        Example(  # one of the field's assignments is float64
            dedent("""\
                import numpy as np
                import torch

                class Buffer:
                    def __init__(self, n):
                        self.rewards = np.zeros(n, dtype=np.float32)

                    def reset(self, n):
                        self.rewards = np.zeros(n)

                    def sample(self, idx, device):
                        return torch.from_numpy(self.rewards[idx]).to(device)
                """),
            line=12, message="float64",
        ),
        Example(  # a PIL image's pixels divided by 255.0: float64
            dedent("""\
                import numpy as np
                import torch
                from PIL import Image


                def load_image(path, device):
                    image = Image.open(path).convert("RGB").resize((256, 256))
                    pixels = np.array(image) / 255.0
                    return torch.from_numpy(pixels).to(device).permute(2, 0, 1)
                """),
            line=9, message="float64",
        ),
        Example(  # after `import tensorrt` (no Mac build) in the same branch: a note
            dedent("""\
                import numpy as np
                import torch


                def bindings(model, context, device, engine):
                    if engine:
                        import tensorrt as trt

                        dtype = trt.nptype(model.get_binding_dtype(0))
                        shape = tuple(context.get_binding_shape(0))
                        return torch.from_numpy(np.empty(shape, dtype=dtype)).to(device)
                    return None
                """),
            line=11, message="a CUDA-only import porter left as is, line 7",
        ),
        Example("import torch as t\nx = t.from_numpy(a).to(device, non_blocking=True)\n"),
        Example("from torch import from_numpy\nx = from_numpy(a).to('cuda')\n"),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._moved: set[int] = set()
        self._functions: list[cst.FunctionDef] = []
        self._classes: list[cst.ClassDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return updated

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._classes.pop()
        return updated

    def visit_Call(self, node: cst.Call) -> None:
        if self._any_move(node):
            self._moved.add(id(node.func.value))  # type: ignore[attr-defined]

    def _known_not_float64(self, call: cst.Call) -> bool:
        """The array's dtype is in plain sight and is not float64 (porter.rulebase.families.numpy_dtypes)."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return False
        klass = self._classes[-1] if self._classes else None
        if klass is not None:
            self.ctx.see_all_uses_of(["self"])  # a method left out may set the field
        function = self._functions[-1] if self._functions else self.ctx.module
        return known_not_float64(call.args[0].value, self.qualname, function, klass)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if id(original) in self._moved and self.matches(original.func) and not self._known_not_float64(original):
            self.flag(original, "a NumPy array is float64 unless made otherwise, and MPS has no float64",
                      suggestion="porter_runtime.to_device(torch.from_numpy(a)), or .float() before the move")
        return updated

    def _any_move(self, call: cst.Call) -> bool:
        """A move to any device (a variable too) that sets no dtype."""
        func = call.func
        if not isinstance(func, cst.Attribute) or self.qualname(func.value) is not None:
            return False
        if func.attr.value == "cuda":
            return True
        if func.attr.value != "to" or keyword(call, "dtype") is not None:
            return False
        if keyword(call, "device") is not None:
            return True
        given = positional(call)
        return bool(given) and not any(_is_dtype(self, a.value) for a in given)



class DoubleOnDevice(Rule):
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

    Known limits:
    Only a move in the same expression (`.cuda()`, `.to("cuda")`,
    `.to(porter_runtime.device())`) or a buffer / parameter is seen. A file that
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
        self._moved: set[int] = set()
        self._own = bool(_DEFINES_DOUBLE.search(ctx.source))

    def visit_Call(self, node: cst.Call) -> None:
        if is_device_move(self, node):
            self._moved.add(id(node.func.value))  # type: ignore[attr-defined]
        state = _module_state(self, node)
        if state is not None:
            self._moved.add(id(state))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "double" or original.args:
            return updated
        if self.qualname(func.value) is not None:
            return updated  # ``np.double(...)``: a module's function
        if id(original) not in self._moved and not is_device_move(self, func.value):
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


def _is_dtype(rule: Rule, node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Call) and rule.qualname(node.func) == "porter_runtime.supported_dtype":
        return True  # PT604's output: a second run must not report what the first did not
    name = rule.qualname(node)
    return name is not None and name.startswith("torch.") and name[len("torch."):] in _DTYPE_NAMES


_DTYPE_NAMES = frozenset({
    "float", "float16", "half", "bfloat16", "float32", "float64", "double", "complex64", "cfloat",
    "complex128", "cdouble", "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "bool",
})
