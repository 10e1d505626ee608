"""A flash attention name held for transformers' `attn_implementation` before the loader sees it (TP707)."""

from __future__ import annotations

from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.evidence import Keyword, String
from porter.rulebase.families.thirdparty.hf_names import FLASH as _FLASH
from porter.rulebase.families.thirdparty.hf_names import LOADERS as _LOADERS  # TP701's, keyword and all
from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value

_SLOT = "attn_implementation"
#: A flash name in the file, or a value handed on under the name (``dict(attn_implementation=
#: model_args.attn_implementation)``, whose flash name is in a YAML config).
_WHERE = String(exact=_FLASH) | Keyword(_SLOT) | String(exact=frozenset({_SLOT}))
#: Values read from somewhere else (a config, the command line): followed, not literals.
_HELD = (cst.Attribute, cst.Subscript)  # a bare name is a parameter passed on: its default is followed


class HfAttnImplementationValue(Rule):
    """A flash attention name bound to `attn_implementation` on its way to the loader asks `porter_runtime.attn_implementation`.

    What:
    Rewrites `"flash_attention_2"` (or `"flash_attention_3"`) where it is bound to
    something named `attn_implementation` rather than passed to the loader itself:
    a key of a kwargs dict (`{"attn_implementation": "flash_attention_2"}`), a keyword
    of `dict(...)` or of the repository's own wrapper (`load_model(path,
    attn_implementation="flash_attention_2")`), a parameter's default, an assignment or
    a dataclass field, and an argparse `--attn_implementation` default (also under a
    group, OpenRLHF's `--ds.attn_implementation`). The value becomes
    `porter_runtime.attn_implementation("flash_attention_2")`.

    Why:
    The value reaches `from_pretrained(..., **model_kwargs)` or
    `from_pretrained(..., attn_implementation=attn_implementation)` later, where
    TP701 sees no literal; transformers then refuses to load the model without
    flash-attn (`ImportError: FlashAttention2 has been toggled on, but it cannot be
    used ...`), which is every Mac.

    Fix safety:
    Safe. On CUDA with flash_attn importable the helper returns the name unchanged;
    elsewhere `"sdpa"`, PyTorch's scaled_dot_product_attention (TP701's reasoning).
    A comparison with the name (`if args.attn_implementation == "flash_attention_2":`)
    is left as written, so off CUDA it takes the branch written for other kernels.

    A value read from elsewhere on its way to the loader (`dict(...,
    attn_implementation=model_args.attn_implementation)`, the same keyword of the loader
    itself, even a variable there, whose value a flag may give; `config._attn_implementation
    = value`; or a `{"attn_implementation": cfg.attn}` entry) is wrapped the same way: the
    flash name sits in a YAML recipe (alignment-handbook's `attn_implementation:
    flash_attention_2`, blind round 5) that no Python literal shows.

    Known limits:
    Only the name `attn_implementation` is followed (a config key `attn: flash_attention_2`
    handed on under another name is not); lists of choices are left alone.
    """

    code = "TP707"
    name = "hf-attn-implementation-value"
    safety = Safety.SAFE
    needs = Needs(words=frozenset({_SLOT}), evidence=_WHERE, unit=_WHERE)

    valid = [
        "model = AutoModel.from_pretrained(name, attn_implementation='flash_attention_2')\n",  # TP701's
        "model = AutoModel.from_pretrained(name, attn_implementation=None)\n",
        "config = build(name, attn_implementation=args.attn)\n",  # not on its way to a loader: a wrapper's own
        "model = AutoModel.from_pretrained(name, attn_implementation=porter_runtime.attn_implementation(a))\n",
        "if args.attn_implementation == 'flash_attention_2':\n    pass\n",
        "parser.add_argument('--attn', choices=['eager', 'sdpa', 'flash_attention_2'])\n",
        "kwargs = {'attn': 'flash_attention_2'}\n",
        "attn_implementation = 'sdpa'\n",
        "model = AutoModel.from_pretrained(name, attn_implementation=None)\nconfig._attn_implementation = None\n",
    ]
    invalid = [
        Example(  # a kwargs dict built first, then splatted into the loader
            dedent("""\
                import torch
                from transformers import AutoModelForCausalLM

                model_kwargs = dict(
                    torch_dtype=torch.bfloat16,
                    attn_implementation="flash_attention_2",
                    use_cache=False,
                )
                model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, **model_kwargs)
                """),
            dedent("""\
                import porter_runtime
                import torch
                from transformers import AutoModelForCausalLM

                model_kwargs = dict(
                    torch_dtype=torch.bfloat16,
                    attn_implementation=porter_runtime.attn_implementation("flash_attention_2"),
                    use_cache=False,
                )
                model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, **model_kwargs)
                """),
        ),
        Example(  # the repository's own wrapper, its default and a dataclass field; at the loader, what a
            # caller passed instead of the default (a flag's value) too
            dedent("""\
                from dataclasses import dataclass, field

                from transformers import AutoModelForCausalLM


                @dataclass
                class ModelArguments:
                    attn_implementation: str = field(default="flash_attention_2")


                def load_policy(path, attn_implementation="flash_attention_2"):
                    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=attn_implementation)
                """),
            dedent("""\
                import porter_runtime
                from dataclasses import dataclass, field

                from transformers import AutoModelForCausalLM


                @dataclass
                class ModelArguments:
                    attn_implementation: str = field(default=porter_runtime.attn_implementation("flash_attention_2"))


                def load_policy(path, attn_implementation=porter_runtime.attn_implementation("flash_attention_2")):
                    return AutoModelForCausalLM.from_pretrained(path, attn_implementation=porter_runtime.attn_implementation(attn_implementation))
                """),
        ),
        Example(  # alignment-handbook's get_model: the name comes from a YAML recipe
            dedent("""\
                from transformers import AutoModelForCausalLM


                def get_model(model_args, training_args):
                    model_kwargs = dict(
                        revision=model_args.model_revision,
                        attn_implementation=model_args.attn_implementation,
                        use_cache=False if training_args.gradient_checkpointing else True,
                    )
                    return AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, **model_kwargs)
                """),
            dedent("""\
                import porter_runtime
                from transformers import AutoModelForCausalLM


                def get_model(model_args, training_args):
                    model_kwargs = dict(
                        revision=model_args.model_revision,
                        attn_implementation=porter_runtime.attn_implementation(model_args.attn_implementation),
                        use_cache=False if training_args.gradient_checkpointing else True,
                    )
                    return AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, **model_kwargs)
                """),
        ),
        Example(
            "model = AutoModel.from_pretrained(path, attn_implementation=cfg['attn'])\n",
            "import porter_runtime\n"
            "model = AutoModel.from_pretrained(path, attn_implementation=porter_runtime.attn_implementation(cfg['attn']))\n",
        ),
        Example(
            "model_kwargs = {'attn_implementation': 'flash_attention_3'}\n"
            "parser.add_argument('--attn_implementation', type=str, default='flash_attention_2')\n",
            "import porter_runtime\n"
            "model_kwargs = {'attn_implementation': porter_runtime.attn_implementation('flash_attention_3')}\n"
            "parser.add_argument('--attn_implementation', type=str, "
            "default=porter_runtime.attn_implementation('flash_attention_2'))\n",
        ),
        Example(  # OpenRLHF: the flag under a group, and the value the command line gave, at the loader and the config
            dedent("""\
                import argparse

                from transformers import AutoModelForCausalLM

                parser = argparse.ArgumentParser()
                parser.add_argument("--ds.attn_implementation", type=str, default="flash_attention_2")


                def load(pretrain, attn_implementation, config):
                    attn_impl = attn_implementation
                    config._attn_implementation = attn_implementation
                    return AutoModelForCausalLM.from_pretrained(pretrain, attn_implementation=attn_impl)
                """),
            dedent("""\
                import porter_runtime
                import argparse

                from transformers import AutoModelForCausalLM

                parser = argparse.ArgumentParser()
                parser.add_argument("--ds.attn_implementation", type=str, default=porter_runtime.attn_implementation("flash_attention_2"))


                def load(pretrain, attn_implementation, config):
                    attn_impl = attn_implementation
                    config._attn_implementation = porter_runtime.attn_implementation(attn_implementation)
                    return AutoModelForCausalLM.from_pretrained(pretrain, attn_implementation=porter_runtime.attn_implementation(attn_impl))
                """),
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._bound: set[int] = set()  # ids of the flash strings bound to `attn_implementation`
        self._held: set[int] = set()  # ids of values read from elsewhere, on their way to a loader

    def visit_DictElement(self, node: cst.DictElement) -> None:
        if string_value(node.key) == _SLOT:
            self._bind(node.value)
            self._hold(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        loader = isinstance(func, cst.Attribute) and func.attr.value in _LOADERS
        if loader or (isinstance(func, cst.Name) and func.value == "dict"):
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value == _SLOT:
                    self._hold(arg.value, name=loader)  # at the loader, a variable too (its value may come from the command line)
        if loader:
            return  # TP701 rewrites the loader's own keyword
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value == _SLOT:
                self._bind(arg.value)
        if isinstance(func, cst.Attribute) and func.attr.value == "add_argument" and any(
                _is_option(string_value(a.value)) for a in node.args if a.keyword is None):
            default = next((a for a in node.args if a.keyword is not None and a.keyword.value == "default"), None)
            if default is not None:
                self._bind(default.value)
        if isinstance(func, cst.Name) and func.value == "field" and self._field_target is not None:
            default = next((a for a in node.args if a.keyword is not None and a.keyword.value == "default"), None)
            if default is not None:
                self._bind(default.value)

    _field_target: Optional[str] = None

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if _target_name(node.target) == _SLOT and node.value is not None:
            self._bind(node.value)
            self._field_target = _SLOT

    def leave_AnnAssign(self, original: cst.AnnAssign, updated: cst.AnnAssign) -> cst.BaseSmallStatement:
        self._field_target = None
        return updated

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(_target_name(t.target) == _SLOT for t in node.targets):
            self._bind(node.value)
        if any(isinstance(t.target, cst.Attribute) and t.target.attr.value == f"_{_SLOT}" for t in node.targets):
            self._hold(node.value, name=True)  # `config._attn_implementation = attn_implementation`: what the model reads

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        if id(original.value) not in self._held:
            return updated
        return updated.with_changes(value=self._wrap(original.value, updated.value))

    def visit_Param(self, node: cst.Param) -> None:
        if node.name.value == _SLOT and node.default is not None:
            self._bind(node.default)

    def _bind(self, node: cst.BaseExpression) -> None:
        if string_value(node) in _FLASH:
            self._bound.add(id(node))

    def _hold(self, node: cst.BaseExpression, name: bool = False) -> None:
        if isinstance(node, _HELD) or (name and isinstance(node, cst.Name) and node.value not in ("None", "True", "False")):
            self._held.add(id(node))

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        if id(original.value) not in self._held:
            return updated
        return updated.with_changes(value=self._wrap(original.value, updated.value))

    def leave_DictElement(self, original: cst.DictElement, updated: cst.DictElement) -> cst.DictElement:
        if id(original.value) not in self._held:
            return updated
        return updated.with_changes(value=self._wrap(original.value, updated.value))

    def _wrap(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        new = self.runtime_call("attn_implementation", updated)
        return self.rewrite(original, new, "the attention implementation handed to the loader: its own value on "
                            "CUDA, \"sdpa\" for a flash name elsewhere (transformers refuses flash attention "
                            "without flash-attn)")

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.BaseExpression:
        if id(original) not in self._bound:
            return updated
        new = self.runtime_call("attn_implementation", updated)
        return self.rewrite(original, new, f"`{string_value(original)}` where CUDA has flash-attn, \"sdpa\" "
                            "elsewhere, before the loader sees it")


def _is_option(text: Optional[str]) -> bool:
    """``--attn_implementation``, and the same option under a group (OpenRLHF's
    ``--ds.attn_implementation``) or with dashes (``--attn-implementation``)."""
    if not text or not text.startswith("-"):
        return False
    return text.lstrip("-").replace("-", "_").split(".")[-1] == _SLOT


def _target_name(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None
