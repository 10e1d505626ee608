"""``torch.cuda.amp.custom_fwd`` / ``custom_bwd`` and their ``torch.amp`` forms."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.families.compile_amp_shared import RenameToRuntime, is_cuda_type, without
from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
    has_star_args,
    keyword,
)


_FWD_BWD_LEGACY = {
    "torch.cuda.amp.custom_fwd": "custom_fwd",
    "torch.cuda.amp.custom_bwd": "custom_bwd",
    "torch.cuda.amp.autocast_mode.custom_fwd": "custom_fwd",
    "torch.cuda.amp.autocast_mode.custom_bwd": "custom_bwd",
}
_FWD_BWD_DEVICE = {
    "torch.amp.custom_fwd": "custom_fwd",
    "torch.amp.custom_bwd": "custom_bwd",
    "torch.amp.autocast_mode.custom_fwd": "custom_fwd",
    "torch.amp.autocast_mode.custom_bwd": "custom_bwd",
}


class CudaCustomFwdBwd(RenameToRuntime, Rule):
    """CUDA `custom_fwd` / `custom_bwd` become `porter_runtime.custom_fwd` / `custom_bwd`.

    What:
    Rewrites `torch.cuda.amp.custom_fwd` and `custom_bwd` (bare decorators or with
    `cast_inputs=`) and `torch.amp.custom_fwd(device_type="cuda", ...)` /
    `torch.amp.custom_bwd(device_type="cuda")` into the runtime's twins, keeping
    `cast_inputs`.

    Why:
    A custom autograd function decorated for CUDA autocast does not take part in
    MPS or CPU autocast; the twins use the runtime's device type.

    Fix safety:
    Safe. On CUDA the twins call `torch.amp.custom_fwd(fwd, device_type="cuda",
    cast_inputs=...)` and `torch.amp.custom_bwd(bwd, device_type="cuda")`, which is
    what the legacy functions and the "cuda" forms do. A call left with no
    arguments (`torch.amp.custom_fwd(device_type="cuda")` as a decorator) becomes
    the bare decorator, which decorates the same way.

    Known limits:
    A `device_type` that is a variable or not "cuda" is left alone.
    """

    code = "PT504"
    name = "cuda-custom-fwd-bwd"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset(_FWD_BWD_LEGACY | _FWD_BWD_DEVICE))
    renames = _FWD_BWD_LEGACY
    message = "custom_fwd/custom_bwd now follow the runtime's autocast device"

    valid = [
        "import torch\n\n@torch.amp.custom_fwd(device_type='cpu')\ndef forward(ctx, x):\n    return x\n",
        "import torch\n\n@torch.amp.custom_bwd(device_type=kind)\ndef backward(ctx, g):\n    return g\n",
        "def f(torch):\n    return torch.cuda.amp.custom_fwd(fn)\n",
        "import mylib as torch\n\n@torch.cuda.amp.custom_fwd\ndef forward(ctx, x):\n    return x\n",
    ]
    invalid = [
        Example(
            "import torch\n\n@torch.cuda.amp.custom_fwd\ndef forward(ctx, x):\n    return x\n",
            "import porter_runtime\n\n@porter_runtime.custom_fwd\ndef forward(ctx, x):\n    return x\n",
        ),
        Example(
            "import torch as t\n\n@t.cuda.amp.custom_fwd(cast_inputs=t.float32)\ndef forward(ctx, x):\n    return x\n",
            "import porter_runtime\nimport torch as t\n\n@porter_runtime.custom_fwd(cast_inputs=t.float32)\ndef forward(ctx, x):\n    return x\n",
        ),
        Example(
            "from torch.cuda.amp import custom_bwd\n\n@custom_bwd\ndef backward(ctx, g):\n    return g\n",
            "import porter_runtime\n\n@porter_runtime.custom_bwd\ndef backward(ctx, g):\n    return g\n",
        ),
        Example(
            "from torch.amp import custom_fwd, custom_bwd\n\n"
            "@custom_fwd(device_type=\"cuda\", cast_inputs=torch.float16)\ndef forward(ctx, x):\n    return x\n\n"
            "@custom_bwd(device_type=\"cuda\")\ndef backward(ctx, g):\n    return g\n\n"
            "fwd = custom_fwd(device_type=\"cuda\")\n",
            "import porter_runtime\n\n"
            "@porter_runtime.custom_fwd(cast_inputs=torch.float16)\ndef forward(ctx, x):\n    return x\n\n"
            "@porter_runtime.custom_bwd\ndef backward(ctx, g):\n    return g\n\n"
            "fwd = porter_runtime.custom_fwd()\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._decorators: set[int] = set()

    def visit_Decorator(self, node: cst.Decorator) -> None:
        self._decorators.add(id(node.decorator))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func, *_FWD_BWD_DEVICE)
        if target is None or has_star_args(updated):
            return updated
        device = keyword(updated, "device_type")
        if device is None or not is_cuda_type(device.value):
            return updated
        args = without(list(updated.args), device)
        twin = _FWD_BWD_DEVICE[target]
        if not args and id(original) in self._decorators:
            new: cst.BaseExpression = self.runtime(twin)
        else:
            new = updated.with_changes(func=self.runtime(twin), args=args)
        return self.rewrite(original, new, self.message)
