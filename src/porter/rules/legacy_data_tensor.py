"""``torch.Tensor([...])`` in a tree that sets a CUDA default tensor type (PT912)."""

from __future__ import annotations

import libcst as cst

from porter.project.model import sets_cuda_default_type
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import EQ, with_arg
from porter.rulebase.families.thirdparty.uses import example_code

#: What a data argument looks like: a literal list or tuple, or a comprehension of one.
_DATA = (cst.List, cst.Tuple, cst.ListComp)


class LegacyDataTensor(Rule):
    """`torch.Tensor([...])` becomes `torch.tensor([...], dtype=torch.get_default_dtype())` where the tree sets a CUDA default tensor type.

    What:
    In a repository whose code calls `torch.set_default_tensor_type` with a CUDA type
    (which PT904 ports to the runtime's default device), rewrites the legacy constructor
    `torch.Tensor(data)` of a literal list or tuple (or a list comprehension) to
    `torch.tensor(data, dtype=torch.get_default_dtype())`.

    Why:
    Under a CUDA default tensor type, `torch.Tensor([1e10])` makes a CUDA tensor. Off
    CUDA the port sets a default *device* instead, and the legacy constructor ignores
    it (pytorch/pytorch#132483): the tensor stays on the CPU, and on a Mac
    `torch.cat([dists, torch.Tensor([1e10]).expand(...)], -1)` raises "Expected all
    tensors to be on the same device" (nerf-pytorch, blind round 10). `torch.tensor`
    follows the default device.

    Fix safety:
    Safe where it applies. With a default tensor type set (CUDA's, or a CPU reset),
    `torch.tensor(data, dtype=torch.get_default_dtype())` makes the tensor of the same
    type on the same device as `torch.Tensor(data)`: its dtype is the default type's,
    and torch.tensor follows the default type's device. Only literal data is rewritten:
    `torch.Tensor(n)` (a size) and `torch.Tensor(t)` (an alias of a tensor) mean
    something else.

    Known limits:
    Data held in a variable (`torch.Tensor(values)`) is left alone: it may be a size or
    a tensor. `torch.FloatTensor(...)` and the other typed CPU constructors make CPU
    tensors under a CUDA default too, and stay as written.
    """

    code = "PT912"
    name = "legacy-data-tensor"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=frozenset({"torch.Tensor"}))

    valid = [
        # no CUDA default tensor type in the tree: torch.Tensor's CPU tensor is what it meant
        "import torch\nfar = torch.Tensor([1e10])\n",
        # a size, not data
        "import torch\ntorch.set_default_tensor_type('torch.cuda.FloatTensor')\nbuf = torch.Tensor(3)\n",
    ]
    invalid = [
        Example(
            example_code("""
            import torch

            torch.set_default_tensor_type('torch.cuda.FloatTensor')  # PT904 ports this line


            def raw2outputs(raw, z_vals, rays_d):
                dists = z_vals[..., 1:] - z_vals[..., :-1]
                dists = torch.cat([dists, torch.Tensor([1e10]).expand(dists[..., :1].shape)], -1)
                return dists * torch.norm(rays_d[..., None, :], dim=-1)
            """),
            example_code("""
            import torch

            torch.set_default_tensor_type('torch.cuda.FloatTensor')  # PT904 ports this line


            def raw2outputs(raw, z_vals, rays_d):
                dists = z_vals[..., 1:] - z_vals[..., :-1]
                dists = torch.cat([dists, torch.tensor([1e10], dtype=torch.get_default_dtype()).expand(dists[..., :1].shape)], -1)
                return dists * torch.norm(rays_d[..., None, :], dim=-1)
            """),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        project = ctx.project
        if project is not None:
            self._applies = bool(getattr(project, "cuda_default_type", False))
        else:
            self._applies = sets_cuda_default_type(ctx.source)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self._applies or self.matches(original.func) != "torch.Tensor":
            return updated
        if len(original.args) != 1 or original.args[0].keyword is not None or original.args[0].star \
                or not isinstance(original.args[0].value, _DATA) or not isinstance(original.func, cst.Attribute):
            return updated
        torch = original.func.value  # the module as the file names it (`torch`, `t`)
        func = cst.Attribute(torch, cst.Name("tensor"))
        dtype = cst.Call(cst.Attribute(torch, cst.Name("get_default_dtype")))
        new = with_arg(updated.with_changes(func=func), cst.Arg(dtype, keyword=cst.Name("dtype"), equal=EQ))
        return self.rewrite(original, new, "`torch.Tensor(data)` ignores the default device the port sets off CUDA "
                            "(it made a CUDA tensor under the CUDA default tensor type); torch.tensor follows it")
