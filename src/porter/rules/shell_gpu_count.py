"""A shell script counts GPUs with ``python -c '...torch.cuda.device_count()...'`` (PT706)."""

from __future__ import annotations

import re
from textwrap import dedent

from porter.rulebase.rule import SHELL_PATTERNS, Example, Safety, TextRule

#: ``python -c`` / ``python3 -c`` / ``"$PYTHON" -c`` on the line, before any comment.
_PYTHON_C = re.compile(r"""(?:\bpython[\w.]*|\$\{?PYTHON\}?)["']?\s+-c\s""")
#: The count, not already kept at least 1 by this rule.
_COUNT = re.compile(r"(?<!max\()\btorch\.cuda\.device_count\(\)")


class ShellGpuCount(TextRule):
    """A shell script's GPU count from `torch.cuda.device_count()` is kept at least 1.

    What:
    In shell scripts, rewrites `torch.cuda.device_count()` inside an embedded
    `python -c '...'` to `max(torch.cuda.device_count(), 1)`:
    `GPUS_PER_NODE=$(python -c 'import torch; print(torch.cuda.device_count())')`
    becomes `...print(max(torch.cuda.device_count(), 1))...`.

    Why:
    Without CUDA the count is 0, and what the script does with it fails:
    `torchrun --nproc_per_node $GPUS_PER_NODE` raises `AssertionError` for 0
    processes (Qwen's finetune_ds.sh, blind round 10), a world size of 0 divides by
    zero. One process is what a Mac runs.

    Fix safety:
    Safe. On a machine with a GPU the count is the same number; only a count of 0,
    where the script already fails, becomes 1.

    Known limits:
    Only counts made by an embedded `python -c` on one line; `nvidia-smi -L | wc -l`
    and counts made in a separate Python file are not rewritten.
    """

    code = "PT706"
    name = "shell-gpu-count"
    safety = Safety.SAFE
    patterns = SHELL_PATTERNS
    words = frozenset({"device_count"})

    valid = [
        Example("python -c 'import torch; print(max(torch.cuda.device_count(), 1))'\n", path="run.sh"),
        Example("# GPUS=$(python -c 'import torch; print(torch.cuda.device_count())')\n", path="run.sh"),
        Example("python count_gpus.py  # torch.cuda.device_count()\n", path="run.sh"),
    ]
    invalid = [
        Example(dedent("""\
            #!/bin/bash
            GPUS_PER_NODE=$(python -c 'import torch; print(torch.cuda.device_count())')
            torchrun --nproc_per_node $GPUS_PER_NODE finetune.py --bf16 True
            """), dedent("""\
            #!/bin/bash
            GPUS_PER_NODE=$(python -c 'import torch; print(max(torch.cuda.device_count(), 1))')
            torchrun --nproc_per_node $GPUS_PER_NODE finetune.py --bf16 True
            """), path="finetune/finetune_ds.sh"),
        Example('NGPU=`python3 -c "import torch;print(torch.cuda.device_count())"`\n',
                'NGPU=`python3 -c "import torch;print(max(torch.cuda.device_count(), 1))"`\n', path="train.sh"),
    ]

    def check(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        changed = False
        for number, line in enumerate(lines, 1):
            code = line if "#" not in line else _before_comment(line)
            found = _PYTHON_C.search(code)
            if found is None or not _COUNT.search(code, found.end()):
                continue
            head, body, rest = line[:found.end()], line[found.end():len(code)], line[len(code):]
            new = head + _COUNT.sub("max(torch.cuda.device_count(), 1)", body) + rest
            if new != line:
                lines[number - 1] = new
                changed = True
                self.changed(number, line, new, "the GPU count is 0 without CUDA, and what the script does with it "
                             "fails (torchrun refuses --nproc_per_node 0): kept at least 1; the same count on CUDA")
        return "".join(lines) if changed else text


def _before_comment(line: str) -> str:
    """The line up to a ``#`` that starts a comment (one after a space or at the start,
    outside quotes): ``$#`` and ``${#x}`` are not comments."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line
