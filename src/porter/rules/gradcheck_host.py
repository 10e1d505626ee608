"""``torch.autograd.gradcheck`` of tensors on the device (PT611; twins in porter_runtime)."""

from __future__ import annotations

from textwrap import dedent

from porter.rulebase.evidence import CallsMethod, InFile
from porter.rulebase.families.devices.twin_calls import TwinCall
from porter.rulebase.rule import Example, Needs, Rule, Safety

_TABLE = {
    "torch.autograd.gradcheck": "gradcheck",
    "torch.autograd.gradcheck.gradcheck": "gradcheck",
    "torch.autograd.gradgradcheck": "gradgradcheck",
    "torch.autograd.gradcheck.gradgradcheck": "gradgradcheck",
}


class GradcheckOnHost(TwinCall, Rule):
    """A `gradcheck` in a module that moves tensors to the GPU becomes `porter_runtime.gradcheck`.

    What:
    Rewrites `gradcheck(func, inputs, ...)` and `gradgradcheck(...)` (from
    `torch.autograd`) to `porter_runtime.gradcheck(...)` / `porter_runtime.gradgradcheck(...)`,
    same arguments, in a module that moves tensors to the GPU (`.cuda()`) or casts them
    with `.double()`.

    Why:
    The test of a custom operator checks its gradients numerically in float64 on the GPU:
    `gradcheck(func, (value.double(), ...))` with `value` made by `.cuda()`. MPS has no
    float64, so the port's `porter_runtime.double` keeps such tensors float32 there, and
    float32 finite differences fail gradcheck's tolerances: "Jacobian mismatch"
    (Deformable-DETR's `models/ops/test.py` under `--emulate mps`).

    Fix safety:
    Safe. Where the device has float64 (CUDA, the CPU) the twins call torch's own check
    with the same arguments. On MPS they copy the inputs to the host, float32 as float64,
    each keeping `requires_grad`, and run the same check there with the module's own
    function, as one would by hand; an info line says so once.

    Known limits:
    A function that makes tensors on the device itself (`torch.zeros(..., device=...)`)
    mixes them with the host inputs on MPS and fails there as before.
    """

    code = "PT611"
    name = "gradcheck-on-host"
    safety = Safety.SAFE
    table = _TABLE
    needs = Needs(calls_only=True, targets=frozenset(_TABLE), evidence=InFile(CallsMethod("cuda", "double")))

    valid = [
        # nothing goes to the GPU: the check runs where its inputs are, on every machine
        "import torch\nfrom torch.autograd import gradcheck\nx = torch.rand(3, dtype=torch.float64, requires_grad=True)\n"
        "assert gradcheck(torch.sin, (x,))\n",
    ]
    invalid = [
        Example(  # Deformable-DETR's models/ops/test.py
            dedent("""\
                import torch
                from torch.autograd import gradcheck

                from functions.ms_deform_attn_func import MSDeformAttnFunction


                def check_gradient_numerical(channels=4):
                    value = torch.rand(N, S, M, channels).cuda() * 0.01
                    sampling_locations = torch.rand(N, Lq, M, L, P, 2).cuda()
                    attention_weights = torch.rand(N, Lq, M, L, P).cuda() + 1e-5
                    attention_weights /= attention_weights.sum(-1, keepdim=True).sum(-2, keepdim=True)
                    value.requires_grad = True
                    func = MSDeformAttnFunction.apply
                    gradok = gradcheck(func, (value.double(), shapes, level_start_index, sampling_locations.double(),
                                              attention_weights.double(), im2col_step))
                    print(f'* {gradok} check_gradient_numerical(D={channels})')
                """),
            dedent("""\
                import porter_runtime
                import torch

                from functions.ms_deform_attn_func import MSDeformAttnFunction


                def check_gradient_numerical(channels=4):
                    value = torch.rand(N, S, M, channels).cuda() * 0.01
                    sampling_locations = torch.rand(N, Lq, M, L, P, 2).cuda()
                    attention_weights = torch.rand(N, Lq, M, L, P).cuda() + 1e-5
                    attention_weights /= attention_weights.sum(-1, keepdim=True).sum(-2, keepdim=True)
                    value.requires_grad = True
                    func = MSDeformAttnFunction.apply
                    gradok = porter_runtime.gradcheck(func, (value.double(), shapes, level_start_index, sampling_locations.double(),
                                              attention_weights.double(), im2col_step))
                    print(f'* {gradok} check_gradient_numerical(D={channels})')
                """),
        ),
        Example(
            "import torch\n\nx = torch.randn(4, 8, device='cuda').double().requires_grad_()\n"
            "assert torch.autograd.gradgradcheck(torch.tanh, (x,))\n",
            "import porter_runtime\nimport torch\n\nx = torch.randn(4, 8, device='cuda').double().requires_grad_()\n"
            "assert porter_runtime.gradgradcheck(torch.tanh, (x,))\n",
        ),
    ]
