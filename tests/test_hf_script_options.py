"""TP706 on a launch script, with the repository around it: `--tf32 True`,
`--deepspeed` and a bitsandbytes `--optim` are notes where the repository's own
TrainingArguments class (or transformers', in its parser) is ported to call
porter_runtime.training_arguments (which drops them off CUDA: LLaVA's and FastChat's
scripts), findings where it is not, and the
`deepspeed` launcher is a finding either way."""

from pathlib import Path
from textwrap import dedent

from porter.engine.process import Options
from porter.engine.registry import all_rules
from porter.engine.run import RunConfig, run

SCRIPT = dedent("""\
    #!/bin/bash
    torchrun --nproc_per_node=2 llava/train/train_mem.py \\
        --deepspeed ./scripts/zero2.json \\
        --bf16 True \\
        --tf32 True \\
        --optim paged_adamw_32bit
    deepspeed llava/train/train_mem.py --deepspeed ./scripts/zero3.json
    """)

ARGUMENTS = dedent("""\
    from dataclasses import dataclass, field

    import transformers


    @dataclass
    class TrainingArguments(transformers.TrainingArguments):
        model_max_length: int = field(default=512)
    """)

PLAIN = dedent("""\
    import transformers

    parser = transformers.HfArgumentParser((transformers.TrainingArguments,))
    """)

#: arguments built from a config the script reads: nothing of the tree reaches their checks
BUILT = dedent("""\
    import json

    import transformers

    args = transformers.TrainingArguments(**json.load(open("train.json")))
    """)


def _script_findings(tmp_path: Path, train_py: str) -> list[tuple[int, str, str]]:
    (tmp_path / "llava" / "train").mkdir(parents=True)
    (tmp_path / "llava" / "__init__.py").write_text("")
    (tmp_path / "llava" / "train" / "__init__.py").write_text("")
    (tmp_path / "llava" / "train" / "train_mem.py").write_text(train_py)
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "pretrain.sh").write_text(SCRIPT)
    result = run(RunConfig([tmp_path], tmp_path, Options(rules=all_rules())))
    script = next(f for f in result.files if f.path == "scripts/pretrain.sh")
    return [(f.line, f.message.split(" ")[0], f.severity) for f in script.findings if f.code == "TP706"]


def test_options_the_ported_class_drops_are_notes_and_the_launcher_a_finding(tmp_path):
    found = _script_findings(tmp_path, ARGUMENTS)
    assert sorted(found) == [(3, "--deepspeed", "info"), (5, "--tf32", "info"), (6, "this", "info"),
                             (7, "--deepspeed", "info"), (7, "the", "")]


def test_transformers_own_class_in_the_parser_is_ported_too(tmp_path):
    """TP709 wraps it in porter_runtime.training_arguments_class, which asks the same hook."""
    found = _script_findings(tmp_path, PLAIN)
    assert sorted(found) == [(3, "--deepspeed", "info"), (5, "--tf32", "info"), (6, "this", "info"),
                             (7, "--deepspeed", "info"), (7, "the", "")]


def test_without_a_class_the_runtime_asks_every_option_is_a_finding(tmp_path):
    found = _script_findings(tmp_path, BUILT)
    assert sorted(found) == [(3, "--deepspeed", ""), (5, "--tf32", ""), (6, "this", ""),
                             (7, "--deepspeed", ""), (7, "the", "")]
