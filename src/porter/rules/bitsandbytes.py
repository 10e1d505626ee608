"""bitsandbytes: 8-bit / paged optimizers fall back to torch's; quantised layers are reported."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.matching import Ambiguous
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.thirdparty.uses import GuardTracker, UseFinder
from porter.rulebase.families.type_checks import TypeCheckUses

# The twins in porter_runtime.bnb_optim (porter_runtime/thirdparty/bnb.py), by family.
_FAMILIES = {
    "Adam": ("adam", True), "AdamW": ("adamw", True), "SGD": ("sgd", False),
    "RMSprop": ("rmsprop", False), "Adagrad": ("adagrad", False),
}


def _names() -> dict[str, str]:
    names = {}
    for base, (module, paged) in _FAMILIES.items():
        for prefix in ("", "Paged") if paged else ("",):
            for suffix in ("", "8bit", "32bit"):
                name = f"{prefix}{base}{suffix}"
                names[f"bitsandbytes.optim.{name}"] = name
                names[f"bitsandbytes.optim.{module}.{name}"] = name
    return names


_OPTIMIZERS = _names()


class BitsandbytesOptimizer(Rule):
    """bitsandbytes' 8-bit and paged optimizers become `porter_runtime.bnb_optim.*`.

    What:
    Rewrites the construction of `bitsandbytes.optim` Adam, AdamW, SGD, RMSprop and
    Adagrad optimizers (8-bit, 32-bit and paged variants: `Adam8bit`,
    `PagedAdamW8bit`, ...) into the same call on `porter_runtime.bnb_optim`.

    Why:
    bitsandbytes' optimizer kernels need CUDA: on a Mac the package has no kernels
    for them, so building or stepping the optimizer fails.

    Fix safety:
    Unsafe (applied only with --unsafe-fixes; a finding otherwise). On CUDA with
    bitsandbytes importable the twin is bitsandbytes' own optimizer, built from the
    same arguments. Elsewhere it is the torch optimizer with the same update and
    32-bit state (torch.optim.Adam / AdamW / SGD / RMSprop / Adagrad), with a one-time
    warning naming the bitsandbytes-only options it dropped (optim_bits,
    min_8bit_size, percentile_clipping, block_wise, is_paged): the results differ from
    8-bit state by its quantisation error, and optimizer checkpoints do not transfer.

    Known limits:
    Lion, LAMB, LARS and AdEMAMix have no torch optimizer and are reported (TP502).
    """

    code = "TP501"
    name = "bnb-optimizer"
    safety = Safety.UNSAFE
    needs = Needs(calls_only=True, targets=frozenset(_OPTIMIZERS))

    valid = [
        "def build(bnb, params):\n    return bnb.optim.AdamW8bit(params)\n",
        "import mylib as bnb\nopt = bnb.optim.AdamW8bit(params, lr=1e-3)\n",
        "from mylib import PagedAdamW8bit\nopt = PagedAdamW8bit(params)\n",
    ]
    invalid = [
        Example(
            "import bitsandbytes as bnb\n\nopt = bnb.optim.AdamW8bit(model.parameters(), lr=2e-4)\n",
            "import porter_runtime\n\nopt = porter_runtime.bnb_optim.AdamW8bit(model.parameters(), lr=2e-4)\n",
        ),
        Example(
            "from bitsandbytes.optim import PagedAdam8bit\nopt = PagedAdam8bit(params, 1e-3, (0.9, 0.95))\n",
            "import porter_runtime\nopt = porter_runtime.bnb_optim.PagedAdam8bit(params, 1e-3, (0.9, 0.95))\n",
        ),
        Example(
            "import bitsandbytes.optim as bopt\nopt = bopt.SGD8bit(params, lr=0.1, momentum=0.9)\n",
            "import porter_runtime\nopt = porter_runtime.bnb_optim.SGD8bit(params, lr=0.1, momentum=0.9)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.qualname(original.func)
        if name is None or isinstance(name, Ambiguous) or name not in _OPTIMIZERS:
            return updated
        short = _OPTIMIZERS[name]
        twin = cst.Attribute(self.runtime("bnb_optim"), cst.Name(short))
        new = updated.with_changes(func=twin)
        return self.rewrite(original, new, f"`{short}` is bitsandbytes' on CUDA; elsewhere the torch "
                            "optimizer with 32-bit state (results differ by the 8-bit quantisation)")


_ADVICE = [
    ("bitsandbytes.nn.Linear8bitLt", "torch.nn.Linear (full precision) off CUDA; for int8 CPU "
     "inference torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)"),
    ("bitsandbytes.nn.Linear4bit", "torch.nn.Linear in bfloat16/float16 off CUDA (4-bit NF4/FP4 "
     "weights have no torch kernel)"),
    ("bitsandbytes.nn.LinearNF4", "torch.nn.Linear in bfloat16/float16 off CUDA"),
    ("bitsandbytes.nn.LinearFP4", "torch.nn.Linear in bfloat16/float16 off CUDA"),
    ("bitsandbytes.nn.Params4bit", "a plain nn.Parameter in bfloat16/float16 off CUDA"),
    ("bitsandbytes.nn.Int8Params", "a plain nn.Parameter off CUDA"),
    ("bitsandbytes.nn.Embedding", "torch.nn.Embedding"),
    ("bitsandbytes.nn.StableEmbedding", "torch.nn.Embedding followed by torch.nn.LayerNorm "
     "(StableEmbedding = Embedding + LayerNorm, with 32-bit optimizer state)"),
    ("bitsandbytes.optim.Lion", "lion-pytorch's Lion (pure PyTorch), or torch.optim.AdamW"),
    ("bitsandbytes.optim.PagedLion", "lion-pytorch's Lion (pure PyTorch), or torch.optim.AdamW"),
    ("bitsandbytes.optim.GlobalOptimManager", "drop the per-parameter 32-bit overrides off CUDA: "
     "torch optimizers keep 32-bit state already"),
    ("bitsandbytes.functional", "the dequantised torch tensor ops (no torch kernel for blockwise "
     "8-bit/4-bit quantisation)"),
]


class BitsandbytesUnsupported(GuardTracker, TypeCheckUses, UseFinder, Rule):
    """Quantised layers and other bitsandbytes APIs are reported with what to use instead.

    What:
    Reports every use of a `bitsandbytes` name that TP501 does not rewrite:
    quantised layers (`nn.Linear8bitLt`, `nn.Linear4bit`, `Params4bit`,
    `StableEmbedding`), optimizers with no torch counterpart (`Lion8bit`,
    `LAMB8bit`, ...), `GlobalOptimManager` and `bitsandbytes.functional`.

    Why:
    Their kernels need CUDA; there is no torch equivalent that computes the same
    numbers, so a human must choose (full precision, or torch's own quantisation).

    Fix safety:
    Review only; each finding names the PyTorch replacement.

    A class only tested against is a note, since a type test runs no kernel
    (porter.rulebase.families.type_checks):

        cls = bnb.nn.Linear4bit if args.bits == 4 else torch.nn.Linear   # a note
        if isinstance(module, cls): ...

        cls = bnb.nn.Linear4bit if args.bits == 4 else torch.nn.Linear   # a finding:
        layer = cls(64, 64)                                               # it builds one

    Known limits:
    One finding per use; the import statement itself is not reported.
    """

    code = "TP502"
    name = "bnb-unsupported"
    safety = Safety.REVIEW
    needs = Needs(targets=frozenset({"bitsandbytes"}))
    prefixes = ("bitsandbytes",)

    valid = [
        "def build(bnb):\n    return bnb.nn.Linear8bitLt(64, 64)\n",
        "import mylib as bnb\nlayer = bnb.nn.Linear4bit(64, 64)\n",
        "import bitsandbytes as bnb\nopt = bnb.optim.Adam8bit(params)\n",
    ]
    invalid = [
        Example("import bitsandbytes as bnb\nlayer = bnb.nn.Linear8bitLt(1024, 1024, has_fp16_weights=False)\n"),
        Example("from bitsandbytes.nn import Linear4bit\nlayer = Linear4bit(64, 64, compute_dtype=torch.bfloat16)\n"),
        Example("from bitsandbytes.optim import Lion8bit\nopt = Lion8bit(params, lr=1e-4)\n"),
        Example(  # the class is built, not only tested against
            "import bitsandbytes as bnb\nimport torch\n\n\ndef build(args):\n"
            "    cls = bnb.nn.Linear4bit if args.bits == 4 else torch.nn.Linear\n"
            "    return cls(64, 64)\n",
            line=6,
        ),
    ]

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        if self.guarded():
            return  # the try's body runs only where the import worked; its handler falls back
        if call is not None and name in _OPTIMIZERS:
            return  # TP501
        if call is None:
            self.defer_reference(node, name)  # a class only tested against is a note
            return
        self._report(node, name, call, False)

    def on_reference(self, node: cst.BaseExpression, name: str, type_test_only: bool) -> None:
        self._report(node, name, None, type_test_only)

    def _report(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call], type_test_only: bool) -> None:
        advice = next((text for prefix, text in _ADVICE if name.startswith(prefix)),
                      "guard the import (try/except ImportError) and give the code a PyTorch "
                      "path off CUDA")
        message = f"`{name}` needs bitsandbytes' CUDA kernels"
        if type_test_only:
            self.note(node, f"{message} (for information: only a type test's class here, which runs no kernel)",
                      suggestion=advice)
        else:
            self.flag(call or node, message, suggestion=advice)
