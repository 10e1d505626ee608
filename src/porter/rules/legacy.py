"""Legacy CUDA tensor types (``torch.cuda.FloatTensor``...), their names compared with
``x.type()``, and ``sdp_kernel``."""

from __future__ import annotations

import re
from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.needs import Needs
from porter.rulebase.rule import Example, Rule, Safety, has_star_args, string_value
from porter.rulebase.syntax import with_arg
from porter.rulebase.walk import nodes_of

# torch.cuda.<Type>Tensor -> the dtype it holds (torch/cuda/__init__.py, torch 2.13).
_TYPES = {
    "FloatTensor": "float32", "DoubleTensor": "float64", "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16", "ByteTensor": "uint8", "CharTensor": "int8",
    "ShortTensor": "int16", "IntTensor": "int32", "LongTensor": "int64", "BoolTensor": "bool",
}
_LEGACY = {f"torch.cuda.{name}": dtype for name, dtype in _TYPES.items()}
# What supported_dtype may change on MPS: those go through it (see PT604).
_HAZARD = {"float64", "bfloat16"}


def _is_number(node: cst.BaseExpression) -> bool:
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.Name):
        return node.value in ("True", "False")
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return isinstance(node.expression, (cst.Integer, cst.Float))
    if isinstance(node, (cst.List, cst.Tuple)):
        return all(_is_number(e.value) and not isinstance(e, cst.StarredElement) for e in node.elements)
    return False


def _kw(name: str, value: cst.BaseExpression) -> cst.Arg:
    eq = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return cst.Arg(value, keyword=cst.Name(name), equal=eq)


#: Where a CUDA tensor type is an argument porter ports (PT904) or has ported.
_SET_DEFAULT = ("torch.set_default_tensor_type", "porter_runtime.set_default_tensor_type")


class LegacyCudaTensor(Rule):
    """`torch.cuda.FloatTensor(...)` and the other legacy CUDA tensor types.

    What:
    Rewrites the constructor calls whose meaning is certain from the source:
    `torch.cuda.FloatTensor(2, 3)` (integer literal sizes) becomes
    `torch.empty(2, 3, dtype=torch.float32, device=porter_runtime.device())`,
    `torch.cuda.LongTensor([1, 2])` (a literal list or tuple of numbers) becomes
    `torch.tensor([1, 2], dtype=torch.int64, device=porter_runtime.device())`, and
    no arguments becomes `torch.empty(0, ...)`. A type kept as a value
    (`self.FloatTensor = torch.cuda.FloatTensor if use_gpu else torch.FloatTensor`, then
    `self.FloatTensor(bs, nc, h, w)`) or checked with `isinstance` becomes
    `porter_runtime.legacy_tensor_type(torch.cuda.FloatTensor)`. A constructor call whose
    argument may be a size or data, and a cast `x.type(torch.cuda.FloatTensor)`, are
    reported; `torch.set_default_tensor_type(torch.cuda.FloatTensor)` is PT904's.

    Why:
    The constructors raise without CUDA ("type torch.cuda.FloatTensor not available":
    SPADE's two blockers, blind round 8), and type checks against them are always False
    off CUDA, silently taking another branch.

    Fix safety:
    Safe. A legacy constructor with integer sizes makes an uninitialised tensor of
    that shape and dtype on the current CUDA device, as `torch.empty(...,
    device=torch.device("cuda"))` does; from a sequence it converts the data with the
    given dtype and no type inference, as `torch.tensor(data, dtype=...)` does.
    float64 and bfloat16 go through `porter_runtime.supported_dtype(...)`, which is
    the dtype itself on CUDA. A variable argument could be a size, a `torch.Size`,
    data or a tensor, so it is reported rather than guessed. `legacy_tensor_type` returns
    the type itself on CUDA; elsewhere a stand-in of the same name whose calls build on the
    resolved device (sizes: `torch.empty`, data: `torch.tensor`, in its dtype) and for which
    `isinstance` asks for that dtype on that device, as the CUDA type does on CUDA.

    Known limits:
    The rewrite needs `import torch` (under any name) in the file; with only
    from-imports of the legacy types it is a finding.
    """

    code = "PT602"
    name = "legacy-cuda-tensor"
    safety = Safety.SAFE
    device_split = True  # `cuda.FloatTensor if x.is_cuda else FloatTensor`: the CPU arm runs on a Mac
    needs = Needs(targets=frozenset(_LEGACY))

    valid = [
        "import torch\nx = torch.FloatTensor(2, 3)\n",
        "def f(torch):\n    return torch.cuda.FloatTensor(2)\n",
        "import mylib as torch\nx = torch.cuda.FloatTensor(2)\n",
        "from torch.cuda import FloatTensor\nx = np.FloatTensor\n",  # an attribute's name
        # PT904's rewrite, and its input: the runtime takes CUDA types
        "import porter_runtime\nimport torch\nporter_runtime.set_default_tensor_type(torch.cuda.FloatTensor)\n",
        "import torch as t\nt.set_default_tensor_type(t.cuda.HalfTensor)\n",
    ]
    invalid = [
        Example(
            "import torch\nx = torch.cuda.FloatTensor(2, 3)\n",
            "import porter_runtime\nimport torch\n"
            "x = torch.empty(2, 3, dtype=torch.float32, device=porter_runtime.device())\n",
        ),
        Example(
            "import torch as t\nidx = t.cuda.LongTensor([0, 2, -1])\nd = t.cuda.DoubleTensor()\n",
            "import porter_runtime\nimport torch as t\n"
            "idx = t.tensor([0, 2, -1], dtype=t.int64, device=porter_runtime.device())\n"
            "d = t.empty(0, dtype=porter_runtime.supported_dtype(t.float64), device=porter_runtime.device())\n",
        ),
        Example(
            "import torch\nfrom torch.cuda import BoolTensor\nmask = BoolTensor((True, False))\n",
            "import porter_runtime\nimport torch\n"
            "mask = torch.tensor((True, False), dtype=torch.bool, device=porter_runtime.device())\n",
        ),
        Example("import torch\nx = torch.cuda.FloatTensor(size)\n"),
        Example("from torch.cuda import FloatTensor\nx = FloatTensor(2)\n"),
        Example("import torch\ny = x.type(torch.cuda.HalfTensor)\n"),
        Example(  # SPADE's Pix2PixModel: the type kept as a value, then called
            dedent("""\
                import torch


                class Pix2PixModel(torch.nn.Module):
                    def __init__(self, opt):
                        super().__init__()
                        self.opt = opt
                        self.FloatTensor = torch.cuda.FloatTensor if self.use_gpu() \\
                            else torch.FloatTensor
                        self.ByteTensor = torch.cuda.ByteTensor if self.use_gpu() \\
                            else torch.ByteTensor

                    def preprocess_input(self, label_map):
                        bs, _, h, w = label_map.size()
                        input_label = self.FloatTensor(bs, self.opt.label_nc, h, w).zero_()
                        return input_label.scatter_(1, label_map, 1.0)

                    def use_gpu(self):
                        return len(self.opt.gpu_ids) > 0
                """),
            dedent("""\
                import porter_runtime
                import torch


                class Pix2PixModel(torch.nn.Module):
                    def __init__(self, opt):
                        super().__init__()
                        self.opt = opt
                        self.FloatTensor = porter_runtime.legacy_tensor_type(torch.cuda.FloatTensor) if self.use_gpu() \\
                            else torch.FloatTensor
                        self.ByteTensor = porter_runtime.legacy_tensor_type(torch.cuda.ByteTensor) if self.use_gpu() \\
                            else torch.ByteTensor

                    def preprocess_input(self, label_map):
                        bs, _, h, w = label_map.size()
                        input_label = self.FloatTensor(bs, self.opt.label_nc, h, w).zero_()
                        return input_label.scatter_(1, label_map, 1.0)

                    def use_gpu(self):
                        return len(self.opt.gpu_ids) > 0
                """),
        ),
        Example(
            "import torch\nok = isinstance(x, torch.cuda.FloatTensor)\n",
            "import porter_runtime\nimport torch\nok = isinstance(x, porter_runtime.legacy_tensor_type(torch.cuda.FloatTensor))\n",
        ),
        Example(  # a device split: on MPS `x.is_cuda` is False and the CPU arm runs, so it stays a finding
            dedent("""\
                import torch

                def apply(self, x):
                    if x.is_cuda:
                        x -= torch.cuda.FloatTensor(self.mean)
                    else:
                        x -= torch.FloatTensor(self.mean)
                    return x
                """),
            line=5, message="CUDA",
        ),
        Example(  # YOLOX's COCOEvaluator: the type is a cast's argument, which refuses a stand-in
            dedent("""\
                import torch


                def evaluate(self, model, half=False):
                    tensor_type = torch.cuda.HalfTensor if half else torch.cuda.FloatTensor
                    for imgs, _, info_imgs, ids in self.dataloader:
                        imgs = imgs.type(tensor_type)
                        outputs = model(imgs)
                    return outputs
                """),
            line=5, message="off CUDA no tensor is an instance of it",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._calls: set[int] = set()  # func nodes of constructor calls handled in leave_Call
        self._casts: set[int] = set()  # types given to x.type(...)
        self._cast_names: set[str] = set()  # names given to x.type(...) (visit_Module)

    def visit_Module(self, node: cst.Module) -> None:
        # names given to a cast, `imgs.type(tensor_type)`: a legacy type assigned to one is a cast too
        self._cast_names = {call.args[0].value.value for call in nodes_of(node, cst.Call)
                            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "type"
                            and call.args and isinstance(call.args[0].value, cst.Name)}

    def visit_Assign(self, node: cst.Assign) -> None:
        """YOLOX's evaluator: `tensor_type = torch.cuda.HalfTensor if half else torch.cuda.FloatTensor`,
        then `imgs.type(tensor_type)`, which refuses the runtime's stand-in: reported as a cast."""
        names = [t.target.value for t in node.targets if isinstance(t.target, cst.Name)]
        references = [ref for ref in nodes_of(node.value, (cst.Attribute, cst.Name)) if self.matches(ref)]
        if not names or not references:
            return
        if isinstance(node.value, cst.IfExp) and not (self.matches(node.value.body) and self.matches(node.value.orelse)):
            return  # PyTorch-GAN's `torch.cuda.FloatTensor if cuda else torch.FloatTensor`: off CUDA the CPU type is cast to
        self.ctx.see_all_uses_of(names)  # a cast in a definition the engine left out
        if any(name in self._cast_names for name in names):
            self._casts.update(id(ref) for ref in references)

    def visit_Call(self, node: cst.Call) -> None:
        if self.matches(node.func):
            self._calls.add(id(node.func))
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "type" and node.args:
            self._casts.add(id(node.args[0].value))  # x.type(torch.cuda.HalfTensor): a cast, reported
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value == "legacy_tensor_type" and node.args:
            self._calls.add(id(node.args[0].value))  # ported already (a second run)
        elif self.matches(node.func, *_SET_DEFAULT) and node.args:
            self._calls.add(id(node.args[0].value))  # PT904's, and the runtime handles CUDA types

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is None:
            return updated
        factory = self._factory(original)
        torch_name = self._torch_name(original.func)
        if factory is None or torch_name is None:
            self._flag(original, target)
            return updated
        new = self._build(updated, factory, torch_name, _LEGACY[target])
        return self.rewrite(original, new, f"`{target}` now builds its tensor on the runtime's device")

    @staticmethod
    def _factory(call: cst.Call) -> Optional[str]:
        """"empty" or "tensor" when the arguments say which, else None."""
        if has_star_args(call) or any(a.keyword is not None for a in call.args):
            return None
        values = [a.value for a in call.args]
        if all(isinstance(v, cst.Integer) for v in values):
            return "empty"
        if len(values) == 1 and isinstance(values[0], (cst.List, cst.Tuple)) and _is_number(values[0]):
            return "tensor"
        return None

    def _build(self, updated: cst.Call, factory: str, torch_name: str, dtype: str) -> cst.Call:
        dtype_expr: cst.BaseExpression = cst.Attribute(cst.Name(torch_name), cst.Name(dtype))
        if dtype in _HAZARD:
            dtype_expr = self.runtime_call("supported_dtype", dtype_expr)
        call = updated.with_changes(func=cst.Attribute(cst.Name(torch_name), cst.Name(factory)))
        if not call.args:
            call = call.with_changes(args=[cst.Arg(cst.Integer("0"))])
        call = with_arg(call, _kw("dtype", dtype_expr))
        return with_arg(call, _kw("device", self.runtime_call("device")))

    def _torch_name(self, func: cst.BaseExpression) -> Optional[str]:
        """The name ``torch`` is bound to where ``func`` is used, or None."""
        root = func
        while isinstance(root, cst.Attribute):
            root = root.value
        if not isinstance(root, cst.Name):
            return None
        if self.qualname(root) == "torch":
            return root.value
        return self.ctx.resolver.name_for("torch", root)

    def _flag(self, node: cst.CSTNode, target: str) -> None:
        dtype = f"torch.{_LEGACY[target]}"
        self.flag(node, f"`{target}` needs CUDA; what this call builds depends on run-time values",
                  suggestion=f"torch.empty(*size, dtype={dtype}, device=porter_runtime.device()) for a size, "
                             f"torch.tensor(data, dtype={dtype}, device=porter_runtime.device()) for data")

    def _flag_reference(self, node: cst.CSTNode, target: str) -> None:
        dtype = f"torch.{_LEGACY[target]}"
        self.flag(node, f"`{target}` is a CUDA-only type: off CUDA no tensor is an instance of it",
                  suggestion=f"a check: x.dtype == {dtype} and x.device.type == porter_runtime.device_type(); "
                             f"a cast x.type(...): x.to(porter_runtime.device(), {dtype})")

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return self._reference(original, updated)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._reference(original, updated)

    def _reference(self, original, updated):
        target = self.matches(original)
        if target is None or id(original) in self._calls:
            return updated
        if id(original) in self._casts or self.ctx.keeps(original):
            # a cast, or code only run where CUDA is (a split behind a flag left as is): reported
            self._flag_reference(original, target)
            return updated
        return self.rewrite(original, self.runtime_call("legacy_tensor_type", updated),
                            f"`{target}` is a CUDA-only type: porter_runtime.legacy_tensor_type keeps it on CUDA "
                            "and builds and checks on the runtime's device elsewhere")


_TYPE_NAME = re.compile(r"^torch\.cuda\.[A-Za-z0-9]+Tensor$")


def _cuda_type_names(node: cst.BaseExpression) -> bool:
    """``"torch.cuda.FloatTensor"``, or a list, tuple or set of such names only."""
    if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
        return bool(node.elements) and all(_cuda_type_names(e.value) for e in node.elements)
    value = string_value(node)
    return value is not None and _TYPE_NAME.match(value) is not None


class CudaTypeName(Rule):
    """`x.type() == "torch.cuda.FloatTensor"` asks porter_runtime for the type's name.

    What:
    In a comparison of `x.type()` (no argument) with the name of a legacy CUDA tensor
    type, or with a list, tuple or set of them (`==`, `!=`, `in`, `not in`), the call
    becomes `porter_runtime.tensor_type(x)`.

    Why:
    Off CUDA a tensor's type is `torch.FloatTensor` or `torch.mps.FloatTensor`, so the
    comparison is False and the code takes another branch or fails its own check:
    Megatron-LM's `assert param.grad.type() == 'torch.cuda.FloatTensor'` at every
    optimizer step with gradient clipping, and its mixed-precision optimizers' "Wrapped
    parameters must be one of torch.cuda.FloatTensor, ..." (blind round 8, silent).

    Fix safety:
    Safe. On CUDA `tensor_type(x)` is `x.type()`. Elsewhere it is the same name, except
    that a tensor on the resolved device is named as the CUDA type of its dtype
    (`torch.cuda.FloatTensor` for float32 on MPS, or on the CPU where the CPU is the
    device): the comparison then means what it meant on CUDA, "a float32 tensor on the
    accelerator".

    Known limits:
    Only comparisons with literal names; `x.type()` kept in a variable and compared
    later stays as written.
    """

    code = "PT609"
    name = "cuda-type-name"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"type"}), strings=_TYPE_NAME)

    valid = [
        "import torch\nok = x.type() == 'torch.FloatTensor'\n",  # a CPU name
        "import torch\ny = x.type(torch.float16)\n",
        "kind = obj.type() == 'torch.cuda.FloatTensor'\n",  # no torch here: maybe not a tensor
    ]
    invalid = [
        Example(  # Megatron-LM's clip_grads.py and optimizer.py
            dedent("""\
                import torch


                def get_grad_norm_fp32(parameters):
                    grads = []
                    for param in parameters:
                        assert param.grad.type() == 'torch.cuda.FloatTensor'
                        grads.append(param.grad.detach())
                    return grads


                def check_param(param):
                    if param.type() not in ['torch.cuda.HalfTensor', 'torch.cuda.BFloat16Tensor',
                                            'torch.cuda.FloatTensor']:
                        raise TypeError("Wrapped parameters must be one of torch.cuda.FloatTensor, "
                                        f"torch.cuda.HalfTensor, or torch.cuda.BFloat16Tensor. Received {param.type()}")
                """),
            dedent("""\
                import porter_runtime
                import torch


                def get_grad_norm_fp32(parameters):
                    grads = []
                    for param in parameters:
                        assert porter_runtime.tensor_type(param.grad) == 'torch.cuda.FloatTensor'
                        grads.append(param.grad.detach())
                    return grads


                def check_param(param):
                    if porter_runtime.tensor_type(param) not in ['torch.cuda.HalfTensor', 'torch.cuda.BFloat16Tensor',
                                            'torch.cuda.FloatTensor']:
                        raise TypeError("Wrapped parameters must be one of torch.cuda.FloatTensor, "
                                        f"torch.cuda.HalfTensor, or torch.cuda.BFloat16Tensor. Received {param.type()}")
                """),
        ),
    ]

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
        if not self.ctx.resolver.imports_under("torch") or len(updated.comparisons) != 1:
            return updated
        target = updated.comparisons[0]
        if not isinstance(target.operator, (cst.Equal, cst.NotEqual, cst.In, cst.NotIn)):
            return updated
        left, right = updated.left, target.comparator
        if _type_call(left) and _cuda_type_names(right):
            new = updated.with_changes(left=self._ported(left))
        elif _type_call(right) and _cuda_type_names(left) and isinstance(target.operator, (cst.Equal, cst.NotEqual)):
            new = updated.with_changes(comparisons=[target.with_changes(comparator=self._ported(right))])
        else:
            return updated
        return self.rewrite(original, new, "off CUDA no tensor's type() is a torch.cuda name; "
                            "porter_runtime.tensor_type names a tensor on the device as CUDA would")

    def _ported(self, call: cst.Call) -> cst.Call:
        return self.runtime_call("tensor_type", call.func.value)  # type: ignore[attr-defined]


def _type_call(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "type" \
        and not node.args


_SDP = frozenset({"torch.backends.cuda.sdp_kernel", "torch.nn.attention.sdpa_kernel"})


class SdpKernel(Rule):
    """`sdp_kernel(...)` / `sdpa_kernel(...)` become `porter_runtime.sdpa_kernel(...)`.

    What:
    Rewrites calls of both attention-backend context managers into the runtime's
    twin, with the arguments unchanged.

    Why:
    Restricting scaled_dot_product_attention to the flash or memory-efficient
    backend fails off CUDA (`No available kernel.  Aborting execution.`).

    Fix safety:
    Safe. On CUDA the twin calls `torch.backends.cuda.sdp_kernel(...)` for the old
    keyword / boolean form and `torch.nn.attention.sdpa_kernel(...)` for the backends
    form, with the same arguments. Elsewhere it restricts attention to the requested
    backends the device runs (CPU: flash and math; MPS: math), so
    `sdpa_kernel(SDPBackend.MATH)` keeps giving the math kernel's results on CPU.

    Known limits:
    Global switches (`torch.backends.cuda.enable_flash_sdp(False)`) are left alone;
    so are references that are not calls. Off CUDA a flash-only request also allows
    math (CPU flash has no dropout), and a request for backends the device lacks
    (memory-efficient, cuDNN) restricts nothing; the runtime warns once for each.
    """

    code = "PT603"
    name = "sdp-kernel"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_SDP)

    valid = [
        "import torch\ntorch.backends.cuda.enable_flash_sdp(False)\n",
        "def f(torch):\n    with torch.backends.cuda.sdp_kernel(enable_math=False):\n        pass\n",
        "import mylib as torch\nwith torch.backends.cuda.sdp_kernel(enable_math=False):\n    pass\n",
        "import torch\ntorch.backends.cudnn.benchmark = True\n",
    ]
    invalid = [
        Example(
            "import torch\nwith torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False):\n    y = attn(q, k, v)\n",
            "import porter_runtime\n"
            "with porter_runtime.sdpa_kernel(enable_flash=True, enable_math=False):\n    y = attn(q, k, v)\n",
        ),
        Example(
            "import torch as t\nwith t.backends.cuda.sdp_kernel(False, True, False):\n    pass\n",
            "import porter_runtime\nwith porter_runtime.sdpa_kernel(False, True, False):\n    pass\n",
        ),
        Example(
            "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
            "with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):\n    pass\n",
            "import porter_runtime\nfrom torch.nn.attention import SDPBackend\n"
            "with porter_runtime.sdpa_kernel([SDPBackend.FLASH_ATTENTION]):\n    pass\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func):
            return updated
        new = updated.with_changes(func=self.runtime("sdpa_kernel"))
        return self.rewrite(original, new, "attention backend selection now keeps the backends each device runs")
