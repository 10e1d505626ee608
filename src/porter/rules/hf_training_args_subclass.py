"""A repository's `TrainingArguments` subclass, filled from the command line (TP708)."""

from __future__ import annotations

import re
from textwrap import dedent

import libcst as cst

from porter.rulebase.evidence import Uses
from porter.rulebase.families.thirdparty.hf_names import TRAINING_ARGS as _ARGUMENTS
from porter.rulebase.rule import Example, Needs, Rule, Safety

_HOOK = "training_arguments"
_BASE_WORDS = rb"(?:TrainingArguments|SFTConfig|DPOConfig|GRPOConfig|RewardConfig|ORPOConfig|KTOConfig)"
#: A class that names one of them among its bases, or an alias of one imported (``as``).
_SUBCLASSES = (re.compile(rb"\bclass\s+\w+\s*\([^)]*?" + _BASE_WORDS + rb"\b"),
               re.compile(_BASE_WORDS + rb"\s+as\s+\w+"))


class HfTrainingArgumentsSubclass(Rule):
    """A `TrainingArguments` subclass first asks `porter_runtime.training_arguments(self)` in its `__post_init__`.

    What:
    In a class that subclasses `transformers.TrainingArguments` (or
    `Seq2SeqTrainingArguments`, or a TRL config), adds
    `porter_runtime.training_arguments(self)` as the first statement of its
    `__post_init__`, and adds that method (calling `super().__post_init__()`) where the
    class has none.

    Why:
    `HfArgumentParser` fills the class from the command line, so the README's
    `--tf32 True` and `--fsdp "full_shard auto_wrap"` reach transformers in no literal
    a rule can port. Off CUDA transformers then raises `--tf32 requires Ampere or a
    newer GPU arch`, and accelerate's FSDP plugin `no available devices found, must be
    one of XPU, CUDA, or NPU` (for syncing module states); a `paged_adamw_32bit`
    default fails where Trainer builds bitsandbytes' optimizer, and a config's
    `use_liger_kernel: true` (open-r1's SFT recipes) where Trainer imports Liger's
    Triton kernels.

    Fix safety:
    Safe. On CUDA the helper does nothing, and a `__post_init__` that only calls
    `super().__post_init__()` is what the dataclass ran before. Off CUDA it unsets
    `tf32`, has FSDP skip the module-state broadcast (every rank loads the same
    weights), and replaces bitsandbytes' AdamW (`optim="paged_adamw_32bit"`, a
    class default of QLoRA-style scripts, or the 8-bit ones) with `"adamw_torch"` and
    a warning: the same AdamW update, its state in 32 bits. It unsets
    `use_liger_kernel` and `deepspeed` with a warning: the model's own layers compute
    what Liger's fused ones do, and Trainer trains without ZeRO. Where the installed
    transformers refuses `fp16` off CUDA (before 4.4x), `fp16` becomes `bf16` with a
    warning where bf16 is taken (the CPU), else float32: mixed precision stays on, and
    a script that asserts one of the two (Firefly) still finds one.

    Known limits:
    Only classes that name one of these bases directly are seen; a `TrainingArguments`
    made in code is TP704's and TP705's.
    """

    code = "TP708"
    name = "hf-training-args-subclass"
    safety = Safety.SAFE
    # whole_file: the rule edits a method (`__post_init__`) the engine would otherwise leave out
    needs = Needs(targets=_ARGUMENTS, evidence=Uses(_ARGUMENTS), byte_patterns=_SUBCLASSES, whole_file=True)

    valid = [
        "import transformers\nargs = transformers.TrainingArguments(output_dir='out')\n",
        "from dataclasses import dataclass\n\n\n@dataclass\nclass ModelArguments:\n    name: str = 'x'\n",
    ]
    invalid = [
        Example(  # Stanford Alpaca's train.py, parsed by HfArgumentParser from the README's command
            dedent("""\
                from dataclasses import dataclass, field
                from typing import Optional

                import transformers


                @dataclass
                class TrainingArguments(transformers.TrainingArguments):
                    cache_dir: Optional[str] = field(default=None)
                    optim: str = field(default="adamw_torch")
                    model_max_length: int = field(default=512)
                """),
            dedent("""\
                import porter_runtime
                from dataclasses import dataclass, field
                from typing import Optional

                import transformers


                @dataclass
                class TrainingArguments(transformers.TrainingArguments):
                    cache_dir: Optional[str] = field(default=None)
                    optim: str = field(default="adamw_torch")
                    model_max_length: int = field(default=512)

                    def __post_init__(self):
                        porter_runtime.training_arguments(self)
                        super().__post_init__()
                """),
        ),
        Example(  # a __post_init__ of its own: the call goes first, after the docstring
            dedent("""\
                from dataclasses import dataclass

                from transformers import Seq2SeqTrainingArguments


                @dataclass
                class Args(Seq2SeqTrainingArguments):
                    def __post_init__(self):
                        \"\"\"Scale the learning rate with the batch.\"\"\"
                        super().__post_init__()
                        self.learning_rate *= self.per_device_train_batch_size / 8
                """),
            dedent("""\
                import porter_runtime
                from dataclasses import dataclass

                from transformers import Seq2SeqTrainingArguments


                @dataclass
                class Args(Seq2SeqTrainingArguments):
                    def __post_init__(self):
                        \"\"\"Scale the learning rate with the batch.\"\"\"
                        porter_runtime.training_arguments(self)
                        super().__post_init__()
                        self.learning_rate *= self.per_device_train_batch_size / 8
                """),
        ),
    ]

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.BaseStatement:
        if not any(self.matches(base.value) for base in original.bases if base.keyword is None):
            return updated
        body = list(updated.body.body)  # type: ignore[union-attr]
        at = next((i for i, s in enumerate(body) if isinstance(s, cst.FunctionDef) and s.name.value == "__post_init__"),
                  None)
        call = cst.SimpleStatementLine([cst.Expr(self.runtime_call(_HOOK, cst.Name("self")))])
        if at is None:
            method = cst.FunctionDef(
                name=cst.Name("__post_init__"),
                params=cst.Parameters([cst.Param(cst.Name("self"))]),
                body=cst.IndentedBlock([call, cst.parse_statement("super().__post_init__()")]),
                leading_lines=[cst.EmptyLine(indent=False)])
            body.append(method)
            message = "a __post_init__ that asks the runtime first (nothing on CUDA) and then runs the parent's"
        else:
            method = body[at]
            if self._asks_already(method):
                return updated
            inner = list(method.body.body)  # type: ignore[union-attr]
            first = 1 if inner and _is_docstring(inner[0]) else 0
            body[at] = method.with_changes(body=method.body.with_changes(body=[*inner[:first], call, *inner[first:]]))
            message = "its __post_init__ asks the runtime first (nothing on CUDA)"
        new = updated.with_changes(body=updated.body.with_changes(body=body))
        return self.rewrite(original, new, "transformers refuses CUDA-only options (--tf32, FSDP's module-state "
                            f"sync) given on the command line off CUDA: {message}")

    def _asks_already(self, method: cst.FunctionDef) -> bool:
        for statement in method.body.body:  # type: ignore[union-attr]
            for small in getattr(statement, "body", ()) if isinstance(statement, cst.SimpleStatementLine) else ():
                if (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
                        and self.qualname(small.value.func) == f"porter_runtime.{_HOOK}"):
                    return True
        return False


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))
