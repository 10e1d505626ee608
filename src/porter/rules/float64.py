"""float64 and complex128 created on a device variable: MPS can hold neither."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety, keyword, string_value
from porter.rulebase.syntax import is_device_expr

#: The dtypes no MPS release can hold (bfloat16 can, from macOS 14).
FLOAT64_DTYPES = frozenset({"torch.float64", "torch.double", "torch.complex128", "torch.cdouble"})


def _visibly_cpu(rule: Rule, node: cst.BaseExpression) -> bool:
    """``"cpu"`` or ``torch.device("cpu")``: the host, on every machine."""
    if string_value(node) is not None:
        return True  # a literal: "cpu" here, while "cuda" literals are PT604's
    if isinstance(node, cst.Call) and rule.qualname(node.func) == "torch.device":
        first = node.args[0].value if node.args else None
        return first is not None and string_value(first) is not None
    return False


class Float64OnDevice(Rule):
    """A float64 / complex128 tensor created on a device held in a variable is reported.

    What:
    Reports a torch call with `dtype=torch.float64` (`torch.double`,
    `torch.complex128`, `torch.cdouble`) and a `device=` that is neither a literal
    nor `torch.device("...")`: `torch.full(shape, 0.5, dtype=torch.float64,
    device=device)`, `torch.zeros(n, dtype=torch.double, device=x.device)`.

    Why:
    When the variable holds the MPS device (what `porter_runtime.device()` returns on
    a Mac), MPS raises `TypeError: Cannot convert a MPS Tensor to float64 dtype as the
    MPS framework doesn't support float64. Please use float32 instead.` The code runs
    on CUDA and CPU, so nothing shows the problem until it runs on a Mac
    (`porter verify --emulate mps` shows it).

    Fix safety:
    Review only: the variable may hold the CPU, where float64 is fine and may be
    wanted. `dtype=porter_runtime.supported_dtype(torch.float64, device)` keeps
    float64 on CUDA and CPU and uses float32 only when `device` is MPS (one warning).

    In code run only with several GPUs (`if opts.num_gpus > 1:`, broadcasting a
    metric between GPU processes) it is a note: a Mac has one GPU.

    Known limits:
    Only calls that name both the dtype and the device; a float64 tensor moved to
    the device later is PT605 / PT606's, or seen only when the code runs.
    """

    code = "PT607"
    name = "float64-on-device"
    safety = Safety.REVIEW
    needs = Needs(targets=FLOAT64_DTYPES)

    valid = [
        "import torch\nx = torch.zeros(3, dtype=torch.float64)\n",
        "import torch\nx = torch.zeros(3, dtype=torch.float64, device='cpu')\n",
        "import torch\nx = torch.zeros(3, dtype=torch.float64, device=torch.device('cpu'))\n",
        "import torch\nx = torch.zeros(3, dtype=torch.float32, device=device)\n",
        "def f(torch, device):\n    return torch.zeros(3, dtype=torch.float64, device=device)\n",
        "import numpy as torch\nx = torch.zeros(3, dtype=torch.float64, device=device)\n",
        "import porter_runtime\nimport torch\n"
        "x = torch.zeros(3, dtype=porter_runtime.supported_dtype(torch.float64, device), device=device)\n",
    ]
    invalid = [
        Example("import torch\nnoise = torch.full((4, 4), 0.5, dtype=torch.float64, device=device)\n",
                line=2, message="MPS has no float64"),
        Example("import torch as t\ny = t.randn(8, dtype=t.cdouble, device=x.device)\n", line=2),
        Example(dedent("""\
            from torch import double, zeros

            def buffers(device):
                return zeros(16, dtype=double, device=device)
            """), line=4, message="torch.double tensor created on `device`"),
        Example(  # only with several GPUs (a Mac has one): listed as a note
            dedent("""\
                import torch


                def calc_metric(metric, opts):
                    results = metric(opts)
                    for key, value in list(results.items()):
                        if opts.num_gpus > 1:
                            value = torch.as_tensor(value, dtype=torch.float64, device=opts.device)
                            torch.distributed.broadcast(tensor=value, src=0)
                            value = float(value.cpu())
                        results[key] = value
                    return results
                """),
            line=8, message="for information: code run only with several GPUs"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.qualname(original.func)
        if name is None or not name.startswith("torch."):
            return updated
        dtype, device = keyword(original, "dtype"), keyword(original, "device")
        if dtype is None or device is None or self.qualname(dtype.value) not in FLOAT64_DTYPES:
            return updated
        if is_device_expr(self, device.value) or _visibly_cpu(self, device.value):
            return updated  # a CUDA/runtime device is PT604's rewrite; the CPU holds float64
        shown = cst.Module([]).code_for_node(device.value)
        kind = self.qualname(dtype.value)
        self.flag(original, f"{kind} tensor created on `{shown}`: MPS has no float64 (complex128 neither); "
                  "if that is the MPS device, a Mac raises `TypeError: Cannot convert a MPS Tensor to float64 "
                  "dtype`", suggestion=f"dtype=porter_runtime.supported_dtype({kind}, {shown})")
        return updated
