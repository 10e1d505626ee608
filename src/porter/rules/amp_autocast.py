"""CUDA autocast (``torch.cuda.amp.autocast``, ``torch.autocast("cuda")``), called or used as a value."""

from __future__ import annotations

import re
from typing import Optional

import libcst as cst

from porter.rulebase.families.compile_amp_shared import is_cuda_type, without
from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
    has_star_args,
    keyword,
    positional,
)


# ``torch.set_autocast_dtype("cuda", ...)`` and friends change what an autocast
# without a dtype means; the legacy class's defaults would then differ.
_GLOBAL_AUTOCAST = re.compile(rb"set_autocast_(?:gpu_)?dtype|set_autocast_cache_enabled")


def _keywords(call: cst.Call, names: tuple[str, ...]) -> Optional[list[cst.Arg]]:
    """The arguments with positional ones turned into keywords from ``names``."""
    out = []
    for index, arg in enumerate(call.args):
        if arg.keyword is None:
            if index >= len(names):
                return None
            arg = arg.with_changes(keyword=cst.Name(names[index]), equal=_EQ)
        out.append(arg)
    return out


_AUTOCAST_CLASSES = {"torch.cuda.amp.autocast", "torch.cuda.amp.autocast_mode.autocast"}
_AUTOCAST_DEVICE = {"torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"}
_LEGACY_ORDER = ("enabled", "dtype", "cache_enabled")  # torch.cuda.amp.autocast's positions


class CudaAutocast(Rule):
    """CUDA autocast becomes `porter_runtime.autocast(...)`.

    What:
    Rewrites `torch.cuda.amp.autocast(...)`, `torch.autocast("cuda", ...)`,
    `torch.autocast(device_type="cuda", ...)` and `torch.amp.autocast("cuda", ...)`
    into `porter_runtime.autocast(...)`, keeping `dtype`, `enabled` and
    `cache_enabled` (positional arguments of the legacy class become keywords, as
    its order differs).

    Why:
    Off CUDA, CUDA autocast warns and disables itself, so training silently runs
    in float32. The runtime autocasts on the device it resolves, keeping CUDA's
    float16 (the output dtype that code relies on) wherever torch has a loss scaler
    for it (CPU; MPS from torch 2.8); elsewhere bfloat16 stands in, with one warning.

    Fix safety:
    Safe. On CUDA `porter_runtime.autocast(dtype, enabled, cache_enabled)` is
    `torch.autocast("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)`.
    The legacy class defaults to float16 and a cache; `torch.autocast("cuda")`
    defaults to the global autocast dtype and cache setting, which are float16 and
    on unless a program changes them, so a file that calls `set_autocast_dtype` or
    `set_autocast_cache_enabled` gets a finding instead.

    Known limits:
    An autocast whose device type is not a literal (`torch.autocast(device.type)`)
    or is not CUDA is left alone. Under TorchScript the legacy class is a no-op
    and the runtime's is not scriptable. `isinstance(x, torch.cuda.amp.autocast)`
    no longer holds for the new object. `*args` / `**kwargs` calls are findings.
    """

    code = "PT502"
    name = "cuda-autocast"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=frozenset(_AUTOCAST_CLASSES | _AUTOCAST_DEVICE))

    valid = [
        "import torch\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n    pass\n",
        "import torch\nwith torch.autocast(device_type=device.type):\n    pass\n",
        "def f(torch):\n    with torch.cuda.amp.autocast():\n        pass\n",
        "import mylib as torch\nwith torch.autocast('cuda'):\n    pass\n",
    ]
    invalid = [
        Example(
            "import torch\nwith torch.cuda.amp.autocast():\n    loss = model(x)\n",
            "import porter_runtime\nwith porter_runtime.autocast():\n    loss = model(x)\n",
        ),
        Example(
            "import torch as t\nwith t.autocast(\"cuda\", dtype=t.bfloat16, enabled=use_amp):\n    pass\n",
            "import porter_runtime\nimport torch as t\nwith porter_runtime.autocast(dtype=t.bfloat16, enabled=use_amp):\n    pass\n",
        ),
        Example(
            "from torch.cuda.amp import autocast\n\n@autocast(use_amp, cache_enabled=False)\ndef forward(x):\n    return x\n",
            "import porter_runtime\n\n@porter_runtime.autocast(enabled=use_amp, cache_enabled=False)\ndef forward(x):\n    return x\n",
        ),
        Example(
            "import torch\nwith torch.autocast(device_type='cuda', dtype=torch.float16):\n    pass\n",
            "import porter_runtime\nimport torch\nwith porter_runtime.autocast(dtype=torch.float16):\n    pass\n",
        ),
        Example(
            "from torch import amp\nwith amp.autocast('cuda', torch.bfloat16):\n    pass\n",
            "import porter_runtime\nwith porter_runtime.autocast(torch.bfloat16):\n    pass\n",
        ),
        Example(
            "import torch\nwith torch.autocast(\n    \"cuda\",\n    dtype=torch.bfloat16,\n):\n    pass\n",
            "import porter_runtime\nimport torch\nwith porter_runtime.autocast(\n    dtype=torch.bfloat16,\n):\n    pass\n",
        ),
        Example("import torch\ntorch.set_autocast_dtype('cuda', torch.bfloat16)\nwith torch.cuda.amp.autocast():\n    pass\n"),
        Example("import torch\nwith torch.autocast('cuda', **amp_args):\n    pass\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is None:
            return updated
        if target in _AUTOCAST_CLASSES:
            args = self._legacy_args(original, updated)
        else:
            args = self._device_args(original, updated)
        if args is None:
            return updated
        new = updated.with_changes(func=self.runtime("autocast"), args=args)
        return self.rewrite(original, new, "CUDA autocast now autocasts on the runtime's device")

    def _legacy_args(self, original: cst.Call, updated: cst.Call) -> Optional[list[cst.Arg]]:
        args = None if has_star_args(updated) else _keywords(updated, _LEGACY_ORDER)
        if args is None:
            self._flag(original)
        elif _GLOBAL_AUTOCAST.search(self.ctx.source):
            self.flag(original, "this file changes the global autocast dtype or cache setting, so "
                      "`torch.autocast(\"cuda\")` defaults would differ from the legacy class's",
                      suggestion="porter_runtime.autocast(dtype=torch.float16, cache_enabled=True)")
            return None
        return args

    def _device_args(self, original: cst.Call, updated: cst.Call) -> Optional[list[cst.Arg]]:
        named = keyword(updated, "device_type")
        given = positional(updated)
        device = named if named is not None else (given[0] if given and updated.args[0] is given[0] else None)
        if device is None or device.star or not is_cuda_type(device.value):
            return None
        if has_star_args(updated):
            self._flag(original)
            return None
        return without(list(updated.args), device)

    def _flag(self, original: cst.Call) -> None:
        self.flag(original, "CUDA autocast with unpacked arguments can't be rewritten exactly",
                  suggestion="porter_runtime.autocast(dtype=..., enabled=..., cache_enabled=...)")


_EQ = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))


class CudaAutocastValue(Rule):
    """`torch.cuda.amp.autocast` used as a value becomes `porter_runtime.cuda_amp_autocast`.

    What:
    Rewrites a reference to the class `torch.cuda.amp.autocast` that is not called
    on the spot: `partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)`,
    `ctx = torch.cuda.amp.autocast if use_amp else nullcontext`, a default argument.
    Calls are PT502's.

    Why:
    The value is called later, off CUDA too, where CUDA autocast warns and disables
    itself, so training silently runs in float32 on a Mac.

    Fix safety:
    Safe. `porter_runtime.cuda_amp_autocast(enabled=True, dtype=torch.float16,
    cache_enabled=True)` has the legacy class's parameters in its order, so any later
    call binds its arguments as before, and on CUDA it returns
    `torch.autocast("cuda", dtype=..., enabled=..., cache_enabled=...)`, which is
    what the class constructs.

    Known limits:
    `isinstance(x, torch.cuda.amp.autocast)` and subclasses of it are left alone.
    """

    code = "PT505"
    name = "cuda-autocast-value"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset(_AUTOCAST_CLASSES))

    valid = [
        "import torch\nwith torch.cuda.amp.autocast():\n    pass\n",  # a call: PT502
        "def f(torch):\n    return partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)\n",
        "import mylib as torch\nctx = torch.cuda.amp.autocast\n",
        "import torch\nok = isinstance(ctx, torch.cuda.amp.autocast)\n",
    ]
    invalid = [
        Example(
            "from functools import partial\n\nimport torch\n\n"
            "amp_ctx = partial(torch.cuda.amp.autocast, dtype=torch.bfloat16)\n",
            "import porter_runtime\nfrom functools import partial\n\nimport torch\n\n"
            "amp_ctx = partial(porter_runtime.cuda_amp_autocast, dtype=torch.bfloat16)\n",
        ),
        Example(
            "from contextlib import nullcontext\nimport torch as t\n\n"
            "ctx = t.cuda.amp.autocast if use_amp else nullcontext\n",
            "import porter_runtime\nfrom contextlib import nullcontext\n\n"
            "ctx = porter_runtime.cuda_amp_autocast if use_amp else nullcontext\n",
        ),
        Example(
            "from torch.cuda.amp import autocast\n\ndef run(model, x, amp=autocast):\n    with amp(True):\n"
            "        return model(x)\n",
            "import porter_runtime\n\ndef run(model, x, amp=porter_runtime.cuda_amp_autocast):\n"
            "    with amp(True):\n        return model(x)\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._skip: set[int] = set()  # called on the spot, or a class test

    def visit_Call(self, node: cst.Call) -> None:
        self._skip.add(id(node.func))
        if isinstance(node.func, cst.Name) and node.func.value in ("isinstance", "issubclass"):
            self._skip.update(id(a.value) for a in node.args)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._skip.update(id(base.value) for base in node.bases)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._value(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return self._value(original, updated)

    def _value(self, original, updated) -> cst.BaseExpression:
        if id(original) in self._skip or self.matches(original) is None:
            return updated
        return self.rewrite(original, self.runtime("cuda_amp_autocast"),
                            "CUDA autocast used as a value now autocasts on the runtime's device")
