"""A NumPy array's tensor moved to the device with no dtype (PT605): NumPy's default dtype
is float64, which MPS can't hold."""

from __future__ import annotations

import re
from typing import Optional
from textwrap import dedent

import libcst as cst

from porter.rulebase.evidence import MovesResultOf
from porter.rulebase.families.dtypes.numpy_dtypes import known_not_float64
from porter.rulebase.families.dtypes.numpy_float64 import Float64, ModuleIndex
from porter.rulebase.rule import (
    BYTES_GAP,
    Example,
    Needs,
    Rule,
    Safety,
    keyword,
    positional,
)
from porter.rulebase.syntax import EQ, is_device_expr

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
    Safe where it rewrites. Where the code shows the array is float64
    (`np.random.randn`, `np.zeros(n)` with no dtype, `dtype=np.float64`, what NumPy
    keeps float64 from one of these; porter.rulebase.families.dtypes.numpy_float64) and
    the move is `.cuda()` or `.to(d)` with `d` plainly a device (a device string,
    `torch.device(...)`, a name ending in `device`), the move becomes
    `porter_runtime.to_device(t, device=d)`: on CUDA and the CPU that is `t.to(d)`
    exactly; on MPS the float64 tensor arrives as float32 (one warning), the one dtype
    MPS can hold. Any other move of a float64 array (`.to(other)`, where `other` may be
    a tensor whose dtype `.to` would also take) needs a human, and the message names
    what makes it float64. An array whose dtype nothing here shows (a dataset's item, a
    file's contents, a parameter no caller in the module gives a float64) is a note.

    Known limits:
    Only a move in the same expression is seen; a tensor stored in a variable and
    moved later is not. An array whose dtype is in plain sight and is not float64 is
    left alone: made with `.astype("float32")` or `np.zeros(..., dtype=np.uint8)` in the
    same function (a `self.` field: anywhere in the class), or by
    `linear_sum_assignment`, or `np.array(img)` of a PIL image (Pillow has no float64
    mode); indexing, `transpose` and `reshape` keep that dtype. A float64 maker is
    followed through names, `self.` fields, the module's own functions' returns, a
    field of the module's own class (or of gym's `RunningMeanStd`), and a parameter to
    what the module's callers pass; not across modules.
    """

    code = "PT605"
    name = "from-numpy-to-device"
    safety = Safety.SAFE
    # The dtype search may read the module's other functions, classes and callers: a file
    # where it does is read whole (ctx.see_whole_file), the others only in the wanted parts.
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
            dedent("""\
                import porter_runtime
                import numpy as np
                import torch

                z = np.random.RandomState(seed).randn(1, G.z_dim)
                z = porter_runtime.to_device(torch.from_numpy(z), device=device)
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
            dedent("""\
                import porter_runtime
                import numpy as np
                import torch

                class Buffer:
                    def __init__(self, n):
                        self.rewards = np.zeros(n, dtype=np.float32)

                    def reset(self, n):
                        self.rewards = np.zeros(n)

                    def sample(self, idx, device):
                        return porter_runtime.to_device(torch.from_numpy(self.rewards[idx]), device=device)
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
            dedent("""\
                import porter_runtime
                import numpy as np
                import torch
                from PIL import Image


                def load_image(path, device):
                    image = Image.open(path).convert("RGB").resize((256, 256))
                    pixels = np.array(image) / 255.0
                    return porter_runtime.to_device(torch.from_numpy(pixels), device=device).permute(2, 0, 1)
                """),
            line=9, message="float64",
        ),
        Example(  # a float64 schedule reaches the helper through its callers
            dedent("""\
                import numpy as np
                import torch as th


                def _extract_into_tensor(arr, timesteps, broadcast_shape):
                    res = th.from_numpy(arr).to(device=timesteps.device)[timesteps].float()
                    while len(res.shape) < len(broadcast_shape):
                        res = res[..., None]
                    return res.expand(broadcast_shape)


                class GaussianDiffusion:
                    def __init__(self, betas):
                        betas = np.array(betas, dtype=np.float64)
                        alphas = 1.0 - betas
                        self.alphas_cumprod = np.cumprod(alphas, axis=0)
                        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)

                    def q_sample(self, x_start, t, noise):
                        return _extract_into_tensor(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start + noise
                """),
            dedent("""\
                import porter_runtime
                import numpy as np
                import torch as th


                def _extract_into_tensor(arr, timesteps, broadcast_shape):
                    res = porter_runtime.to_device(th.from_numpy(arr), device=timesteps.device)[timesteps].float()
                    while len(res.shape) < len(broadcast_shape):
                        res = res[..., None]
                    return res.expand(broadcast_shape)


                class GaussianDiffusion:
                    def __init__(self, betas):
                        betas = np.array(betas, dtype=np.float64)
                        alphas = 1.0 - betas
                        self.alphas_cumprod = np.cumprod(alphas, axis=0)
                        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)

                    def q_sample(self, x_start, t, noise):
                        return _extract_into_tensor(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start + noise
                """),
            line=6, message="`np.array(betas, dtype=np.float64)` makes float64",
        ),
        Example(  # gym's RunningMeanStd keeps float64 statistics
            dedent("""\
                import numpy as np
                import torch
                from gym.wrappers.normalize import RunningMeanStd

                obs_rms = RunningMeanStd(shape=(1, 1, 84, 84))


                def normalize(next_obs, device):
                    mean = torch.from_numpy(obs_rms.mean).to(device)
                    return (next_obs - mean) / torch.sqrt(torch.from_numpy(obs_rms.var).to(device))
                """),
            dedent("""\
                import porter_runtime
                import numpy as np
                import torch
                from gym.wrappers.normalize import RunningMeanStd

                obs_rms = RunningMeanStd(shape=(1, 1, 84, 84))


                def normalize(next_obs, device):
                    mean = porter_runtime.to_device(torch.from_numpy(obs_rms.mean), device=device)
                    return (next_obs - mean) / torch.sqrt(porter_runtime.to_device(torch.from_numpy(obs_rms.var), device=device))
                """),
            line=9, message="keeps `mean` as float64",
        ),
        Example(  # a dtype that only TensorRT knows: a note, not a finding
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
            line=11, message="nothing here shows its dtype",
        ),
        Example(  # a float64 array moved where `.to` may also take another tensor's dtype: for a human
            dedent("""\
                import numpy as np
                import torch

                noise = torch.from_numpy(np.random.randn(4, 8)).to(latents)
                """),
            line=4, message="float64",
        ),
        Example(  # yolov7/stylegan-style sampling: `.cuda()` of float64 latents
            dedent("""\
                import numpy as np
                import torch

                z = torch.from_numpy(np.random.RandomState(seed).randn(1, G.z_dim)).cuda(non_blocking=True)
                """),
            dedent("""\
                import porter_runtime
                import numpy as np
                import torch

                z = porter_runtime.to_device(torch.from_numpy(np.random.RandomState(seed).randn(1, G.z_dim)), non_blocking=True)
                """),
        ),
        Example("import torch as t\nx = t.from_numpy(a).to(device, non_blocking=True)\n"),
        Example("from torch import from_numpy\nx = from_numpy(a).to('cuda')\n"),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._moved: dict[int, cst.Call] = {}  # id of a from_numpy call -> the move of its tensor
        self._twins: dict[int, str] = {}       # id of a move rewritten to to_device -> what made it float64
        self._functions: list[cst.FunctionDef] = []
        self._classes: list[cst.ClassDef] = []
        self._search: Optional[Float64] = None  # one per file: it remembers what it followed

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
            self._moved[id(node.func.value)] = node  # type: ignore[attr-defined]

    def _known_not_float64(self, call: cst.Call) -> bool:
        """The array's dtype is in plain sight and is not float64 (porter.rulebase.families.dtypes.numpy_dtypes)."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return False
        klass = self._classes[-1] if self._classes else None
        if not self._functions:
            self.ctx.see_whole_file("PT605: a module-level name's assignments")
        function = self._functions[-1] if self._functions else self.ctx.module
        # a method left out may set the field: read only when the search reaches a `self.` field
        return known_not_float64(call.args[0].value, self.qualname, function, klass,
                                 reading_class=lambda: self.ctx.see_all_uses_of(["self"]))

    def _float64_source(self, call: cst.Call) -> Optional[str]:
        """What makes the array float64, where the code shows it (porter.rulebase.families.dtypes.numpy_float64)."""
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None
        if self._search is None:
            index = ModuleIndex(self.ctx.module, reading_all=lambda: self.ctx.see_whole_file(
                "PT605: the dtype search reads the module's other definitions"))
            self._search = Float64(self.qualname, index, self.ctx.code_for,
                                   reading_class=lambda: self.ctx.see_all_uses_of(["self"]))
        search = self._search
        klass = self._classes[-1] if self._classes else None
        function = self._functions[-1] if self._functions else self.ctx.module
        return search.source(call.args[0].value, function, klass)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if id(original) in self._twins:
            return self._to_device(original, updated, self._twins.pop(id(original)))
        if id(original) not in self._moved or not self.matches(original.func) or self._known_not_float64(original):
            return updated
        suggestion = "porter_runtime.to_device(torch.from_numpy(a)), or .float() before the move"
        source = self._float64_source(original)
        move = self._moved[id(original)]
        if source is not None and self._device_of(move) is not None:
            self._twins[id(move)] = source  # the move, left next, becomes porter_runtime.to_device
        elif source is not None:
            self.flag(original, f"the array is float64 ({source}), and MPS has no float64", suggestion=suggestion)
        else:
            self.note(original, "if the array is float64 (NumPy's default for floats), the move fails on MPS, "
                      "which has no float64; nothing here shows its dtype", suggestion=suggestion)
        return updated

    def _device_of(self, move: cst.Call) -> Optional[cst.BaseExpression]:
        """What an original move names as its device, where ``to_device`` can stand in for it:
        ``t.cuda()`` (the move itself), ``t.to(d)`` / ``t.to(device=d)`` with ``d`` plainly a
        device (not a tensor, whose ``.to`` would also take its dtype), ``non_blocking=`` beside
        either; None for any other move."""
        func = move.func
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda" and not positional(move) \
                and all(a.keyword is not None and a.keyword.value == "non_blocking" for a in move.args):
            return func
        value = _device_argument(move)
        return value if value is not None and _names_a_device(self, value) else None

    def _to_device(self, original: cst.Call, updated: cst.Call, source: str) -> cst.BaseExpression:
        """``torch.from_numpy(a).to(device)`` -> ``porter_runtime.to_device(torch.from_numpy(a), device=device)``."""
        args: list[cst.Arg] = [cst.Arg(updated.func.value)]  # type: ignore[attr-defined]
        blocking = keyword(updated, "non_blocking")
        if blocking is not None:
            args.append(_keyword_arg("non_blocking", blocking.value))
        device = _device_argument(updated)  # as other rules left it: `.cuda()` is PT001's `.to(<device>)` now
        if device is not None:
            args.append(_keyword_arg("device", device))
        return self.rewrite(original, self.runtime_call("to_device", *args),
                            f"the array is float64 ({source}), and MPS has no float64: the runtime moves the tensor "
                            "as .to does on CUDA and the CPU, and as float32 on MPS")

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


def _keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(value, keyword=cst.Name(name), equal=EQ)


def _device_argument(move: cst.Call) -> Optional[cst.BaseExpression]:
    """``d`` of ``t.to(d)`` / ``t.to(device=d)``, with at most ``non_blocking=`` beside it."""
    if not isinstance(move.func, cst.Attribute) or move.func.attr.value != "to" or any(a.star for a in move.args):
        return None
    given = positional(move)
    named = {a.keyword.value for a in move.args if a.keyword is not None}
    if not named <= {"device", "non_blocking"}:
        return None
    if len(given) == 1 and "device" not in named:
        return given[0].value
    if not given and "device" in named:
        return keyword(move, "device").value
    return None


def _names_a_device(rule: Rule, node: cst.BaseExpression) -> bool:
    """A device in plain sight: what :func:`is_device_expr` calls one (``"cuda:1"``,
    ``torch.device("cuda")``, the runtime's device), ``torch.device(name)``, or a name whose
    last part says device (``device``, ``self.device``, ``x.device``, ``dev``)."""
    if is_device_expr(rule, node):
        return True
    if isinstance(node, cst.Call):
        return rule.qualname(node.func) == "torch.device"
    last = node.attr.value if isinstance(node, cst.Attribute) else node.value if isinstance(node, cst.Name) else ""
    return "device" in last.lower() or last.lower() == "dev"


def _is_dtype(rule: Rule, node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Call) and rule.qualname(node.func) == "porter_runtime.supported_dtype":
        return True  # PT604's output: a second run must not report what the first did not
    name = rule.qualname(node)
    return name is not None and name.startswith("torch.") and name[len("torch."):] in _DTYPE_NAMES


_DTYPE_NAMES = frozenset({
    "float", "float16", "half", "bfloat16", "float32", "float64", "double", "complex64", "cfloat",
    "complex128", "cdouble", "uint8", "int8", "int16", "short", "int32", "int", "int64", "long", "bool",
})
