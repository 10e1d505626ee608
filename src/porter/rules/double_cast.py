"""``x.double()`` with no move beside it (PT612): MPS can't hold the result."""

from __future__ import annotations

import re
from textwrap import dedent
import libcst as cst

from porter.rulebase.families.dtypes.host import on_host
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import DeviceMoves

_DEFINES_DOUBLE = re.compile(rb"\bdef\s+double\s*\(")
#: Receivers whose parentheses an argument does not need.
_BARE = (cst.Comparison, cst.BinaryOperation, cst.BooleanOperation, cst.UnaryOperation, cst.Call, cst.Attribute,
         cst.Subscript, cst.Name)


class DoubleCast(DeviceMoves, Rule):
    """`x.double()` goes through `porter_runtime.double_here(x)`.

    What:
    Rewrites `x.double()`, with no device move beside it (that is PT606's), to
    `porter_runtime.double_here(x)`, as PT608 rewrites `x.to(torch.float64)`.
    A receiver that is visibly on the host (`x.cpu()`, `torch.from_numpy(a)`,
    `torch.tensor(...)`) is left alone, and so is a module's function (`np.double(3)`).

    Why:
    Research code upcasts what it accumulates or checks: 2D Gaussian Splatting's test
    report sums `l1_loss(image, gt_image).mean().double()` over the test views, where
    the rendered image lives on the device. On a Mac the cast raises `TypeError: Cannot
    convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64`,
    and nothing in the line names a device.

    Fix safety:
    Safe. `double_here(x)` is `x.double()` on CUDA and for anything that is not an MPS
    tensor (a CPU tensor keeps float64 on a Mac too; a module is cast as before). Only an
    MPS tensor, where the original raises, is cast to float32 instead, with one warning.

    Known limits:
    A file that never imports torch is left as it is, and so is every `.double()` of a tree
    where a class defines a `double` method of its own (porter can't tell its objects apart).
    """

    code = "PT612"
    name = "double-cast"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"double"}))

    valid = [
        "y = x.double()\n",  # no torch import: not known to be a tensor
        "import torch\ny = x.cpu().double()\n",
        "import torch\ny = torch.from_numpy(a).double()\n",
        "import torch\nimport numpy as np\ny = np.double(3)\n",
        "import torch\ny = x.double().cuda()\n",  # beside a move: PT606's
        "import torch\ny = x.to('cuda').double()\n",
        "import torch\ny = x.double(memory_format=torch.preserve_format)\n",
        "import torch\n\n\nclass Meter:\n    def double(self):\n        return self\n\n\nm = Meter().double()\n",
        Example(  # ... or in another module of the repository: no `.double()` of the tree is rewritten
            "import torch\nfrom meters import Meter\n\ntotal = Meter().double()\n", path="train.py",
            project=(("meters.py", "class Meter:\n    def double(self):\n        return self\n"),),
        ),
    ]
    invalid = [
        Example(  # 2D Gaussian Splatting's train.py: the test report's sums, on the rendered image's device
            dedent("""\
                import torch


                def training_report(iteration, l1_loss, psnr, cameras, render):
                    l1_test = 0.0
                    psnr_test = 0.0
                    for viewpoint in cameras:
                        image = torch.clamp(render(viewpoint)["render"], 0.0, 1.0)
                        gt_image = torch.clamp(viewpoint.original_image, 0.0, 1.0)
                        l1_test += l1_loss(image, gt_image).mean().double()
                        psnr_test += psnr(image, gt_image).mean().double()
                    return l1_test / len(cameras), psnr_test / len(cameras)
                """),
            dedent("""\
                import porter_runtime
                import torch


                def training_report(iteration, l1_loss, psnr, cameras, render):
                    l1_test = 0.0
                    psnr_test = 0.0
                    for viewpoint in cameras:
                        image = torch.clamp(render(viewpoint)["render"], 0.0, 1.0)
                        gt_image = torch.clamp(viewpoint.original_image, 0.0, 1.0)
                        l1_test += porter_runtime.double_here(l1_loss(image, gt_image).mean())
                        psnr_test += porter_runtime.double_here(psnr(image, gt_image).mean())
                    return l1_test / len(cameras), psnr_test / len(cameras)
                """),
        ),
        Example(  # a careful log-sum-exp in a loss, under an alias of torch
            dedent("""\
                import torch as th


                def log_partition(logits):
                    return th.logsumexp(logits.double(), dim=-1).float()
                """),
            dedent("""\
                import porter_runtime
                import torch as th


                def log_partition(logits):
                    return th.logsumexp(porter_runtime.double_here(logits), dim=-1).float()
                """),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        project = ctx.project  # a class anywhere in the tree with its own `double()`: its objects have no `.to(dtype)`
        self._own = bool(_DEFINES_DOUBLE.search(ctx.source)) or (project is not None and project.defines_method("double"))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "double" or original.args or updated.args:
            return updated  # `updated.args`: an earlier rule (PT606) made it `porter_runtime.double(x)`
        if self._own or self.qualname(func.value) is not None:
            return updated  # the file's own `double` method, or a module's function (`np.double`)
        if self.beside_device_move(original) or on_host(func.value):
            return updated  # next to a move: PT606's; or on the host, where float64 is fine
        if not self.ctx.resolver.imports_under("torch") or not isinstance(updated.func, cst.Attribute):
            return updated  # a file that never imports torch: `.double()` of something else
        receiver = updated.func.value
        if isinstance(receiver, _BARE) and receiver.lpar:
            receiver = receiver.with_changes(lpar=[], rpar=[])  # `(pred == y).double()`: an argument needs none
        new = self.runtime_call("double_here", receiver)
        return self.rewrite(original, new, "MPS has no float64: on an MPS tensor the runtime casts to float32 "
                            "(warned once); on CUDA and for other tensors this is `.double()` as before")
