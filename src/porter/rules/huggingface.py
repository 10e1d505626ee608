"""Hugging Face transformers options that assume CUDA: flash attention, device maps,
bitsandbytes quantisation, Trainer's tf32 / paged optimizers / DeepSpeed."""

from __future__ import annotations

import re

import libcst as cst

from porter.rulebase.evidence import CallsMethod, Keyword, String, Uses
from porter.rulebase.rule import (
    Example,
    Needs,
    Rule,
    Safety,
    keyword,
    string_value,
)
from porter.rulebase.syntax import is_true
from porter.rulebase.families.thirdparty.hf_names import FLASH, LOADERS, TRAINING_ARGS
from porter.rulebase.families.thirdparty.uses import example_code

#: TP701: a loader call with `use_flash_attention_2=` or `attn_implementation=` and a
#: flash attention string (the keyword and the string anywhere in the file or unit).
_FLASH_LOADER = CallsMethod(LOADERS) & (
    Keyword("use_flash_attention_2") | (Keyword("attn_implementation") & String(exact=FLASH)))
#: TP703: `BitsAndBytesConfig`, or a loader call with `load_in_4bit=` / `load_in_8bit=`.
_QUANTISES = Uses("transformers.BitsAndBytesConfig") | (
    CallsMethod(LOADERS) & Keyword("load_in_4bit", "load_in_8bit"))


def _loader(call: cst.Call) -> bool:
    """``X.from_pretrained(...)`` / ``X.from_config(...)`` on any receiver."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in LOADERS


class HfFlashAttention(Rule):
    """`attn_implementation="flash_attention_2"` asks `porter_runtime.attn_implementation`.

    What:
    In `from_pretrained(...)` / `from_config(...)` calls, rewrites
    `attn_implementation="flash_attention_2"` (or `"flash_attention_3"`) into
    `attn_implementation=porter_runtime.attn_implementation("flash_attention_2")`, and
    the older `use_flash_attention_2=True` into the same keyword.

    Why:
    transformers refuses to load the model where flash-attn is missing
    (`ImportError: FlashAttention2 has been toggled on, but it cannot be used ...`),
    which is every Mac.

    Fix safety:
    Safe. On CUDA with flash_attn importable the helper returns the name unchanged,
    so the same attention kernel runs (`use_flash_attention_2=True` is transformers'
    deprecated spelling of exactly that). Elsewhere it returns `"sdpa"`, PyTorch's
    scaled_dot_product_attention, which computes the same attention.

    Known limits:
    Names held in variables or configs (`attn_implementation=args.attn`) are not
    followed. A call passing both keywords is left alone.
    """

    code = "TP701"
    name = "hf-flash-attention"
    safety = Safety.SAFE
    needs = Needs(methods=LOADERS, evidence=_FLASH_LOADER, unit=_FLASH_LOADER)

    valid = [
        "model = AutoModel.from_pretrained(name, attn_implementation='sdpa')\n",
        "model = AutoModel.from_pretrained(name, attn_implementation=args.attn)\n",
        "model = build(name, attn_implementation='flash_attention_2')\n",  # not a loader
        "model = AutoModel.from_pretrained(name, use_flash_attention_2=False)\n",
    ]
    invalid = [
        Example(
            example_code("""
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(
                "meta-llama/Llama-3.2-1B",
                torch_dtype=torch.bfloat16,
                attn_implementation="flash_attention_2",
            )
            """),
            example_code("""
            import porter_runtime
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(
                "meta-llama/Llama-3.2-1B",
                torch_dtype=torch.bfloat16,
                attn_implementation=porter_runtime.attn_implementation("flash_attention_2"),
            )
            """),
        ),
        Example(
            "import transformers as tf\nm = tf.AutoModel.from_pretrained(path, use_flash_attention_2=True)\n",
            "import porter_runtime\nimport transformers as tf\n"
            "m = tf.AutoModel.from_pretrained(path, attn_implementation=porter_runtime.attn_implementation("
            "\"flash_attention_2\"))\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not _loader(original):
            return updated
        attn, legacy = keyword(original, "attn_implementation"), keyword(original, "use_flash_attention_2")
        if attn is not None and legacy is not None:
            return updated
        if attn is not None and string_value(attn.value) in FLASH:
            name = string_value(attn.value)
        elif legacy is not None and is_true(legacy.value):
            name = "flash_attention_2"
        else:
            return updated
        index = original.args.index(attn or legacy)
        value = self.runtime_call("attn_implementation", cst.SimpleString(f'"{name}"'))
        args = list(updated.args)
        args[index] = args[index].with_changes(keyword=cst.Name("attn_implementation"), value=value)
        new = updated.with_changes(args=args)
        return self.rewrite(original, new, f"`{name}` where CUDA has flash-attn, \"sdpa\" elsewhere")


class HfQuantization(Rule):
    """`from_pretrained(load_in_8bit=True)` asks `porter_runtime.quantized_load`; `BitsAndBytesConfig` is reported.

    What:
    In `from_pretrained(...)` / `from_config(...)` calls, rewrites
    `load_in_8bit=<value>` and `load_in_4bit=<value>` into
    `load_in_8bit=porter_runtime.quantized_load(<value>, "load_in_8bit")`. Reports
    `BitsAndBytesConfig(...)`.

    Why:
    8-bit and 4-bit loading runs bitsandbytes' CUDA kernels; without them
    transformers stops (`Using bitsandbytes 8-bit quantization requires the latest
    version of bitsandbytes`), which is every Mac.

    Fix safety:
    Safe. On CUDA the helper returns the value unchanged, so the same quantised load
    runs. Elsewhere, where the original cannot load at all, it returns False: the
    same weights load unquantised in the call's `torch_dtype`, with a one-time
    warning that they take 2 (8-bit) or 4 (4-bit) times the memory. A
    `BitsAndBytesConfig` carries more choices (nf4, double quantisation, compute
    dtype) and is left to a human, and so is a `load_in_4bit=` beside a
    `quantization_config=`, which quantises all the same.

    Known limits:
    Quantisation configs read from files (`config.json`'s `quantization_config`) are
    not seen.
    """

    code = "TP703"
    name = "hf-quantization"
    safety = Safety.SAFE
    needs = Needs(methods=LOADERS, targets=frozenset({"transformers.BitsAndBytesConfig"}),
                  evidence=_QUANTISES, unit=_QUANTISES)

    valid = [
        "model = AutoModel.from_pretrained(name, load_in_8bit=False)\n",
        "from mylib import BitsAndBytesConfig\ncfg = BitsAndBytesConfig(bits=4)\n",
        "model = build(name, load_in_8bit=True)\n",  # not a loader
    ]
    invalid = [
        Example("from transformers import BitsAndBytesConfig\n"
                "quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4')\n"),
        Example(
            example_code("""
            model = LlamaForCausalLM.from_pretrained(
                base_model,
                load_in_8bit=True,
                torch_dtype=torch.float16,
                device_map=device_map,
            )
            """),
            example_code("""
            import porter_runtime
            model = LlamaForCausalLM.from_pretrained(
                base_model,
                load_in_8bit=porter_runtime.quantized_load(True, "load_in_8bit"),
                torch_dtype=torch.float16,
                device_map=device_map,
            )
            """),
        ),
        # beside a quantization_config the keyword is reported, not rewritten (line 3)
        Example(example_code("""
            model = AutoModelForCausalLM.from_pretrained(
                args.model_name_or_path,
                load_in_4bit=args.bits == 4,
                quantization_config=BitsAndBytesConfig(load_in_4bit=args.bits == 4, bnb_4bit_quant_type="nf4"),
            )
            """), line=3, message="and so does the call's quantization_config"),
        Example(
            "def load(path, load_8bit=False):\n"
            "    return AutoModelForCausalLM.from_pretrained(path, load_in_8bit=load_8bit, device_map='auto')\n",
            "import porter_runtime\ndef load(path, load_8bit=False):\n"
            "    return AutoModelForCausalLM.from_pretrained(path, load_in_8bit=porter_runtime.quantized_load("
            "load_8bit, \"load_in_8bit\"), device_map='auto')\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self.matches(original.func, "transformers.BitsAndBytesConfig"):
            self.flag(original, "BitsAndBytesConfig quantises with bitsandbytes' CUDA kernels",
                      suggestion=_UNQUANTISED)
            return updated
        if not _loader(original):
            return updated
        args, ported = list(updated.args), False
        configured = keyword(original, "quantization_config") is not None
        for name in ("load_in_4bit", "load_in_8bit"):
            arg = keyword(original, name)
            if arg is None or (isinstance(arg.value, cst.Name) and arg.value.value == "False"):
                continue
            if isinstance(arg.value, cst.Call) and self.matches(arg.value.func, "porter_runtime.quantized_load"):
                continue  # ported already
            if configured:  # the config quantises all the same: the load needs a human
                self.flag(arg, f"`{name}` loads the weights with bitsandbytes' CUDA kernels (and so does the "
                          "call's quantization_config)", suggestion=_UNQUANTISED)
                continue
            index = original.args.index(arg)  # the value as the other rules left it
            value = self.runtime_call("quantized_load", args[index].value, cst.SimpleString(f'"{name}"'))
            args[index], ported = args[index].with_changes(value=value), True
        if not ported:
            return updated
        return self.rewrite(original, updated.with_changes(args=args),
                            "the quantised load on CUDA; unquantised elsewhere, where bitsandbytes has no kernels")


_UNQUANTISED = ("off CUDA load unquantised (torch_dtype=torch.bfloat16, no quantization_config); "
                "keep the quantised load where porter_runtime.device_type() == \"cuda\"")


class HfTf32(Rule):
    """`TrainingArguments(tf32=True)` becomes `tf32=porter_runtime.cuda_option(True)`.

    What:
    Rewrites `tf32=True` in `TrainingArguments` (and `Seq2SeqTrainingArguments`,
    TRL's `SFTConfig`, `DPOConfig`, ...) into `tf32=porter_runtime.cuda_option(True)`.

    Why:
    TF32 is an Ampere GPU mode; without CUDA transformers stops in
    `TrainingArguments.__post_init__` ("--tf32 requires Ampere or a newer GPU arch").

    Fix safety:
    Safe. On CUDA the value is True as before. Elsewhere it is None, the option's
    default ("leave matmul precision alone"), which is all TF32 could mean there.

    Known limits:
    `--tf32 True` on a command line is reported by TP706 in shell scripts; values
    from variables or config files are not followed.
    """

    code = "TP704"
    name = "hf-tf32"
    safety = Safety.SAFE
    needs = Needs(targets=TRAINING_ARGS, calls_only=True)

    valid = [
        "from transformers import TrainingArguments\nargs = TrainingArguments('out', tf32=False)\n",
        "from mylib import TrainingArguments\nargs = TrainingArguments('out', tf32=True)\n",
    ]
    invalid = [
        Example(
            "from transformers import TrainingArguments\n"
            "args = TrainingArguments(output_dir='out', bf16=True, tf32=True)\n",
            "import porter_runtime\nfrom transformers import TrainingArguments\n"
            "args = TrainingArguments(output_dir='out', bf16=True, tf32=porter_runtime.cuda_option(True))\n",
        ),
        Example(
            "import trl\ncfg = trl.SFTConfig(output_dir=out, tf32=True)\n",
            "import porter_runtime\nimport trl\ncfg = trl.SFTConfig(output_dir=out, tf32=porter_runtime.cuda_option(True))\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        arg = keyword(original, "tf32")
        if arg is None or not is_true(arg.value) or not self.matches(original.func):
            return updated
        index = original.args.index(arg)
        args = list(updated.args)
        args[index] = args[index].with_changes(value=self.runtime_call("cuda_option", cst.Name("True")))
        return self.rewrite(original, updated.with_changes(args=args), "TF32 stays on on CUDA; elsewhere "
                            "the option is left at its default")


_PAGED = re.compile(r"^(?:paged_|adamw_bnb|adamw_8bit|lion_8bit|.*_8bit$|.*bnb)")


class HfTrainerCudaOptions(Rule):
    """Trainer options that need CUDA-only packages (paged optimizers, DeepSpeed) are reported.

    What:
    Reports, in `TrainingArguments` (and TRL's configs), `optim="paged_adamw_32bit"`
    and the other bitsandbytes optimizers (`paged_*`, `adamw_bnb_8bit`, `*_8bit`), and
    `deepspeed=...` (a config path or dict).

    Why:
    The paged and 8-bit optimizers are bitsandbytes' CUDA kernels; DeepSpeed does not
    install on a Mac. Trainer fails when it builds the optimizer or the engine.

    Fix safety:
    Review only. `optim="adamw_torch"` is the same AdamW update with 32-bit state
    (paged_adamw_32bit only pages that state to CPU memory); the 8-bit ones differ by
    their quantisation. Off CUDA drop `deepspeed=` (plain Trainer) or pass None.

    Known limits:
    Values from variables, `HfArgumentParser` command lines (see the shell rule
    TP706) and config files are not followed.
    """

    code = "TP705"
    name = "hf-trainer-cuda-options"
    safety = Safety.REVIEW
    needs = Needs(targets=TRAINING_ARGS, calls_only=True)

    valid = [
        "from transformers import TrainingArguments\na = TrainingArguments('o', optim='adamw_torch')\n",
        "from transformers import TrainingArguments\na = TrainingArguments('o', deepspeed=None)\n",
        "from mylib import TrainingArguments\na = TrainingArguments('o', optim='paged_adamw_32bit')\n",
    ]
    invalid = [
        Example("from transformers import TrainingArguments\n"
                "args = TrainingArguments('out', optim='paged_adamw_32bit', deepspeed='ds_zero2.json')\n"),
        Example("import transformers\n"
                "args = transformers.TrainingArguments('out', optim='adamw_bnb_8bit')\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self.matches(original.func):
            return updated
        optim = keyword(original, "optim")
        value = string_value(optim.value) if optim is not None else None
        if value is not None and _PAGED.match(value):
            self.flag(optim, f"optim=\"{value}\" is a bitsandbytes optimizer (CUDA kernels)",
                      suggestion="optim=\"adamw_torch\" off CUDA (same AdamW update, 32-bit state)")
        ds = keyword(original, "deepspeed")
        if ds is not None and not (isinstance(ds.value, cst.Name) and ds.value.value == "None"):
            self.flag(ds, "DeepSpeed has no MPS support and accelerate's DeepSpeed path fails on the CPU; "
                      "Trainer fails building its engine",
                      suggestion="pass deepspeed=None off CUDA (plain Trainer)")
        return updated
