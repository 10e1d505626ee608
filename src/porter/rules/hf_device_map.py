"""transformers' `device_map` that puts the model on one CUDA device (TP702)."""

from __future__ import annotations

import re
from textwrap import dedent
from typing import Optional, TypeVar

import libcst as cst

from porter.project.query import Scoped, is_cuda_index
from porter.rulebase.evidence import Calls, CallsMethod, Keyword, String
from porter.rulebase.families.devices.indices import index_source
from porter.rulebase.rule import Example, Needs, Rule, Safety, cuda_spec, keyword, string_value
from porter.rulebase.walk import code_children

#: TP702: a `from_pretrained(...)` call and a `device_map=` keyword, or a loader's
#: keywords gathered first (`{"device_map": {"": local_rank}}`, `dict(device_map=...)`).
_DEVICE_MAP = (CallsMethod("from_pretrained") & Keyword("device_map")) | (Calls("dict") & Keyword("device_map")) | String(
    exact=frozenset({"device_map"}), word="device_map")


def _device_value(rule: Rule, node: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    """The ported value of one device of a device map: ``"cuda[:i]"`` → ``str(device(i))``,
    an integer index ``i`` → ``device(i)``; None for anything else."""
    spec = cuda_spec(node)
    if spec is not None:
        args = [] if spec[0] is None else [cst.Integer(str(spec[0]))]
        return cst.Call(cst.Name("str"), args=[cst.Arg(rule.runtime_call("device", *args))])
    if isinstance(node, cst.Integer):
        return rule.runtime_call("device", node)
    return None


#: a node whose ``value`` is a device map: ``device_map = {...}``, ``"device_map": {...}``
_Holder = TypeVar("_Holder", cst.Assign, cst.DictElement)

_INDEX_WORDS = ("rank", "index", "gpu", "device_id", "cuda")


def _index_like(node: cst.BaseExpression) -> bool:
    """A value whose name says it is a GPU index (``local_rank``, ``args.gpu``,
    ``state.process_index``, ``torch.cuda.current_device()``), not a device object."""
    if isinstance(node, cst.Call):
        node = node.func
    name = node.value if isinstance(node, cst.Name) else node.attr.value if isinstance(node, cst.Attribute) else ""
    return any(word in name.lower() for word in _INDEX_WORDS)


class HfDeviceMap(Scoped, Rule):
    """`device_map="cuda"` / `device_map={"": 0}` name the runtime's device.

    What:
    In `from_pretrained(...)` calls, rewrites a device map that puts the model on one
    CUDA device: `device_map="cuda"` / `"cuda:1"` → `str(porter_runtime.device())` /
    `str(porter_runtime.device(1))`, `device_map=0` → `porter_runtime.device(0)`, and
    the same values inside a dict (`{"": 0}` → `{"": porter_runtime.device(0)}`).
    A dict entry holding a name that the repository model (porter.project.value_flow)
    knows is a CUDA index (`local_rank = int(os.environ["LOCAL_RANK"])`, an index a
    helper returns) becomes `{"": porter_runtime.device(local_rank)}`; another name
    that looks like an index (`{"": state.process_index}`) is reported.

    Why:
    A CUDA device in the map makes accelerate move the weights to CUDA: `Torch not
    compiled with CUDA enabled` on a Mac.

    Fix safety:
    Safe. On CUDA the runtime returns `cuda` / `cuda:i`, which transformers and
    accelerate treat exactly like the string or the index `i`. Elsewhere the weights
    go to MPS or the CPU.

    The same map gathered with a loader's other keywords first, to reach
    `from_pretrained` through `**kwargs` (`model_kwargs = {"device_map": {"": local_rank}}`
    or `dict(device_map=...)`, then `load_model(args, **model_kwargs)`), is ported where
    the dict is written.

    Known limits:
    `"auto"`, `"balanced"` and per-layer maps are left alone (accelerate plans them for
    the devices it finds). A map built in the same function and passed by name
    (`device_map = {"": local_rank}` then `device_map=device_map`) is ported where it is
    built; one built in another function is not followed.
    """

    code = "TP702"
    name = "hf-device-map"
    safety = Safety.SAFE
    # whole_file: the model's kinds are keyed by the enclosing function (Scoped)
    needs = Needs(evidence=_DEVICE_MAP, whole_file=True)

    valid = [
        "model = AutoModel.from_pretrained(name, device_map='auto')\n",
        "model = AutoModel.from_pretrained(name, device_map={'': 'cpu'})\n",
        "model = load(name, device_map='cuda')\n",  # not a loader
        "model = AutoModel.from_pretrained(name, device_map={'': self.device})\n",  # a device object
        "kwargs = {'device_map': 'auto', 'torch_dtype': dtype}\n",
        "def dict(**kw):\n    return kw\nx = dict(device_map='cuda')\n",  # not the builtin
    ]
    invalid = [
        Example(
            "from transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained(name, device_map={\"\": 0}, torch_dtype='auto')\n",
            "import porter_runtime\nfrom transformers import AutoModelForCausalLM\n"
            "model = AutoModelForCausalLM.from_pretrained(name, device_map={\"\": porter_runtime.device(0)}, "
            "torch_dtype='auto')\n",
        ),
        Example(
            "import transformers\nref = transformers.AutoModel.from_pretrained(name, device_map='cuda')\n",
            "import porter_runtime\nimport transformers\n"
            "ref = transformers.AutoModel.from_pretrained(name, device_map=str(porter_runtime.device()))\n",
        ),
        # an index held in a variable the model cannot follow (one file alone): reported (line 1)
        Example("model = AutoModel.from_pretrained(name, device_map={'': local_rank})\n"),
        Example(  # TRL / PEFT scripts: the process's GPU from torchrun's LOCAL_RANK
            dedent("""\
            import os

            from transformers import AutoModelForCausalLM


            def load(name):
                local_rank = int(os.environ["LOCAL_RANK"])
                return AutoModelForCausalLM.from_pretrained(name, device_map={"": local_rank})
            """),
            dedent("""\
            import porter_runtime
            import os

            from transformers import AutoModelForCausalLM


            def load(name):
                local_rank = int(os.environ["LOCAL_RANK"])
                return AutoModelForCausalLM.from_pretrained(name, device_map={"": porter_runtime.device(local_rank)})
            """),
            path="sft.py",
            project=(("utils.py", "import os\n"),),
        ),
        Example("state = PartialState()\nm = AutoModel.from_pretrained(name, device_map={'': state.process_index})\n"),
        Example(  # alpaca-lora: the map built under torchrun, then passed by name
            dedent("""\
            import os

            from transformers import LlamaForCausalLM


            def train(base_model):
                device_map = "auto"
                if int(os.environ.get("WORLD_SIZE", 1)) != 1:
                    device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)}
                return LlamaForCausalLM.from_pretrained(base_model, device_map=device_map)
            """),
            dedent("""\
            import porter_runtime
            import os

            from transformers import LlamaForCausalLM


            def train(base_model):
                device_map = "auto"
                if int(os.environ.get("WORLD_SIZE", 1)) != 1:
                    device_map = {"": porter_runtime.device(int(os.environ.get("LOCAL_RANK") or 0))}
                return LlamaForCausalLM.from_pretrained(base_model, device_map=device_map)
            """),
        ),
        Example(  # the loader's keywords gathered in a dict and passed through a wrapper
            dedent("""\
            import os

            from transformers import AutoModelForCausalLM


            def load_model(name, **kwargs):
                return AutoModelForCausalLM.from_pretrained(name, **kwargs)


            def main(args):
                local_rank = int(os.environ.get("LOCAL_RANK") or 0)
                model_kwargs = {"attn_implementation": args.attn_implementation, "device_map": {"": local_rank}}
                return load_model(args.model_name_or_path, **model_kwargs)
            """),
            dedent("""\
            import porter_runtime
            import os

            from transformers import AutoModelForCausalLM


            def load_model(name, **kwargs):
                return AutoModelForCausalLM.from_pretrained(name, **kwargs)


            def main(args):
                local_rank = int(os.environ.get("LOCAL_RANK") or 0)
                model_kwargs = {"attn_implementation": args.attn_implementation, "device_map": {"": porter_runtime.device(local_rank)}}
                return load_model(args.model_name_or_path, **model_kwargs)
            """),
            path="finetune.py",
            project=(("utils.py", "import os\n"),),
        ),
        Example(
            "model_kwargs = dict(torch_dtype=torch.bfloat16, device_map=\"cuda:0\")\n",
            "import porter_runtime\nmodel_kwargs = dict(torch_dtype=torch.bfloat16, device_map=str(porter_runtime.device(0)))\n",
        ),
    ]

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        super().visit_FunctionDef(node)
        self._functions.append(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._functions.pop()
        return super().leave_FunctionDef(original, updated)

    @property
    def _functions(self) -> list[cst.CSTNode]:
        if not hasattr(self, "_function_stack"):
            self._function_stack: list[cst.CSTNode] = []
            self._map_names: dict[int, set[str]] = {}
        return self._function_stack

    def _maps(self) -> set[str]:
        """The names the enclosing function (or the module) passes as ``device_map=name``."""
        scope = self._functions[-1] if self._functions else self.ctx.module
        if id(scope) not in self._map_names:
            self._map_names[id(scope)] = _passed_maps(scope)
        return self._map_names[id(scope)]

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        """``device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)}`` built first and passed
        by name (``from_pretrained(..., device_map=device_map)``) in the same function."""
        if (len(original.targets) != 1 or not isinstance(original.targets[0].target, cst.Name)
                or not isinstance(original.value, cst.Dict) or not original.value.deep_equals(updated.value)
                or original.targets[0].target.value not in self._maps()):
            return updated
        return self._port_value(original, updated)

    def leave_DictElement(self, original: cst.DictElement, updated: cst.DictElement) -> cst.DictElement:
        """``{"device_map": {"": local_rank}, ...}``: a loader's keywords, gathered first."""
        if string_value(original.key) != "device_map" or not original.value.deep_equals(updated.value):
            return updated
        return self._port_value(original, updated)

    def _port_value(self, original: _Holder, updated: _Holder) -> _Holder:
        """``updated`` with its ``value`` (a device map) ported, or as it is."""
        new_value = self._ported(original.value)
        if new_value is None:
            return updated
        return self.rewrite(original, updated.with_changes(value=new_value),
                            "the model goes to the runtime's device: the same CUDA device on CUDA")

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        arg = keyword(original, "device_map")
        if arg is None:
            return updated
        loader = isinstance(original.func, cst.Attribute) and original.func.attr.value == "from_pretrained"
        # dict(device_map=..., torch_dtype=...): the builtin, not a `dict` the module defines
        gathered = (isinstance(original.func, cst.Name) and original.func.value == "dict"
                    and self.qualname(original.func) is None and not _SHADOWS_DICT.search(self.ctx.source))
        if not (loader or gathered):
            return updated
        index = original.args.index(arg)
        new_value = self._ported(arg.value)
        if new_value is None:
            return updated
        args = list(updated.args)
        args[index] = args[index].with_changes(value=new_value)
        return self.rewrite(original, updated.with_changes(args=args),
                            "the model goes to the runtime's device: the same CUDA device on CUDA")

    def _ported(self, value: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        single = _device_value(self, value)
        if single is not None or not isinstance(value, cst.Dict) or len(value.elements) != 1:
            return single
        element = value.elements[0]
        if not isinstance(element, cst.DictElement) or string_value(element.key) != "":
            return None
        device = _device_value(self, element.value)
        if device is None and (is_cuda_index(self.ctx.project, self.scope, element.value)
                               or index_source(self, element.value)):
            device = self.runtime_call("device", element.value)
        if device is None and _index_like(element.value):
            self.flag(element.value, "the whole model goes to this device index, which means a CUDA "
                      "device; off CUDA there is none",
                      suggestion="{\"\": porter_runtime.device(index)} (the same device on CUDA)")
        return None if device is None else value.with_changes(
            elements=[element.with_changes(value=device)])


_SHADOWS_DICT = re.compile(rb"(?m)^\s*(?:def|class)\s+dict\b|(?<![\w.])dict\s*=(?!=)")


def _passed_maps(scope: cst.CSTNode) -> set[str]:
    """The names a scope passes as ``device_map=name`` to ``from_pretrained`` (its own
    statements, not those of functions inside it)."""
    names: set[str] = set()
    stack = list(code_children(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "from_pretrained":
            arg = keyword(node, "device_map")
            if arg is not None and isinstance(arg.value, cst.Name):
                names.add(arg.value.value)
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            stack.extend(code_children(node))
    return names

