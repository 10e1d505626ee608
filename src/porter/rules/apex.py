"""apex: fused optimizers and norms become the runtime's twins; amp and the rest are reported."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.matching import Ambiguous
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.thirdparty.uses import UseFinder, arguments_fit

#: apex class → (positional arguments accepted, keywords accepted). Positions past the
#: ones shared by every apex release are refused: FusedAdam's sixth parameter was
#: ``eps_inside_sqrt`` before it became ``adam_w_mode``.
_OPTIMIZERS = {
    "FusedAdam": (5, frozenset({"params", "lr", "bias_correction", "betas", "eps", "adam_w_mode",
                                "weight_decay", "amsgrad", "set_grad_none", "capturable",
                                "master_weights"})),
    "FusedLAMB": (6, frozenset({"params", "lr", "bias_correction", "betas", "eps", "weight_decay",
                                "amsgrad", "adam_w_mode", "grad_averaging", "set_grad_none",
                                "max_grad_norm", "use_nvlamb"})),
}
_NORMS = {
    "FusedLayerNorm": (3, frozenset({"normalized_shape", "eps", "elementwise_affine",
                                     "memory_efficient"})),
    "FusedRMSNorm": (3, frozenset({"normalized_shape", "eps", "elementwise_affine",
                                   "memory_efficient"})),
}
_OPTIMIZER_TARGETS = {
    **{f"apex.optimizers.{n}": n for n in _OPTIMIZERS},
    "apex.optimizers.fused_adam.FusedAdam": "FusedAdam",
    "apex.optimizers.fused_lamb.FusedLAMB": "FusedLAMB",
}
_NORM_TARGETS = {f"{m}.{n}": n for m in ("apex.normalization", "apex.normalization.fused_layer_norm")
                 for n in _NORMS}


def _twin_call(rule: Rule, original: cst.Call, updated: cst.Call, targets: dict[str, str],
               signatures: dict) -> cst.BaseExpression:
    name = rule.qualname(original.func)
    if name is None or isinstance(name, Ambiguous) or name not in targets:
        return updated
    twin = targets[name]
    positional, keywords = signatures[twin]
    if not arguments_fit(original, positional, keywords):
        rule.flag(original, f"`{twin}` with these arguments can't be mapped exactly (later "
                  "positions, `*args` and some keywords differ between apex releases)",
                  suggestion=f"porter_runtime.{twin}(...) with keyword arguments")
        return updated
    new = updated.with_changes(func=rule.runtime(twin))
    return rule.rewrite(original, new, f"`{twin}` is apex's on CUDA and its exact torch "
                        "equivalent elsewhere")


class ApexFusedOptimizer(Rule):
    """apex's `FusedAdam` / `FusedLAMB` become `porter_runtime.FusedAdam` / `FusedLAMB`.

    What:
    Rewrites the construction of `apex.optimizers.FusedAdam` and `FusedLAMB` (however
    imported) into the runtime's twins, with the same arguments.

    Why:
    apex's optimizers need its CUDA extensions (`RuntimeError:
    apex.optimizers.FusedAdam requires cuda extensions`), and apex does not install on
    a Mac.

    Fix safety:
    Safe. On CUDA with apex importable the twin constructs apex's own optimizer from
    the same arguments. Elsewhere it is a torch optimizer with apex's defaults
    (`adam_w_mode=True`: decoupled weight decay; `bias_correction=True`, `eps=1e-8`,
    `betas=(0.9, 0.999)`; FusedLAMB's `max_grad_norm=1.0` global clipping and trust
    ratio) and apex's update, written from apex's kernels (multi_tensor_adam.cu,
    multi_tensor_lamb.cu) and tested step for step against it.

    Known limits:
    `master_weights=True` and AMSGrad raise off CUDA, as apex does for AMSGrad.
    Positional arguments after `eps` (FusedAdam) or `weight_decay` (FusedLAMB),
    whose meaning changed between apex releases, are reported instead.
    """

    code = "TP301"
    name = "apex-fused-optimizer"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset(_OPTIMIZER_TARGETS))

    valid = [
        "def build(apex, params):\n    return apex.optimizers.FusedAdam(params)\n",
        "import mylib as apex\nopt = apex.optimizers.FusedAdam(params, lr=1e-3)\n",
        "from mylib import FusedLAMB\nopt = FusedLAMB(params)\n",
    ]
    invalid = [
        Example(
            "from apex.optimizers import FusedAdam\n"
            "opt = FusedAdam(model.parameters(), lr=3e-4, weight_decay=0.1)\n",
            "import porter_runtime\n"
            "opt = porter_runtime.FusedAdam(model.parameters(), lr=3e-4, weight_decay=0.1)\n",
        ),
        Example(
            "import apex\nopt = apex.optimizers.FusedLAMB(params, lr=1e-3, max_grad_norm=1.0)\n",
            "import porter_runtime\nopt = porter_runtime.FusedLAMB(params, lr=1e-3, max_grad_norm=1.0)\n",
        ),
        Example(
            "import apex.optimizers as aopt\nopt = aopt.FusedAdam(params, 1e-3, adam_w_mode=False)\n",
            "import porter_runtime\nopt = porter_runtime.FusedAdam(params, 1e-3, adam_w_mode=False)\n",
        ),
        Example("from apex.optimizers import FusedAdam\n"
                "opt = FusedAdam(params, 1e-3, True, (0.9, 0.999), 1e-8, False)\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        return _twin_call(self, original, updated, _OPTIMIZER_TARGETS, _OPTIMIZERS)


class ApexFusedNorm(Rule):
    """apex's `FusedLayerNorm` / `FusedRMSNorm` become `porter_runtime.FusedLayerNorm` / `FusedRMSNorm`.

    What:
    Rewrites the construction of `apex.normalization.FusedLayerNorm` and
    `FusedRMSNorm` (however imported) into the runtime's twins, with the same
    arguments.

    Why:
    `FusedLayerNorm.__init__` imports `fused_layer_norm_cuda`, which exists only in a
    CUDA build of apex; apex does not install on a Mac.

    Fix safety:
    Safe. On CUDA with apex importable the twin constructs apex's own module. Elsewhere
    it is a module with apex's parameters, defaults (`eps=1e-5`,
    `elementwise_affine=True`) and state-dict keys, whose forward is apex's own
    non-CUDA branch: `F.layer_norm`, and `manual_rms_norm` (statistics in float32).

    Known limits:
    `MixedFusedLayerNorm` / `MixedFusedRMSNorm` are reported (TP304).
    """

    code = "TP302"
    name = "apex-fused-norm"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset(_NORM_TARGETS))

    valid = [
        "def build(apex):\n    return apex.normalization.FusedLayerNorm(512)\n",
        "import mylib as apex\nnorm = apex.normalization.FusedRMSNorm(512)\n",
    ]
    invalid = [
        Example(
            "from apex.normalization import FusedLayerNorm as LayerNorm\n\n"
            "class Block(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
            "        self.norm = LayerNorm(d, eps=1e-6)\n",
            "import porter_runtime\n\n"
            "class Block(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n"
            "        self.norm = porter_runtime.FusedLayerNorm(d, eps=1e-6)\n",
        ),
        Example(
            "import apex\nnorm = apex.normalization.FusedRMSNorm([64], elementwise_affine=False)\n",
            "import porter_runtime\nnorm = porter_runtime.FusedRMSNorm([64], elementwise_affine=False)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        return _twin_call(self, original, updated, _NORM_TARGETS, _NORMS)


_AMP_ADVICE = {
    "initialize": "drop amp.initialize; run the forward under porter_runtime.autocast('cuda', "
                  "dtype=torch.float16) (opt_level O1) and keep the model in float32",
    "scale_loss": "scaler = porter_runtime.GradScaler('cuda'); scaler.scale(loss).backward(); "
                  "scaler.step(optimizer); scaler.update()",
    "master_params": "iterate over model.parameters(): with torch.amp there are no separate "
                     "master parameters",
    "state_dict": "save scaler.state_dict() of the torch.amp GradScaler instead",
    "load_state_dict": "load the torch.amp GradScaler's state with scaler.load_state_dict(...)",
}


class ApexAmp(UseFinder, Rule):
    """`apex.amp` is reported with its torch.amp replacement.

    What:
    Reports every use of `apex.amp` (`amp.initialize`, `amp.scale_loss`,
    `amp.master_params`, `amp.state_dict`, ...).

    Why:
    apex.amp is deprecated, needs apex (which does not install on a Mac), and its
    opt_levels have no exact equivalent: O1 patches functions, O2 keeps fp32 master
    weights for a half model.

    Fix safety:
    Review only. The replacement, torch.amp autocast plus GradScaler (the runtime's
    `porter_runtime.autocast` / `GradScaler` pick the device), changes which ops run
    in half precision, so a human must make the change and check the loss curve.

    Known limits:
    One finding per use; the import statement itself is not reported.
    """

    code = "TP303"
    name = "apex-amp"
    safety = Safety.REVIEW
    needs = Needs(targets=frozenset({"apex.amp"}))
    prefixes = ("apex.amp",)

    valid = [
        "def train(amp, model, opt):\n    return amp.initialize(model, opt)\n",
        "import mylib as apex\nmodel, opt = apex.amp.initialize(model, opt)\n",
    ]
    invalid = [
        Example("from apex import amp\nmodel, opt = amp.initialize(model, opt, opt_level='O1')\n"),
        Example("import apex\nwith apex.amp.scale_loss(loss, opt) as scaled:\n    scaled.backward()\n"),
    ]

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        last = name.rsplit(".", 1)[-1]
        self.flag(call or node, f"`{name}` (apex.amp) needs apex on CUDA; use torch.amp",
                  suggestion=_AMP_ADVICE.get(last, "torch.amp autocast + GradScaler "
                                                   "(porter_runtime.autocast / GradScaler)"))


_OTHER_ADVICE = [
    ("apex.parallel.DistributedDataParallel", "torch.nn.parallel.DistributedDataParallel"),
    ("apex.parallel.SyncBatchNorm", "torch.nn.SyncBatchNorm (CUDA only; plain BatchNorm on one device)"),
    ("apex.parallel.convert_syncbn_model", "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) on "
                                           "CUDA; leave BatchNorm as is on one device"),
    ("apex.normalization.MixedFused", "porter_runtime.FusedLayerNorm / FusedRMSNorm, casting the "
                                      "output to the weight's dtype"),
    ("apex.optimizers.FusedSGD", "torch.optim.SGD"),
    ("apex.optimizers.FusedNovoGrad", "a NovoGrad implementation in PyTorch (no torch built-in)"),
    ("apex.optimizers.FusedAdagrad", "torch.optim.Adagrad"),
    ("apex.fp16_utils", "torch.amp autocast + GradScaler"),
]


class ApexUnsupported(UseFinder, Rule):
    """Other apex APIs are reported with what to use instead.

    What:
    Reports every use of an `apex` name that TP301-TP303 do not cover:
    `apex.parallel.DistributedDataParallel` / `SyncBatchNorm`, `MixedFused*Norm`,
    `FusedSGD`, `FusedNovoGrad`, `apex.fp16_utils`, `apex.contrib`, and the fused
    classes used as values (subclassing, `isinstance`).

    Why:
    apex does not install on a Mac; none of these has a twin that is exact on CUDA.

    Fix safety:
    Review only; each finding names the PyTorch replacement.

    Known limits:
    One finding per use; the import statement itself is not reported.
    """

    code = "TP304"
    name = "apex-unsupported"
    safety = Safety.REVIEW
    needs = Needs(targets=frozenset({"apex"}))
    prefixes = ("apex",)

    valid = [
        "def wrap(apex, model):\n    return apex.parallel.DistributedDataParallel(model)\n",
        "import mylib as apex\nmodel = apex.parallel.convert_syncbn_model(model)\n",
        "from apex.optimizers import FusedAdam\nopt = FusedAdam(params)\n",
    ]
    invalid = [
        Example("from apex.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n"),
        Example("import apex\nmodel = apex.parallel.convert_syncbn_model(model)\n"),
        Example("from apex.optimizers import FusedAdam\n\nclass MyAdam(FusedAdam):\n    pass\n"),
    ]

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        if under_any(name, ("apex.amp",)):
            return  # TP303
        if call is not None and (name in _OPTIMIZER_TARGETS or name in _NORM_TARGETS):
            return  # TP301 / TP302
        advice = next((text for prefix, text in _OTHER_ADVICE if name.startswith(prefix)),
                      "guard the import (try/except ImportError) and give the code a PyTorch "
                      "path off CUDA")
        self.flag(call or node, f"`{name}` needs apex, which does not install without CUDA",
                  suggestion=advice)


def under_any(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)
