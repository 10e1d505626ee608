"""detectron2's `get_cfg()`, whose defaults choose CUDA for the project (TP710)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety

#: detectron2's config factory, under the names it is imported by.
GET_CFG = frozenset({"detectron2.config.get_cfg", "detectron2.config.defaults.get_cfg",
                     "detectron2.config.config.get_cfg"})
_HOOK = "detectron2_config"


class Detectron2Config(Rule):
    """detectron2's `get_cfg()`, and the config frozen after its merges, pass through `porter_runtime.detectron2_config`.

    What:
    Wraps each call of detectron2's `get_cfg()` in `porter_runtime.detectron2_config(...)`,
    and `cfg.freeze()` of a name assigned from it in the same file in
    `porter_runtime.detectron2_config(cfg).freeze()`: the YAML files merged in between
    may set the device or AMP again.

    Why:
    A project built on an installed detectron2 (Mask2Former, MaskFormer, Detic) starts
    from `get_cfg()`, whose `MODEL.DEVICE` default is `"cuda"`, and merges YAML files
    that often set `SOLVER.AMP.ENABLED: True`. Neither value is in the repository's
    Python: off CUDA `build_model` stops with "Torch not compiled with CUDA enabled",
    and detectron2's `AMPTrainer` asserts "CUDA is required for AMP training"
    (Mask2Former's `train_net.py` and `demo/demo.py`, blind round 18: three silent
    blockers).

    Fix safety:
    Safe. On CUDA `detectron2_config(cfg)` returns `cfg` itself, untouched. Elsewhere
    a `"cuda"` device in the config becomes the resolved one (`"mps"`, `"cpu"`), and
    AMP is turned off with a warning (the run trains in float32), at once and again
    before the code freezes it after its merges. The config stays detectron2's own
    object, changed in place.

    Known limits:
    detectron2's LazyConfig (`train.device = "cuda"` in a Python config file) is not
    covered, nor a config built without `get_cfg()`. A config that is never frozen
    keeps what its merges set after the call.
    """

    code = "TP710"
    name = "detectron2-config"
    safety = Safety.SAFE
    needs = Needs(targets=GET_CFG, calls_only=True)

    valid = [
        # another library's get_cfg
        "from mylib.config import get_cfg\ncfg = get_cfg()\n",
        # already wrapped (a second run)
        "import porter_runtime\nfrom detectron2.config import get_cfg\ncfg = porter_runtime.detectron2_config(get_cfg())\n",
    ]
    invalid = [
        Example(  # Mask2Former's train_net.py
            dedent("""\
                from detectron2.config import get_cfg
                from detectron2.projects.deeplab import add_deeplab_config

                from mask2former import add_maskformer2_config


                def setup(args):
                    cfg = get_cfg()
                    add_deeplab_config(cfg)
                    add_maskformer2_config(cfg)
                    cfg.merge_from_file(args.config_file)
                    cfg.merge_from_list(args.opts)
                    cfg.freeze()
                    return cfg
                """),
            dedent("""\
                import porter_runtime
                from detectron2.config import get_cfg
                from detectron2.projects.deeplab import add_deeplab_config

                from mask2former import add_maskformer2_config


                def setup(args):
                    cfg = porter_runtime.detectron2_config(get_cfg())
                    add_deeplab_config(cfg)
                    add_maskformer2_config(cfg)
                    cfg.merge_from_file(args.config_file)
                    cfg.merge_from_list(args.opts)
                    porter_runtime.detectron2_config(cfg).freeze()
                    return cfg
                """),
        ),
        Example(
            "import detectron2.config as d2config\n\ncfg = d2config.get_cfg()\ncfg.merge_from_file('configs/base.yaml')\n",
            "import porter_runtime\nimport detectron2.config as d2config\n\n"
            "cfg = porter_runtime.detectron2_config(d2config.get_cfg())\ncfg.merge_from_file('configs/base.yaml')\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._inside_hook = 0
        self._configs: set[str] = set()  # names assigned from get_cfg()

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if isinstance(value, cst.Call) and _is_hook(value.func) and value.args:
            value = value.args[0].value
        if isinstance(value, cst.Call) and self.qualname(value.func) in GET_CFG:
            self._configs.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))

    def visit_Call(self, node: cst.Call) -> None:
        if _is_hook(node.func):
            self._inside_hook += 1

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if _is_hook(original.func):
            self._inside_hook -= 1
            return updated
        func = original.func
        if isinstance(func, cst.Attribute) and func.attr.value == "freeze" and not original.args \
                and isinstance(func.value, cst.Name) and func.value.value in self._configs:
            frozen = updated.func.with_changes(value=self.runtime_call(_HOOK, updated.func.value))
            return self.rewrite(original, updated.with_changes(func=frozen),
                                "the config's YAML files may choose CUDA again (MODEL.DEVICE, AMP): off CUDA the "
                                "runtime chooses before it is frozen; on CUDA it is the config itself")
        if self._inside_hook or self.qualname(original.func) not in GET_CFG:
            return updated
        return self.rewrite(original, self.runtime_call(_HOOK, updated),
                            "detectron2's defaults choose CUDA (MODEL.DEVICE, AMP): off CUDA the runtime "
                            "chooses the device instead; on CUDA it is the config itself")


def _is_hook(func: cst.BaseExpression) -> bool:
    """``porter_runtime.detectron2_config``: the call a first run wrote."""
    return isinstance(func, cst.Attribute) and func.attr.value == _HOOK \
        and isinstance(func.value, cst.Name) and func.value.value == "porter_runtime"
