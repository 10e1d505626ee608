"""A tensor cast to float64 where it lives (PT608): MPS can't hold the result."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.evidence import CallsMethod, InFile, Uses
from porter.rulebase.families.dtypes.host import on_host
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import DeviceMoves

#: What MPS has no kernel for at all (bfloat16 it has from macOS 14: PT604's).
_FLOAT64 = frozenset({"torch.float64", "torch.double", "torch.complex128", "torch.cdouble"})


class Float64Cast(DeviceMoves, Rule):
    """`x.to(torch.float64)` goes through `porter_runtime.to_dtype(x, torch.float64)`.

    What:
    Rewrites a cast of an existing tensor to float64 or complex128 with no move,
    `x.to(torch.float64)` / `x.to(dtype=torch.double)` (the dtype its only argument), to
    `porter_runtime.to_dtype(x, torch.float64)`. A receiver that is visibly on the host
    (`x.cpu()`, `torch.from_numpy(a)`, `torch.tensor(...)`) is left alone.

    Why:
    Research code upcasts for a numerically careful step (HRM's stablemax loss takes
    `log_stablemax(logits.to(torch.float64))`, SOAP's `eigh(m.to(torch.float64))`). The
    tensor lives on the device, and on a Mac the cast raises `TypeError: Cannot convert
    a MPS Tensor to float64 dtype as the MPS framework doesn't support float64`.

    Fix safety:
    Safe. `to_dtype(x, dtype)` is `x.to(dtype)` on CUDA and for anything not on MPS (a
    CPU tensor keeps float64 on a Mac too). Only an MPS tensor, where the original
    raises, is cast to float32 / complex64 instead, with one warning.

    A module constant bound once to such a dtype (StyleGAN's and EG3D's training stats:
    `_counter_dtype = torch.float64`, then `moments.to(_counter_dtype)`) is followed.

    Known limits:
    `.double()` is PT606's next to a move and PT612's elsewhere; a move and a cast in one call PT604's. A
    dtype reached through a function argument or an attribute is not followed.
    """

    code = "PT608"
    name = "float64-cast"
    safety = Safety.SAFE
    needs = Needs(targets=_FLOAT64, evidence=CallsMethod("to"),
                  # a constant at the top of the file, cast to in a function that never names float64
                  unit=Uses(_FLOAT64) | (InFile(Uses(_FLOAT64)) & CallsMethod("to")))

    valid = [
        "import torch\ny = x.to(torch.float32)\n",
        "import torch\ny = x.cpu().to(torch.float64)\n",
        "import torch\ny = torch.from_numpy(a).to(torch.float64)\n",
        "import torch\ny = x.to(device, torch.float64)\n",  # a move too: PT604's
        "import torch\ny = x.cuda().to(torch.float64)\nz = x.to(torch.double).to('cuda')\n",  # next to a move: PT604's
        "import torch\ny = x.to(torch.float64, non_blocking=True)\n",
        "import numpy as torch\ny = x.to(torch.float64)\n",
        "def upcast(x, torch):\n    return x.to(torch.float64)\n",  # `torch` is a parameter here
        "import porter_runtime\nimport torch\ny = porter_runtime.to_dtype(x, torch.float64)\n",
    ]
    invalid = [
        Example(  # HRM's stablemax cross-entropy: the logits come from the model, on the device
            dedent("""\
                import torch


                def stablemax_cross_entropy(logits, labels, ignore_index: int = -100):
                    logprobs = log_stablemax(logits.to(torch.float64), dim=-1)
                    valid_mask = labels != ignore_index
                    return logprobs, valid_mask
                """),
            dedent("""\
                import porter_runtime
                import torch


                def stablemax_cross_entropy(logits, labels, ignore_index: int = -100):
                    logprobs = log_stablemax(porter_runtime.to_dtype(logits, torch.float64), dim=-1)
                    valid_mask = labels != ignore_index
                    return logprobs, valid_mask
                """),
            line=5, message="MPS has no float64",
        ),
        Example(  # StyleGAN3 / EG3D torch_utils/training_stats.py: the dtype is a module constant
            dedent("""\
                import torch

                _counter_dtype = torch.float64


                def report(name, value):
                    elems = value.detach().flatten().to(torch.float32)
                    moments = torch.stack([torch.ones_like(elems).sum(), elems.sum(), elems.square().sum()])
                    moments = moments.to(_counter_dtype)
                    return name, moments
                """),
            dedent("""\
                import porter_runtime
                import torch

                _counter_dtype = torch.float64


                def report(name, value):
                    elems = value.detach().flatten().to(torch.float32)
                    moments = torch.stack([torch.ones_like(elems).sum(), elems.sum(), elems.square().sum()])
                    moments = porter_runtime.to_dtype(moments, _counter_dtype)
                    return name, moments
                """),
        ),
        Example(
            "from torch import float64\nscores = attn.to(float64).softmax(-1)\n",
            "import porter_runtime\nfrom torch import float64\nscores = porter_runtime.to_dtype(attn, float64).softmax(-1)\n",
        ),
        Example(
            "import torch as t\n_, Q = t.linalg.eigh(m.to(dtype=t.double) + 1e-30 * t.eye(m.shape[0], device=m.device))\n",
            "import porter_runtime\nimport torch as t\n"
            "_, Q = t.linalg.eigh(porter_runtime.to_dtype(m, t.double) + 1e-30 * t.eye(m.shape[0], device=m.device))\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not (isinstance(func, cst.Attribute) and func.attr.value == "to") or len(original.args) != 1:
            return updated
        arg = original.args[0]
        if arg.star or (arg.keyword is not None and arg.keyword.value != "dtype"):
            return updated
        if not self._float64(arg.value) or self.qualname(func.value) is not None:
            return updated  # not a float64 dtype, or a module's `to(...)` function
        if self.beside_device_move(original) or on_host(func.value):
            return updated  # next to a move: PT604's `supported_dtype`; or on the host, where float64 is fine
        assert isinstance(updated.func, cst.Attribute)
        new = self.runtime_call("to_dtype", updated.func.value, updated.args[0].value)
        return self.rewrite(original, new, "MPS has no float64: on an MPS tensor the runtime casts to float32 "
                            "(warned once); on CUDA and for other tensors this is `.to(dtype)` as before")


    def _float64(self, node: cst.BaseExpression) -> bool:
        if self.qualname(node) in _FLOAT64:
            return True
        if not isinstance(node, cst.Name) or node.value not in self._top_level():
            return False
        # A second binding of the constant inside a definition the engine left out would be
        # invisible to the count: only then does the whole file have to be read.
        self.ctx.see_all_uses_of([node.value])
        return node.value in self._constants()

    def _top_level(self) -> frozenset[str]:
        """Names a top-level ``NAME = <float64 dtype>`` binds (each may be bound again elsewhere)."""
        if not hasattr(self, "_assigned_at_top"):
            found = set()
            for stmt in self.ctx.module.body:
                if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 \
                        and isinstance(stmt.body[0], cst.Assign) and len(stmt.body[0].targets) == 1:
                    target = stmt.body[0].targets[0].target
                    if isinstance(target, cst.Name) and self.qualname(stmt.body[0].value) in _FLOAT64:
                        found.add(target.value)
            self._assigned_at_top = frozenset(found)
        return self._assigned_at_top

    def _constants(self) -> frozenset[str]:
        """Names the module binds once, at its top level, to a float64 dtype."""
        if not hasattr(self, "_found"):
            bound: dict[str, int] = {}
            for target in _assigned_names(self.ctx.module):
                bound[target] = bound.get(target, 0) + 1
            self._found = frozenset(name for name in self._top_level() if bound.get(name) == 1)
        return self._found


def _assigned_names(module: cst.Module) -> list[str]:
    """Every name an assignment, augmented assignment, ``for``, ``with`` or ``global``
    statement in the module binds (a field walk)."""
    from porter.rulebase.walk import code_children

    names, stack = [], [module]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name):
            names.append(node.target.value)
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
            names.append(node.target.value)
        elif isinstance(node, cst.For) and isinstance(node.target, cst.Name):
            names.append(node.target.value)
        elif isinstance(node, cst.Global):
            names.extend(n.name.value for n in node.names)
        stack.extend(code_children(node))
    return names
