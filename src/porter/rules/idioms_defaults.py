"""What a script assumes about the whole process: that a GPU exists
(`assert torch.cuda.is_available()`) and that new tensors go to CUDA
(`torch.set_default_device("cuda")`, `torch.set_default_tensor_type(torch.cuda.FloatTensor)`)."""

from __future__ import annotations

from textwrap import dedent
from typing import Union

import libcst as cst

from porter.rulebase.conditions.availability_checks import IS_AVAILABLE, flag_requirement, requirement
from porter.rulebase.evidence import ReadsFlag, Uses
from porter.rulebase.rule import Example, Needs, Rule, Safety, cuda_spec, string_value
from porter.rulebase.syntax import argument_pair, replace_arg


class CudaRequirement(Rule):
    """`assert torch.cuda.is_available()` becomes `porter_runtime.require_device()`.

    What:
    Rewrites a statement that only requires CUDA: `assert torch.cuda.is_available()`
    (with or without a message) and `if not torch.cuda.is_available():` whose body
    only reports (`print`, `logger.error`, `warnings.warn`) and then stops
    (`raise ...`, `sys.exit(...)`, `exit()`), with no `else`. Both become
    `porter_runtime.require_device("<the original's message>")`. So does `if not
    HAS_CUDA:` of such a body, where `HAS_CUDA` is the module's own availability flag:
    bound once, at its top level, to `torch.cuda.is_available()` and never rebound
    (the flag stays, and PT202 notes it where requirements are all that read it).

    Why:
    On a Mac or a CPU machine the script stops before doing anything, although it
    would run on MPS or the CPU once ported.

    Fix safety:
    Safe. On CUDA the assertion holds and the `if` body never runs; the runtime does
    nothing there either. Elsewhere it is satisfied by the resolved device and says,
    once, on which device the code runs. A formatted message (f-string, `.format`,
    `%`) is passed as a `lambda`, so that, as in the original, it is evaluated only
    where the requirement is not met by CUDA; any other non-string message is
    dropped.

    Known limits:
    Requirements mixed with other conditions (`assert torch.cuda.is_available() and
    n_gpu > 1`), an `if` with an `else`, and bodies with comments or other code are
    left to PT202, which reports them.
    """

    code = "PT903"
    name = "cuda-requirement"
    safety = Safety.SAFE
    # a unit that reads the module's own flag (`if not HAS_CUDA: raise`) too
    needs = Needs(targets=frozenset({IS_AVAILABLE}), unit=Uses(IS_AVAILABLE) | ReadsFlag(IS_AVAILABLE))

    valid = [
        "def f(torch):\n    assert torch.cuda.is_available()\n",
        "import mylib as torch\nassert torch.cuda.is_available()\n",
        "import torch\nif not torch.cuda.is_available():\n    args.amp = False\n",
        "import torch\nif not torch.cuda.is_available():\n    raise SystemExit(1)\nelse:\n    go()\n",
        "import torch\nassert torch.cuda.is_available() and n > 1\n",
        # a flag rebound later is not the module's availability flag
        "import torch\nHAS_CUDA = torch.cuda.is_available()\nHAS_CUDA = HAS_CUDA and n > 0\n"
        "if not HAS_CUDA:\n    raise RuntimeError('needs CUDA')\n",
        # a parameter of the flag's name is the caller's value, not the module's flag
        "import torch\nHAS_CUDA = torch.cuda.is_available()\ndef f(x, HAS_CUDA=True):\n    if not HAS_CUDA:\n"
        "        raise RuntimeError('needs CUDA')\n",
        # a flag set inside a function
        "import torch\ndef f():\n    ok = torch.cuda.is_available()\n    if not ok:\n        raise SystemExit(1)\n",
    ]
    invalid = [
        Example(
            "import torch\n\nassert torch.cuda.is_available(), 'this script needs a GPU'\nmain()\n",
            "import porter_runtime\n\nporter_runtime.require_device('this script needs a GPU')\nmain()\n",
        ),
        Example(
            "import sys\nimport torch as t\n\n# no GPU, no training\nif not t.cuda.is_available():\n"
            "    print('CUDA is required')\n    sys.exit(1)\n",
            "import porter_runtime\n\n# no GPU, no training\n"
            "porter_runtime.require_device('CUDA is required')\n",
        ),
        Example(
            "from torch.cuda import is_available\n\ndef main():\n    if not is_available():\n"
            "        raise RuntimeError(\"No GPU found\")\n    train()\n",
            "import porter_runtime\n\ndef main():\n    porter_runtime.require_device(\"No GPU found\")\n    train()\n",
        ),
        Example(  # the module's own flag, read by a requirement in the function that sets up training
            dedent("""\
            import torch
            import torch.distributed as dist

            HAS_CUDA = torch.cuda.is_available()


            def setup():
                if not HAS_CUDA:
                    raise RuntimeError("distributed training requires CUDA")
                dist.init_process_group("nccl")
            """),
            dedent("""\
            import porter_runtime
            import torch
            import torch.distributed as dist

            HAS_CUDA = torch.cuda.is_available()


            def setup():
                porter_runtime.require_device("distributed training requires CUDA")
                dist.init_process_group("nccl")
            """),
        ),
        Example(
            "import torch\nassert torch.cuda.is_available(), f'{n} GPUs'\n",
            "import porter_runtime\nporter_runtime.require_device(lambda: f'{n} GPUs')\n",
        ),
        Example(
            "import torch\nassert torch.cuda.is_available(), msg\n",
            "import porter_runtime\nporter_runtime.require_device()\n",
        ),
    ]

    def leave_Assert(self, original: cst.Assert, updated: cst.Assert) -> cst.BaseSmallStatement:
        found = requirement(self, original)
        if found is None:
            return updated
        return self.rewrite(original, cst.Expr(self._call(found[0])), _MESSAGE)

    def leave_If(self, original: cst.If, updated: cst.If) -> Union[cst.BaseStatement, cst.RemovalSentinel]:
        found = requirement(self, original) or flag_requirement(self, original)
        if found is None:
            return updated
        stmt = cst.SimpleStatementLine(body=[cst.Expr(self._call(found[0]))], leading_lines=original.leading_lines)
        return self.rewrite(original, stmt, _MESSAGE)

    def _call(self, message) -> cst.Call:
        return self.runtime_call("require_device", *([message] if message is not None else []))


_MESSAGE = "a CUDA requirement is now met by the device the runtime resolves (MPS, XPU or CPU off CUDA)"

_CUDA_TYPES = frozenset(f"torch.cuda.{t}Tensor" for t in ("Float", "Double", "Half", "BFloat16"))


class DefaultDevice(Rule):
    """`torch.set_default_device("cuda")` and `set_default_tensor_type(torch.cuda.FloatTensor)` use the runtime's device.

    What:
    Rewrites `torch.set_default_device("cuda")` (or `"cuda:N"`) to
    `torch.set_default_device(porter_runtime.device())`, and
    `torch.set_default_tensor_type(torch.cuda.FloatTensor)` (any CUDA floating type,
    or its name as a string) to `porter_runtime.set_default_tensor_type(...)`, the
    same argument. In a file with such a call, `torch.set_default_tensor_type` of a
    CPU type (the usual reset) goes through the runtime too.

    Why:
    Model code that relies on a CUDA default places every new tensor on CUDA, and
    fails without it: `Torch not compiled with CUDA enabled`, `type
    torch.cuda.FloatTensor not available`.

    Fix safety:
    Safe. `set_default_device` turns its argument into `torch.device(...)`, and on
    CUDA the runtime's device is exactly that one. On CUDA
    `porter_runtime.set_default_tensor_type` calls `torch.set_default_tensor_type`
    with the same argument; elsewhere it sets the type's dtype (float32 for float64
    on MPS, with a warning) and the resolved default device, as torch recommends in
    place of the deprecated call.

    Known limits:
    `with torch.device("cuda"):` blocks are PT002's. A type held in a variable is
    left alone; PT602 also reports `torch.cuda.FloatTensor` used as a value.
    """

    code = "PT904"
    name = "default-device"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({"torch.set_default_device", "torch.set_default_tensor_type"}))

    valid = [
        "import torch\ntorch.set_default_device('cpu')\n",
        "def f(torch):\n    torch.set_default_device('cuda')\n",
        "import mylib as torch\ntorch.set_default_tensor_type(torch.cuda.FloatTensor)\n",
        "import torch\ntorch.set_default_tensor_type(torch.DoubleTensor)\n",
    ]
    invalid = [
        Example(
            "import torch\ntorch.set_default_device('cuda')\n",
            "import porter_runtime\nimport torch\ntorch.set_default_device(porter_runtime.device())\n",
        ),
        Example(
            "import torch as t\n\nt.set_default_tensor_type(t.cuda.FloatTensor)\nrun()\nt.set_default_tensor_type(t.FloatTensor)\n",
            "import porter_runtime\nimport torch as t\n\nporter_runtime.set_default_tensor_type(t.cuda.FloatTensor)\nrun()\n"
            "porter_runtime.set_default_tensor_type(t.FloatTensor)\n",
        ),
        Example(
            "from torch import set_default_device, set_default_tensor_type\nset_default_device(\"cuda:1\")\n"
            "set_default_tensor_type('torch.cuda.HalfTensor')\n",
            "import porter_runtime\nfrom torch import set_default_device\nset_default_device(porter_runtime.device(1))\n"
            "porter_runtime.set_default_tensor_type('torch.cuda.HalfTensor')\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._cuda_default = b"cuda" in ctx.source and b"set_default_tensor_type" in ctx.source

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        old, new = argument_pair(original, updated, "device" if target == "torch.set_default_device" else "t", 0)
        if old is None or old.star:
            return updated
        if target == "torch.set_default_device":
            spec = cuda_spec(old.value)
            if spec is None:
                return updated
            device = self.runtime_call("device", *([cst.Integer(str(spec[0]))] if spec[0] is not None else []))
            return self.rewrite(original, replace_arg(updated, new, device), _DEFAULT)
        if target == "torch.set_default_tensor_type" and self._is_type(old.value):
            return self.rewrite(original, updated.with_changes(func=self.runtime("set_default_tensor_type")), _DEFAULT)
        return updated

    def _is_type(self, node: cst.BaseExpression) -> bool:
        name = string_value(node) or self.qualname(node) or ""
        if name in _CUDA_TYPES:
            return True
        # A CPU type resets a CUDA default: only where this file set one.
        return self._cuda_default and name.startswith("torch.") and name.endswith("Tensor") and name.count(".") == 1


_DEFAULT = "new tensors now go to the runtime's device instead of a CUDA default"
