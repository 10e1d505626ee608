"""timm's Mixup (before 0.5) makes its targets on CUDA: its construction goes through
porter_runtime.timm_mixup."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.matching import Ambiguous
from porter.rulebase.rule import Example, Needs, Rule, Safety

_TARGETS = frozenset({"timm.data.Mixup", "timm.data.mixup.Mixup"})


class TimmMixupTargets(Rule):
    """`Mixup(...)` from timm becomes `porter_runtime.timm_mixup(Mixup(...))`.

    What:
    Wraps the construction of timm's `Mixup` (`from timm.data import Mixup`,
    `timm.data.mixup.Mixup`) in `porter_runtime.timm_mixup(...)`, which returns the
    object the code built.

    Why:
    timm 0.3.2 to 0.4.12, the versions DeiT, MAE and ConvNeXt pin, make Mixup's one-hot
    targets with `mixup_target(..., device='cuda')` by default, and `Mixup.__call__`
    passes no device: the first training step off CUDA fails with "Torch not compiled
    with CUDA enabled" (ConvNeXt, blind round 4), inside a library porter does not port.

    Fix safety:
    Safe. On CUDA the object is returned untouched. Elsewhere the runtime sets the
    `'cuda'` default of timm's `mixup_target` and `one_hot` to the resolved device, where
    the code moved its targets; timm 0.5 and later, which use the input's device, are
    left alone.

    Known limits:
    `FastCollateMixup` makes its targets on the CPU already and needs nothing. A `Mixup`
    subclass of the repository's own is not followed.
    """

    code = "TP402"
    name = "timm-mixup-targets"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=_TARGETS)

    valid = [
        "from timm.data import FastCollateMixup\ncollate = FastCollateMixup(mixup_alpha=0.8, num_classes=1000)\n",
        "from mylib.data import Mixup\nmixup_fn = Mixup(mixup_alpha=0.8)\n",
    ]
    invalid = [
        Example(
            "from timm.data import Mixup\n\n"
            "mixup_fn = None\n"
            "if args.mixup > 0 or args.cutmix > 0.:\n"
            "    mixup_fn = Mixup(\n"
            "        mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax,\n"
            "        prob=args.mixup_prob, switch_prob=args.mixup_switch_prob, mode=args.mixup_mode,\n"
            "        label_smoothing=args.smoothing, num_classes=args.nb_classes)\n",
            "import porter_runtime\nfrom timm.data import Mixup\n\n"
            "mixup_fn = None\n"
            "if args.mixup > 0 or args.cutmix > 0.:\n"
            "    mixup_fn = porter_runtime.timm_mixup(Mixup(\n"
            "        mixup_alpha=args.mixup, cutmix_alpha=args.cutmix, cutmix_minmax=args.cutmix_minmax,\n"
            "        prob=args.mixup_prob, switch_prob=args.mixup_switch_prob, mode=args.mixup_mode,\n"
            "        label_smoothing=args.smoothing, num_classes=args.nb_classes))\n",
        ),
        Example(
            "import timm.data.mixup as mixup\nmix = mixup.Mixup(mixup_alpha=0.2, num_classes=10)\n",
            "import porter_runtime\nimport timm.data.mixup as mixup\n"
            "mix = porter_runtime.timm_mixup(mixup.Mixup(mixup_alpha=0.2, num_classes=10))\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._wrapped: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        # a second run: the construction is already the runtime's argument
        if self.qualname(node.func) == "porter_runtime.timm_mixup" or \
                (isinstance(node.func, cst.Attribute) and node.func.attr.value == "timm_mixup"):
            self._wrapped.update(id(a.value) for a in node.args)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.qualname(original.func)
        if name is None or isinstance(name, Ambiguous) or name not in _TARGETS or id(original) in self._wrapped:
            return updated
        new = cst.Call(func=self.runtime("timm_mixup"), args=[cst.Arg(updated)])
        return self.rewrite(original, new, "timm's Mixup (< 0.5) makes its targets on device='cuda'; "
                            "porter_runtime.timm_mixup makes them on the resolved device off CUDA")
