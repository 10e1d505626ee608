"""transformers' own `TrainingArguments` filled by `HfArgumentParser` from the command line (TP709)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.families.thirdparty.hf_names import TRAINING_ARGS
from porter.rulebase.rule import Example, Needs, Rule, Safety

#: The parsers that build argument dataclasses from the command line.
PARSERS = frozenset({"transformers.HfArgumentParser", "transformers.hf_argparser.HfArgumentParser",
                     "trl.TrlParser", "trl.scripts.utils.TrlParser"})
_HOOK = "training_arguments_class"


class HfArgumentParserTrainingArgs(Rule):
    """`HfArgumentParser((..., TrainingArguments))` gets `porter_runtime.training_arguments_class(TrainingArguments)`.

    What:
    In `HfArgumentParser(...)` (and TRL's `TrlParser(...)`), wraps transformers' own
    `TrainingArguments` (or `Seq2SeqTrainingArguments`, or a TRL config such as
    `SFTConfig`) in `porter_runtime.training_arguments_class(...)`.

    Why:
    The parser fills the class from the command line, so the README's `--tf32 True`,
    `--bf16` on MPS, or `--fsdp ... --fsdp_config fsdp_config.json` (whose
    `sync_module_states` accelerate broadcasts from a CUDA, XPU or NPU device only)
    reach transformers in no literal a rule can port, and it stops in
    `TrainingArguments.__post_init__` off CUDA (Liger-Kernel's examples, blind round 10).
    A repository's own subclass gets the same call from TP708.

    Fix safety:
    Safe. On CUDA `training_arguments_class` returns the class itself. Elsewhere it
    returns a subclass with the same name, fields and checks, whose `__post_init__`
    first calls `porter_runtime.training_arguments` (what it changes off CUDA is listed
    at TP708); Trainer takes it as the class, and it pickles as the class.

    Known limits:
    Only the class named in the parser's call is seen, not one held in a variable.
    """

    code = "TP709"
    name = "hf-argument-parser"
    safety = Safety.SAFE
    needs = Needs(targets=PARSERS, calls_only=True)

    valid = [
        "from transformers import HfArgumentParser\nparser = HfArgumentParser((ModelArguments, DataArguments))\n",
        # a lookalike: another library's parser and class
        "from mylib import HfArgumentParser, TrainingArguments\nparser = HfArgumentParser((TrainingArguments,))\n",
        Example(  # the repository's own subclass: TP708 ports the class itself
            "from transformers import HfArgumentParser\nfrom args import TrainingArguments\n"
            "parser = HfArgumentParser((ModelArguments, TrainingArguments))\n"),
    ]
    invalid = [
        Example(  # Liger-Kernel's examples/huggingface/training.py, launched with --bf16 --fsdp_config
            dedent("""\
                import transformers


                def train():
                    parser = transformers.HfArgumentParser((transformers.TrainingArguments, CustomArguments))
                    training_args, custom_args = parser.parse_args_into_dataclasses()
                    return training_args
                """),
            dedent("""\
                import porter_runtime
                import transformers


                def train():
                    parser = transformers.HfArgumentParser((porter_runtime.training_arguments_class(transformers.TrainingArguments), CustomArguments))
                    training_args, custom_args = parser.parse_args_into_dataclasses()
                    return training_args
                """),
        ),
        Example(  # open-r1's sft.py
            "from trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser\n\n"
            "parser = TrlParser((ScriptArguments, SFTConfig, ModelConfig))\n",
            "import porter_runtime\nfrom trl import ModelConfig, ScriptArguments, SFTConfig, TrlParser\n\n"
            "parser = TrlParser((ScriptArguments, porter_runtime.training_arguments_class(SFTConfig), ModelConfig))\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not original.args or self.qualname(original.func) not in PARSERS:
            return updated
        at = next((i for i, a in enumerate(original.args) if a.keyword is None or a.keyword.value == "dataclass_types"),
                  None)
        if at is None:
            return updated
        value = updated.args[at].value
        if isinstance(value, (cst.Tuple, cst.List)):
            elements = [e.with_changes(value=self._hooked(e.value)) if isinstance(e, cst.Element) else e
                        for e in value.elements]
            new_value: cst.BaseExpression = value.with_changes(elements=elements)
        else:
            new_value = self._hooked(value)
        if new_value.deep_equals(value):
            return updated
        args = list(updated.args)
        args[at] = args[at].with_changes(value=new_value)
        return self.rewrite(original, updated.with_changes(args=args), "transformers checks the command line's "
                            "CUDA-only options (--tf32, FSDP's module-state sync) in this class: off CUDA it asks "
                            "the runtime first; on CUDA it is the class itself")

    def _hooked(self, node: cst.BaseExpression) -> cst.BaseExpression:
        return self.runtime_call(_HOOK, node) if self.qualname(node) in TRAINING_ARGS else node
