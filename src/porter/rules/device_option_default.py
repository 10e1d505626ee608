"""A ``"cuda"`` default of a device option or setting (PT005): an argparse or click default,
a dataclass field, a config dict's entry."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.families.devices.specs import (
    DEVICE_METHODS,
    replace_device_keyword,
    runtime_device,
)
from porter.rulebase.rule import (
    CUDA_SPEC,
    Example,
    Needs,
    Rule,
    Safety,
    cuda_spec,
    positional,
    string_value,
)


def _field_default(rule: Rule, original, updated):
    """``device: str = field(default="cuda")``: the field's default names the resolved device."""
    call = updated.value
    default = next((k for k in call.args if k.keyword is not None and k.keyword.value == "default"), None)
    spec = cuda_spec(default.value) if default is not None else None
    if spec is None:
        return updated
    args = [a.with_changes(value=runtime_device(rule, spec[0], as_string=True)) if a is default else a
            for a in call.args]
    new = updated.with_changes(value=call.with_changes(args=args))
    return rule.rewrite(original, new, "a literal CUDA device default of a dataclass field now names the resolved device")


def _mentions_device(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.Name):
        return "device" in node.value.lower()
    if isinstance(node, cst.Attribute):
        return "device" in node.attr.value.lower()
    value = string_value(node)
    return value is not None and "device" in value.lower()


class DeviceOptionDefault(Rule):
    """A `"cuda"` default of a device option or setting becomes the resolved device's name.

    What:
    Rewrites the literal `"cuda"` / `"cuda:N"` string where a device setting is
    defined: `parser.add_argument("--device", default="cuda")`, a config class or
    dataclass field `device: str = "cuda"` (also `field(default="cuda")`), an
    assignment `DEVICE = "cuda"`, a dict
    entry `{"device": "cuda"}`, and `device="cuda"` passed to a non-torch callable.
    The same goes for a function parameter's default (`def train(device="cuda")`).
    The value becomes `porter_runtime.device_str()`: the resolved device's name,
    resolved without the info line, since such a value is often evaluated while
    the module is imported.

    Why:
    The string travels to `torch.device(...)` or `.to(...)` later and fails there
    without CUDA; fixing it where it is defined fixes every use, and a user can still
    pass `--device cpu`.

    Fix safety:
    Safe. On CUDA, `porter_runtime.device_str()` is `"cuda"` (and
    `porter_runtime.device_str(1)` is `"cuda:1"`): the same string as before, so
    comparisons such as `args.device == "cuda"` behave as before.

    Known limits:
    Only names, attributes, dict keys and options that contain "device" are matched.
    """

    code = "PT005"
    name = "device-option-default"
    safety = Safety.SAFE
    # Not "device": a setting is matched case-insensitively (DEVICE, default_device).
    needs = Needs(words=frozenset({"cuda"}), strings=CUDA_SPEC)

    valid = [
        "parser.add_argument('--device', default='cpu')\n",
        "mode = 'cuda'\n",
        "parser.add_argument('--backend', default='cuda')\n",
        "import torch\nx = torch.zeros(1, device=dev)\n",
        # lookalikes: not a CUDA device spec, or not a device setting
        "device = 'cudnn'\ndef f(backend='cuda'):\n    pass\n",
        # a switch that asks about CUDA itself is PT201's (or its flag's finding)
        "device = 'cuda' if use_cuda else 'cpu'\n",
        # two CUDA arms, or an arm that is not a literal: not a switch between CUDA and another device
        "device = 'cuda:0' if rank == 0 else 'cuda:1'\ndevice = 'cuda' if gpu else fallback\n",
    ]
    invalid = [
        Example(  # GroundingDINO's demo: a --cpu-only switch; without it a Mac now runs on MPS
            dedent("""\
                import torch


                def main(args):
                    cpu_only = args.cpu_only
                    args.device = "cuda" if not cpu_only else "cpu"
                    model = load_model(args.config_file, args.checkpoint_path, cpu_only=cpu_only)
                    return model.to(args.device)
                """),
            dedent("""\
                import porter_runtime
                import torch


                def main(args):
                    cpu_only = args.cpu_only
                    args.device = porter_runtime.device_str() if not cpu_only else "cpu"
                    model = load_model(args.config_file, args.checkpoint_path, cpu_only=cpu_only)
                    return model.to(args.device)
                """),
        ),
        Example("device = 'cpu' if args.no_gpu else 'cuda:0'\n",
                "import porter_runtime\ndevice = 'cpu' if args.no_gpu else porter_runtime.device_str(0)\n"),
        Example(
            "parser.add_argument('--device', default='cuda')\n",
            "import porter_runtime\nparser.add_argument('--device', default=porter_runtime.device_str())\n",
        ),
        Example(
            "from dataclasses import dataclass\n\n@dataclass\nclass Config:\n    device: str = 'cuda:0'\n",
            "import porter_runtime\nfrom dataclasses import dataclass\n\n@dataclass\nclass Config:\n"
            "    device: str = porter_runtime.device_str(0)\n",
        ),
        Example(  # the field's default, read wherever the config goes (TRL / PEFT scripts)
            dedent("""\
            from dataclasses import dataclass, field as dc_field

            @dataclass
            class ScriptArguments:
                optim: str = dc_field(default="paged_adamw_32bit")
                device: str = dc_field(default="cuda", metadata={"help": "where to train"})
            """),
            dedent("""\
            import porter_runtime
            from dataclasses import dataclass, field as dc_field

            @dataclass
            class ScriptArguments:
                optim: str = dc_field(default="paged_adamw_32bit")
                device: str = dc_field(default=porter_runtime.device_str(), metadata={"help": "where to train"})
            """),
        ),
        Example(
            "DEVICE = \"cuda\"\ncfg = {'device': 'cuda'}\n",
            "import porter_runtime\nDEVICE = porter_runtime.device_str()\ncfg = {'device': porter_runtime.device_str()}\n",
        ),
        Example(
            "def train(model, device='cuda:1', steps=10):\n    return model.to(device)\n",
            "import porter_runtime\ndef train(model, device=porter_runtime.device_str(1), steps=10):\n"
            "    return model.to(device)\n",
        ),
        Example(
            "import torch as t\ntrainer = Trainer(model, device='cuda')\n",
            "import porter_runtime\nimport torch as t\ntrainer = Trainer(model, device=porter_runtime.device_str())\n",
        ),
        Example(
            "import torch\n\nDEVICE = \"cuda\"\nmodel = torch.nn.Linear(2, 2).to(DEVICE)\n",
            "import porter_runtime\nimport torch\n\nDEVICE = porter_runtime.device_str()\n"
            "model = torch.nn.Linear(2, 2).to(DEVICE)\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if isinstance(func, cst.Attribute) and func.attr.value == "add_argument":
            if any(_mentions_device(a.value) for a in positional(original)):
                return replace_device_keyword(self, original, updated, as_string=True, keyword="default")
            return updated
        name = self.qualname(func)
        if name is not None and (name == "torch" or name.startswith("torch.")):
            return updated  # PT004
        if isinstance(func, cst.Attribute) and func.attr.value in DEVICE_METHODS:
            return updated  # PT003
        return replace_device_keyword(self, original, updated, as_string=True)

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if len(original.targets) != 1 or not _mentions_device(original.targets[0].target):
            return updated
        return self._replace_value(original, updated)

    def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.AnnAssign:
        if updated.value is None or not _mentions_device(original.target):
            return updated
        return self._replace_value(original, updated)

    def leave_Param(self, original: cst.Param, updated: cst.Param) -> cst.Param:
        if updated.default is None or not _mentions_device(original.name):
            return updated
        spec = cuda_spec(updated.default)
        if spec is None:
            return updated
        new = updated.with_changes(default=runtime_device(self, spec[0], as_string=True))
        return self.rewrite(original, new, "a literal CUDA device default now names the resolved device")

    def leave_DictElement(self, original: cst.DictElement, updated: cst.DictElement) -> cst.DictElement:
        if not _mentions_device(original.key) or string_value(original.key) is None:
            return updated
        return self._replace_value(original, updated)

    def _replace_value(self, original, updated):
        if isinstance(original.value, cst.Call) and isinstance(updated.value, cst.Call) \
                and self.qualname(original.value.func) == "dataclasses.field":
            return _field_default(self, original, updated)
        spec = cuda_spec(updated.value)
        if spec is None:
            return self._replace_arm(original, updated)
        new = updated.with_changes(value=runtime_device(self, spec[0], as_string=True))
        return self.rewrite(original, new, "a literal CUDA device setting now names the resolved device")

    def _replace_arm(self, original, updated):
        """``device = "cuda" if not cpu_only else "cpu"``: the user's own switch between CUDA
        and another device. The CUDA arm names the resolved device; the switch and the other
        arm stay. A test that asks about CUDA itself (``torch.cuda.is_available()``,
        ``use_cuda``) is PT201's, or a flag's finding."""
        choice = updated.value
        if not isinstance(choice, cst.IfExp) or "cuda" in cst.Module([]).code_for_node(choice.test).lower():
            return updated
        arms = {"body": choice.body, "orelse": choice.orelse}
        specs = {name: cuda_spec(arm) for name, arm in arms.items()}
        cuda = [name for name, spec in specs.items() if spec is not None]
        other = [name for name in arms if name not in cuda]
        if len(cuda) != 1 or string_value(arms[other[0]]) is None:
            return updated
        value = choice.with_changes(**{cuda[0]: runtime_device(self, specs[cuda[0]][0], as_string=True)})
        return self.rewrite(original, updated.with_changes(value=value),
                            "the CUDA arm of the code's own device switch now names the resolved device")
