"""A method that stores the tensors it is given moves them to CUDA (PT913)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety, keyword, positional
from porter.rulebase.syntax import EQ, is_device_expr, with_arg
from porter.rulebase.families.thirdparty.uses import example_code


class _Stored(cst.CSTVisitor):
    """The parameters a function hands to ``setattr(obj, name, <param>)``."""

    def __init__(self, params: set[str]) -> None:
        super().__init__()
        self.params = params
        self.stored: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested function's own

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "setattr" and len(node.args) == 3:
            value = node.args[2].value
            if isinstance(value, cst.Name) and value.value in self.params:
                self.stored.add(value.value)


class SetterDeviceMove(Rule):
    """A setter's `attr.to(torch.device("cuda"))` becomes `porter_runtime.to_device(attr, device=...)`.

    What:
    In a function that stores a tensor it is given with `setattr(self, name, attr)`
    (latent diffusion's samplers: `DDIMSampler.register_buffer`, `PLMSSampler`, the
    DPM-Solver sampler, and the many repositories that copied them), the move of that
    parameter to a CUDA device, `attr.to(torch.device("cuda"))` (any device expression
    porter ports), becomes `porter_runtime.to_device(attr, device=...)`.

    Why:
    The dtype of what such a setter stores is its callers': latent diffusion's DDIM
    schedule (`ddim_sigmas`) is float64, made from a float32 tensor and a NumPy array in
    another module, so no rule sees it. On a Mac the move raises "Cannot convert a MPS
    Tensor to float64 dtype" (CompVis/stable-diffusion, Stability-AI/stablediffusion and
    ControlNet in blind rounds 1, 8 and 10).

    Fix safety:
    Safe. On CUDA and the CPU `porter_runtime.to_device(t, device=d)` is `t.to(d)`; on
    MPS a float64 tensor arrives as float32, with one warning, and every other dtype as
    `.to(d)` gives it.

    Known limits:
    Only a move with the device as its only argument, of a parameter the same function
    stores with `setattr`; a setter that stores through `self.__dict__` or a dict is not
    recognised.
    """

    code = "PT913"
    name = "setter-device-move"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"to"}), words=frozenset({"setattr"}))

    valid = [
        # the parameter moved is not one the function stores
        "import torch\n\ndef put(self, name, attr, other):\n    other = other.to(torch.device('cuda'))\n"
        "    setattr(self, name, attr)\n",
        # not a move to a device
        "import torch\n\ndef put(self, name, attr):\n    attr = attr.to(torch.float32)\n"
        "    setattr(self, name, attr)\n",
    ]
    invalid = [
        Example(
            example_code("""
            import torch


            class DDIMSampler(object):
                def __init__(self, model, schedule="linear", **kwargs):
                    self.model = model
                    self.ddpm_num_timesteps = model.num_timesteps
                    self.schedule = schedule

                def register_buffer(self, name, attr):
                    if type(attr) == torch.Tensor:
                        if attr.device != torch.device("cuda"):
                            attr = attr.to(torch.device("cuda"))
                    setattr(self, name, attr)
            """),
            example_code("""
            import porter_runtime
            import torch


            class DDIMSampler(object):
                def __init__(self, model, schedule="linear", **kwargs):
                    self.model = model
                    self.ddpm_num_timesteps = model.num_timesteps
                    self.schedule = schedule

                def register_buffer(self, name, attr):
                    if type(attr) == torch.Tensor:
                        if attr.device != torch.device("cuda"):
                            attr = porter_runtime.to_device(attr, device=torch.device("cuda"))
                    setattr(self, name, attr)
            """),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._stored: list[set[str]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = {p.name.value for p in (*node.params.posonly_params, *node.params.params,
                                         *node.params.kwonly_params)}
        finder = _Stored(params)
        node.body.visit(finder)
        self._stored.append(finder.stored)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._stored.pop()
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self._stored or not self._stored[-1] or not isinstance(original.func, cst.Attribute) \
                or original.func.attr.value != "to":
            return updated
        receiver = original.func.value
        if not isinstance(receiver, cst.Name) or receiver.value not in self._stored[-1]:
            return updated
        device = self._device(original, updated)
        if device is None:
            return updated
        new = with_arg(self.runtime_call("to_device", receiver), cst.Arg(device, keyword=cst.Name("device"), equal=EQ))
        return self.rewrite(original, new, f"`{receiver.value}` is stored as its callers made it, float64 included, "
                            "which MPS refuses: porter_runtime.to_device moves it as .to() does on CUDA and the CPU, "
                            "and as float32 on MPS")

    def _device(self, original: cst.Call, updated: cst.Call) -> Optional[cst.BaseExpression]:
        """The (updated) device of ``x.to(device)`` when it is the call's only argument."""
        if len(original.args) != 1 or original.args[0].star:
            return None
        arg = original.args[0]
        if arg.keyword is not None and arg.keyword.value != "device":
            return None
        if not (positional(original) or keyword(original, "device")) or not is_device_expr(self, arg.value):
            return None
        return updated.args[0].value
