"""`"cuda" if torch.cuda.is_available() else "cpu"`: the device choice becomes the runtime's (PT201)."""

from __future__ import annotations

from textwrap import dedent
from typing import Union

import libcst as cst

from porter.rulebase.conditions.availability_checks import IS_AVAILABLE
from porter.rulebase.families.availability.choices import (
    Choice,
    accelerator_test,
    gated_choice,
    statement_choice,
    ternary_choice,
    torch_device_arg,
)
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import index_args


class CudaAvailableDevice(Rule):
    """`"cuda" if torch.cuda.is_available() else "cpu"` becomes the runtime's device.

    What:
    Rewrites the device choices that test `torch.cuda.is_available()`:
    `"cuda" if torch.cuda.is_available() else "cpu"` → `porter_runtime.device_str()`;
    `torch.device("cuda" if torch.cuda.is_available() else "cpu")` and
    `torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")` →
    `porter_runtime.device()`; and an `if torch.cuda.is_available(): d = "cuda"` /
    `else: d = "cpu"` statement → `d = porter_runtime.device_str()`. The fallback may
    be "cpu", "xpu" or a chain of them (`else "xpu" if ... else "cpu"`, `elif`), and
    `not torch.cuda.is_available()` with the branches swapped is understood. A
    ternary that also asks the user (`"cuda" if torch.cuda.is_available() and
    args.cuda else "cpu"`) keeps its other conditions: `porter_runtime.device_str()
    if porter_runtime.is_accelerator_available() and args.cuda else "cpu"`. A
    choice that already picks "mps" is right on a Mac and is left alone (PT202
    does not report it either). The result keeps the original's type: a string
    stays a string.

    Why:
    On a Mac the idiom picks the CPU and never uses the GPU.

    Fix safety:
    Safe. With CUDA the original picks "cuda" (or `torch.device("cuda")`) and the
    runtime returns exactly that device, `device_str()` is `"cuda"`, and an index
    (`"cuda:1"`) is kept. Without CUDA the original picked the fallback; the runtime
    picks MPS, then XPU, then CPU, or what `PORTER_DEVICE` names: the intended port.
    With other conditions, `is_accelerator_available()` is True exactly where
    `torch.cuda.is_available()` is on a CUDA machine, and is asked first, as before.

    Known limits:
    Only literal device strings are understood; `f"cuda:{rank}"` and conditions on a
    variable (`"cuda" if use_cuda else "cpu"`) are left alone (PT202 reports the
    variable). An if/else statement with comments inside is left alone, to keep them.
    """

    code = "PT201"
    name = "cuda-available-device"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({IS_AVAILABLE}))

    valid = [
        "def pick(torch):\n    return 'cuda' if torch.cuda.is_available() else 'cpu'\n",
        "import mylib as torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
        "import torch\ndevice = 'cuda' if use_cuda else 'cpu'\n",
        "import torch\nif x.device.type == 'cuda':\n    y = 1\n",
        "import torch\nif torch.cuda.is_available():\n    device = 'cuda'  # fast\nelse:\n    device = 'cpu'\n",
        # "or" means something else: CUDA is not required for the CUDA arm
        "import torch\ndevice = 'cuda' if torch.cuda.is_available() or args.force else 'cpu'\n",
        "import torch\ndevice = 'cuda' if args.cuda and not torch.cuda.is_available() else 'cpu'\n",
        # already picks MPS on a Mac: right as written
        dedent("""\
            import torch

            device = torch.device("cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu")
            """),
        dedent("""\
            from torch.cuda import is_available

            if is_available():
                args.device = 'cuda'
            elif torch.backends.mps.is_available():
                args.device = 'mps'
            else:
                args.device = 'cpu'
            """),
    ]
    invalid = [
        Example(
            "import torch\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\n",
            "import porter_runtime\ndevice = porter_runtime.device_str()\n",
        ),
        Example(
            "import torch as t\ndevice = t.device(\"cuda\" if t.cuda.is_available() else \"cpu\")\n",
            "import porter_runtime\ndevice = porter_runtime.device()\n",
        ),
        Example(
            "import torch\ndev = torch.device('cuda:0') if torch.cuda.is_available() else torch.device('cpu')\n",
            "import porter_runtime\ndev = porter_runtime.device(0)\n",
        ),
        Example(
            "from torch.cuda import is_available\n\n# pick the device\nif is_available():\n    args.device = 'cuda'\n"
            "elif args.xpu:\n    args.device = 'xpu'\nelse:\n    args.device = 'cpu'\nrun(args)\n",
            "import porter_runtime\n\n# pick the device\nargs.device = porter_runtime.device_str()\nrun(args)\n",
        ),
        Example(  # cleanrl's scripts: the user's --cuda flag stays in charge
            dedent("""\
                import torch

                device = torch.device("cuda" if torch.cuda.is_available() and args.cuda else "cpu")
                """),
            dedent("""\
                import porter_runtime
                import torch

                device = torch.device(porter_runtime.device_str() if porter_runtime.is_accelerator_available() and args.cuda else "cpu")
                """),
        ),
        Example(
            dedent("""\
                from torch.cuda import is_available

                dev = "cuda:0" if use_gpu and is_available() and not cfg.cpu else "cpu"
                """),
            dedent("""\
                import porter_runtime

                dev = porter_runtime.device_str(0) if use_gpu and porter_runtime.is_accelerator_available() and not cfg.cpu else "cpu"
                """),
        ),
        Example(
            "import torch\nd = 'cpu' if not torch.cuda.is_available() else 'cuda'\n",
            "import porter_runtime\nd = porter_runtime.device_str()\n",
        ),
        Example(
            "import torch\n\ndef get_device():\n    if torch.cuda.is_available():\n        device = torch.device('cuda')\n"
            "    else:\n        device = torch.device('cpu')\n    return device\n",
            "import porter_runtime\n\ndef get_device():\n    device = porter_runtime.device()\n    return device\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._inside_device_call: set[cst.IfExp] = set()

    def visit_Call(self, node: cst.Call) -> None:
        inner = torch_device_arg(self, node)
        if isinstance(inner, cst.IfExp) and gated_choice(self, inner) is None:
            self._inside_device_call.add(inner)  # the whole torch.device(...) is replaced

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        inner = torch_device_arg(self, original)
        if not isinstance(inner, cst.IfExp):
            return updated
        choice = ternary_choice(self, inner)
        if choice is None or choice[0] != "str":
            return updated
        new = self.runtime_call("device", *index_args(choice[1]))
        return self.rewrite(original, new, "the CUDA-or-CPU choice now resolves to the best device here")

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        if original in self._inside_device_call:
            return updated
        choice = ternary_choice(self, original)
        if choice is None:
            return self._gated(original, updated)
        new = self._value(choice).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return self.rewrite(original, new, "the CUDA-or-CPU choice now resolves to the best device here")

    def _gated(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        """The choice keeps its other conditions (``and args.cuda``): only the test of
        CUDA and the CUDA device become the runtime's."""
        choice = gated_choice(self, original)
        if choice is None:
            return updated
        new = updated.with_changes(body=self._value(choice).with_changes(lpar=updated.body.lpar,
                                                                         rpar=updated.body.rpar),
                                   test=accelerator_test(self, original.test, updated.test))
        return self.rewrite(original, new, "the accelerator choice now takes the best device here, "
                                           "under the same other conditions")

    def leave_If(self, original: cst.If, updated: cst.If) -> Union[cst.BaseStatement, cst.RemovalSentinel]:
        found = statement_choice(self, original)
        if found is None:
            return updated
        assign, choice = found
        stmt = cst.SimpleStatementLine(body=[assign.with_changes(value=self._value(choice))],
                                       leading_lines=original.leading_lines)
        return self.rewrite(original, stmt, "the CUDA-or-CPU choice now resolves to the best device here")

    def _value(self, choice: Choice) -> cst.BaseExpression:
        # A string choice is often a module constant: device_str resolves quietly.
        return self.runtime_call("device_str" if choice[0] == "str" else "device", *index_args(choice[1]))

