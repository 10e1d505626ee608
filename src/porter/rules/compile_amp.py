"""``torch.compile`` and CUDA mixed precision (autocast, GradScaler, custom_fwd/bwd)."""

from __future__ import annotations

import re
from typing import Optional, Sequence

import libcst as cst

from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
    has_star_args,
    keyword,
    positional,
    string_value,
)

# ``torch.set_autocast_dtype("cuda", ...)`` and friends change what an autocast
# without a dtype means; the legacy class's defaults would then differ.
_GLOBAL_AUTOCAST = re.compile(rb"set_autocast_(?:gpu_)?dtype|set_autocast_cache_enabled")


def _is_cuda_type(node: Optional[cst.CSTNode]) -> bool:
    """A literal ``"cuda"`` device type (autocast and GradScaler take no index)."""
    return node is not None and string_value(node) == "cuda"


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


def without(args: Sequence[cst.Arg], drop: cst.Arg) -> list[cst.Arg]:
    """``args`` less ``drop``, keeping the others' formatting (a dropped last
    argument hands its comma, or its absence, to the new last one)."""
    kept = [a for a in args if a is not drop]
    if kept and args and args[-1] is drop:
        kept[-1] = kept[-1].with_changes(comma=drop.comma)
    return kept


class _Rename:
    """For rules whose runtime twin takes exactly the original's arguments: every
    use of a target name (call, decorator, reference) becomes the twin. A mixin,
    not a Rule, so that the registry does not take it for a rule."""

    renames: dict[str, str] = {}
    message = ""

    def _rename(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        target = self.matches(original, *self.renames)
        if target is None:
            return updated
        return self.rewrite(original, self.runtime(self.renames[target]), self.message)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._rename(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return self._rename(original, updated)


class TorchCompile(_Rename, Rule):
    """`torch.compile` becomes `porter_runtime.compile`, in every call form.

    What:
    Rewrites `torch.compile(model, ...)`, `@torch.compile`, `@torch.compile(mode=...)`
    and other references to `torch.compile` into `porter_runtime.compile`, with the
    arguments unchanged.

    Why:
    Inductor has no usable Metal backend before torch 2.8 and still fails on some
    graphs after it, and on CPU it needs a C++ compiler (`InvalidCxxCompiler`). A
    ported model should run eagerly there rather than crash at its first call.

    Fix safety:
    Safe. On CUDA `porter_runtime.compile(model, **kw)` is `torch.compile(model, **kw)`,
    `porter_runtime.compile(**kw)` returns a decorator that calls it, and the bare
    decorator form compiles the function. Elsewhere it runs eagerly with one warning,
    unless `PORTER_COMPILE=1` asks to compile there: a module comes back wrapped as
    torch.compile wraps it (an `OptimizedModule` with `_orig_mod`, so state-dict keys
    keep their `_orig_mod.` prefix and checkpoints cross between machines), calling
    the model with Dynamo off; a function comes back unchanged.

    Known limits:
    `DISABLE_COMPILE=1` skips compiling off CUDA only; on CUDA the runtime ignores it
    (with a warning), since torch does not read it. `torch.compiler.*` and
    `torch._dynamo` settings are left alone.
    """

    code = "PT501"
    name = "torch-compile"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset({"torch.compile"}))
    renames = {"torch.compile": "compile"}
    message = "torch.compile runs on CUDA only (eager elsewhere unless PORTER_COMPILE=1)"

    valid = [
        "def build(torch, model):\n    return torch.compile(model)\n",
        "import mylib as torch\nmodel = torch.compile(model)\n",
        "code = compile(source, 'x.py', 'exec')\n",
        "import torch\nfrom torch import compiler\ncompiler.reset()\n",
        "import re\nfrom torch import compile\npattern = re.compile('x')\n",  # an attribute's name
    ]
    invalid = [
        Example(
            "import torch\nmodel = torch.compile(model, fullgraph=True)\n",
            "import porter_runtime\nimport torch\nmodel = porter_runtime.compile(model, fullgraph=True)\n",
        ),
        Example(
            "import torch as t\n\n@t.compile\ndef step(x):\n    return x * 2\n",
            "import porter_runtime\nimport torch as t\n\n@porter_runtime.compile\ndef step(x):\n    return x * 2\n",
        ),
        Example(
            "from torch import compile\n\n@compile(mode=\"max-autotune\")\ndef step(x):\n    return x * 2\n",
            "import porter_runtime\n\n@porter_runtime.compile(mode=\"max-autotune\")\ndef step(x):\n    return x * 2\n",
        ),
        Example(
            "import torch\ncompile_fn = torch.compile if args.compile else (lambda m: m)\n",
            "import porter_runtime\nimport torch\ncompile_fn = porter_runtime.compile if args.compile else (lambda m: m)\n",
        ),
    ]


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
            "import porter_runtime\nimport torch\nwith porter_runtime.autocast():\n    loss = model(x)\n",
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
        if device is None or device.star or not _is_cuda_type(device.value):
            return None
        if has_star_args(updated):
            self._flag(original)
            return None
        return without(list(updated.args), device)

    def _flag(self, original: cst.Call) -> None:
        self.flag(original, "CUDA autocast with unpacked arguments can't be rewritten exactly",
                  suggestion="porter_runtime.autocast(dtype=..., enabled=..., cache_enabled=...)")


_SCALER_LEGACY = {"torch.cuda.amp.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler"}
_SCALER_DEVICE = {"torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"}


class CudaGradScaler(Rule):
    """A CUDA `GradScaler(...)` becomes `porter_runtime.GradScaler(...)`.

    What:
    Rewrites `torch.cuda.amp.GradScaler(...)` and `torch.amp.GradScaler("cuda", ...)`
    (also with `device="cuda"` or no device, whose default is "cuda") into
    `porter_runtime.GradScaler(...)` with the remaining arguments (`init_scale`,
    `growth_factor`, `backoff_factor`, `growth_interval`, `enabled`) unchanged.

    Why:
    Off CUDA a CUDA scaler warns and disables itself. The runtime's scaler matches
    the runtime's autocast: a real scaler where autocast uses float16, an honest
    disabled passthrough where it uses bfloat16 that still answers `state_dict()`
    and the getters as an enabled one and loads a CUDA scaler's state.

    Fix safety:
    Safe. On CUDA the runtime returns `torch.amp.GradScaler("cuda", ...)` with the
    same arguments, which is what `torch.cuda.amp.GradScaler(...)` constructs
    (it is a deprecated subclass that calls exactly that).

    Known limits:
    The object is a `torch.amp.GradScaler`, so `isinstance(s, torch.cuda.amp.GradScaler)`
    no longer holds. A device given as a variable, or another device, is left
    alone. References that are not calls (a class used in `isinstance`) are left alone.
    """

    code = "PT503"
    name = "cuda-grad-scaler"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=frozenset(_SCALER_LEGACY | _SCALER_DEVICE))

    valid = [
        "import torch\nscaler = torch.amp.GradScaler('cpu')\n",
        "import torch\nscaler = torch.amp.GradScaler(device)\n",
        "def f(torch):\n    return torch.cuda.amp.GradScaler()\n",
        "import mylib as torch\nscaler = torch.cuda.amp.GradScaler()\n",
        "import torch\nok = isinstance(s, torch.cuda.amp.GradScaler)\n",
    ]
    invalid = [
        Example(
            "import torch\nscaler = torch.cuda.amp.GradScaler(enabled=use_amp)\n",
            "import porter_runtime\nimport torch\nscaler = porter_runtime.GradScaler(enabled=use_amp)\n",
        ),
        Example(
            "import torch as t\nscaler = t.amp.GradScaler(\"cuda\", init_scale=1024.0)\n",
            "import porter_runtime\nimport torch as t\nscaler = porter_runtime.GradScaler(init_scale=1024.0)\n",
        ),
        Example(
            "from torch.cuda.amp import GradScaler\nscaler = GradScaler(2.0 ** 12, growth_interval=100)\n",
            "import porter_runtime\nscaler = porter_runtime.GradScaler(2.0 ** 12, growth_interval=100)\n",
        ),
        Example(
            "from torch.amp import GradScaler\nscaler = GradScaler()\nother = GradScaler(device='cuda', enabled=False)\n",
            "import porter_runtime\nscaler = porter_runtime.GradScaler()\nother = porter_runtime.GradScaler(enabled=False)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)
        if target is None:
            return updated
        args = list(updated.args)
        if target in _SCALER_DEVICE:
            device = self._device_arg(original, updated)
            if device is False:
                return updated
            if device is not None:
                args = without(args, device)
        new = updated.with_changes(func=self.runtime("GradScaler"), args=args)
        return self.rewrite(original, new, "the CUDA GradScaler now matches the runtime's autocast")

    @staticmethod
    def _device_arg(original: cst.Call, updated: cst.Call):
        """The CUDA device argument to drop, None when absent, False when not CUDA."""
        named = keyword(updated, "device")
        first = updated.args[0] if updated.args and updated.args[0].keyword is None else None
        device = named if named is not None else (first if first is not None and not first.star else None)
        if device is None:
            # No device means "cuda", unless **kwargs may carry one.
            return False if any(a.star == "**" for a in updated.args) else None
        # The device may already be rewritten to ``porter_runtime.device()``; judge the original.
        index = list(updated.args).index(device)
        return device if _is_cuda_type(original.args[index].value) else False


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


class CudaCustomFwdBwd(_Rename, Rule):
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
            "import porter_runtime\nimport torch\n\n@porter_runtime.custom_fwd\ndef forward(ctx, x):\n    return x\n",
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
        if device is None or not _is_cuda_type(device.value):
            return updated
        args = without(list(updated.args), device)
        twin = _FWD_BWD_DEVICE[target]
        if not args and id(original) in self._decorators:
            new: cst.BaseExpression = self.runtime(twin)
        else:
            new = updated.with_changes(func=self.runtime(twin), args=args)
        return self.rewrite(original, new, self.message)


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
            "import porter_runtime\nfrom contextlib import nullcontext\nimport torch as t\n\n"
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


_SHARDED = frozenset({"torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler"})


class ShardedGradScalerDevice(Rule):
    """FSDP's `ShardedGradScaler(...)` for CUDA becomes `porter_runtime.ShardedGradScaler(...)`.

    What:
    Rewrites a call of `torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler`
    whose device is CUDA (not given, so "cuda", or a literal "cuda") into the
    runtime's twin with the same arguments.

    Why:
    Off CUDA a CUDA `ShardedGradScaler` warns and disables itself; the runtime's
    follows the runtime's autocast instead, like `porter_runtime.GradScaler` (PT503):
    a real scaler on the resolved device where autocast uses float16, an honest
    disabled one where it uses bfloat16 (answering `state_dict()` as an enabled one).

    Fix safety:
    Safe. On CUDA the twin constructs `ShardedGradScaler` with exactly the caller's
    arguments.

    Known limits:
    A device given as a variable or naming another device is left alone, as are
    references that are not calls.
    """

    code = "PT506"
    name = "sharded-grad-scaler"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_SHARDED)

    valid = [
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
        "scaler = ShardedGradScaler(device='cpu')\n",
        "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n"
        "scaler = ShardedGradScaler(args.device)\n",
        "def f(ShardedGradScaler):\n    return ShardedGradScaler()\n",
        "from mylib.sharded_grad_scaler import ShardedGradScaler\nscaler = ShardedGradScaler()\n",
    ]
    invalid = [
        Example(
            "from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n\n"
            "scaler = ShardedGradScaler(enabled=use_fp16)\n",
            "import porter_runtime\n\nscaler = porter_runtime.ShardedGradScaler(enabled=use_fp16)\n",
        ),
        Example(
            "import torch.distributed.fsdp.sharded_grad_scaler as sgs\n"
            "scaler = sgs.ShardedGradScaler(\"cuda\", init_scale=2.0 ** 8)\n",
            "import porter_runtime\nimport torch.distributed.fsdp.sharded_grad_scaler as sgs\n"
            "scaler = porter_runtime.ShardedGradScaler(\"cuda\", init_scale=2.0 ** 8)\n",
        ),
        Example(
            "import torch\nscaler = torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler()\n",
            "import porter_runtime\nimport torch\nscaler = porter_runtime.ShardedGradScaler()\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func) is None:
            return updated
        device = keyword(original, "device")
        first = original.args[0] if original.args and original.args[0].keyword is None else None
        device = device if device is not None else first
        if device is not None and (device.star or not _is_cuda_type(device.value)):
            return updated
        if device is None and any(a.star == "**" for a in original.args):
            return updated
        new = updated.with_changes(func=self.runtime("ShardedGradScaler"))
        return self.rewrite(original, new, "the CUDA ShardedGradScaler now matches the runtime's autocast")


_SCALERS = frozenset(_SCALER_LEGACY | _SCALER_DEVICE | _SHARDED | {
    "porter_runtime.GradScaler", "porter_runtime.grad_scaler", "porter_runtime.ShardedGradScaler"})
#: A scaler's state_dict() key → the getter that returns the same value.
_SCALER_GETTERS = {"scale": "get_scale", "growth_factor": "get_growth_factor",
                   "backoff_factor": "get_backoff_factor", "growth_interval": "get_growth_interval"}


class _ScalerNames(cst.CSTVisitor):
    """Names and attributes (`scaler`, `self.scaler`) assigned a loss scaler."""

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self.found: set[str] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        if self._makes_scaler(node.value):
            self.found.update(filter(None, (dotted_name(t.target) for t in node.targets)))

    def _makes_scaler(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):  # `ShardedGradScaler(...) if fsdp else GradScaler(...)`
            return self._makes_scaler(value.body) or self._makes_scaler(value.orelse)
        return isinstance(value, cst.Call) and self.rule.matches(value.func, *_SCALERS) is not None


class ScalerStateRead(Rule):
    """`scaler.state_dict()["scale"]` becomes `scaler.get_scale()`.

    What:
    Rewrites a read of one entry of a loss scaler's `state_dict()` (`"scale"`,
    `"growth_factor"`, `"backoff_factor"`, `"growth_interval"`) into the scaler's
    getter for it, where the file assigns the scaler from a `GradScaler` or
    `ShardedGradScaler` call (`scaler = ...`, `self.scaler = ...`, also as a branch
    of a conditional).

    Why:
    A disabled torch scaler's `state_dict()` is `{}`: the read raises
    `KeyError: 'scale'`. The runtime's scalers keep their entries where the runtime
    disabled them (autocast in bfloat16), but a scaler it did not make may still be
    disabled off CUDA; `get_scale()` answers for any disabled scaler (1.0), and the
    other getters for the runtime's.

    Fix safety:
    Safe. An enabled scaler's `state_dict()` builds each entry from the same getter,
    so wherever the original returned a value the new code returns the same one;
    only a read that raised `KeyError` (a disabled scaler) now returns the getter's
    value.

    Known limits:
    The scaler must be assigned in the same file; scalers passed as arguments, and
    entries read from a saved checkpoint (`ckpt["scaler"]["scale"]`), are not seen.
    """

    code = "PT507"
    name = "scaler-state-read"
    safety = Safety.SAFE
    needs = Needs(
        targets=_SCALERS,
        words=frozenset({"state_dict"}),
        whole_file=True,  # the scaler is often assigned in another method
    )

    valid = [
        "import torch\nscaler = torch.cuda.amp.GradScaler()\nstate = scaler.state_dict()\n",
        "import torch\nopt = torch.optim.SGD(params, lr=0.1)\nlr = opt.state_dict()['scale']\n",
        "def f(torch):\n    scaler = torch.cuda.amp.GradScaler()\n    return scaler.state_dict()['scale']\n",
        "import mylib as torch\nscaler = torch.cuda.amp.GradScaler()\ns = scaler.state_dict()['scale']\n",
    ]
    invalid = [
        Example(
            "import torch\n\nscaler = torch.cuda.amp.GradScaler()\nlog({'loss_scale': scaler.state_dict()['scale']})\n",
            "import torch\n\nscaler = torch.cuda.amp.GradScaler()\nlog({'loss_scale': scaler.get_scale()})\n",
        ),
        Example(
            "from torch.amp import GradScaler as Scaler\n\nclass Trainer:\n    def __init__(self):\n"
            "        self.scaler = Scaler('cuda')\n\n    def stats(self):\n"
            "        return self.scaler.state_dict()[\"growth_factor\"]\n",
            "from torch.amp import GradScaler as Scaler\n\nclass Trainer:\n    def __init__(self):\n"
            "        self.scaler = Scaler('cuda')\n\n    def stats(self):\n"
            "        return self.scaler.get_growth_factor()\n",
        ),
        Example(
            "import porter_runtime\nscaler = porter_runtime.GradScaler(enabled=amp)\nscale = scaler.state_dict()['scale']\n",
            "import porter_runtime\nscaler = porter_runtime.GradScaler(enabled=amp)\nscale = scaler.get_scale()\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._names: Optional[set[str]] = None

    @property
    def _scalers(self) -> set[str]:
        if self._names is None:
            visitor = _ScalerNames(self)
            self.ctx.module.visit(visitor)
            self._names = visitor.found
        return self._names

    def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
        call = original.value
        if (not isinstance(call, cst.Call) or call.args or not isinstance(call.func, cst.Attribute)
                or call.func.attr.value != "state_dict" or len(original.slice) != 1):
            return updated
        index = original.slice[0].slice
        key = string_value(index.value) if isinstance(index, cst.Index) else None
        if key not in _SCALER_GETTERS or dotted_name(call.func.value) not in self._scalers:
            return updated
        getter = cst.Attribute(updated.value.func.value, cst.Name(_SCALER_GETTERS[key]))
        new = cst.Call(getter).with_changes(lpar=updated.lpar, rpar=updated.rpar)
        return self.rewrite(original, new, "a disabled scaler's state_dict() is empty; the getter "
                            "returns the same value and also answers for a disabled scaler")
