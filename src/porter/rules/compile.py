"""``torch.compile``, which on MPS or the CPU needs the runtime's choice of backend."""

from __future__ import annotations

from porter.rulebase.families.compile_amp_shared import RenameToRuntime
from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
)


class TorchCompile(RenameToRuntime, Rule):
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
            "import porter_runtime\nmodel = porter_runtime.compile(model, fullgraph=True)\n",
        ),
        Example(
            "import torch as t\n\n@t.compile\ndef step(x):\n    return x * 2\n",
            "import porter_runtime\n\n@porter_runtime.compile\ndef step(x):\n    return x * 2\n",
        ),
        Example(
            "from torch import compile\n\n@compile(mode=\"max-autotune\")\ndef step(x):\n    return x * 2\n",
            "import porter_runtime\n\n@porter_runtime.compile(mode=\"max-autotune\")\ndef step(x):\n    return x * 2\n",
        ),
        Example(
            "import torch\ncompile_fn = torch.compile if args.compile else (lambda m: m)\n",
            "import porter_runtime\ncompile_fn = porter_runtime.compile if args.compile else (lambda m: m)\n",
        ),
    ]
