"""The command a reviewer runs to try the port: the repository's own, as its README documents it.

A report that says "run ``python train.py --max_steps 2``" is wrong for a repository whose
script is ``main.py`` or whose flag is ``--max_iters``: the reviewer copies it and it fails.
So the report takes the command from the repository's README (the first command in a code
block that runs a script the tree holds: a training script first), and where the README
documents none, it prints a placeholder that cannot be mistaken for a command.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

READMES = ("README.md", "README.rst", "README.txt", "README", "readme.md", "Readme.md")
#: Launchers whose first ``*.py`` argument (or ``-m module``) is the script they run.
LAUNCHERS = ("python", "python3", "torchrun", "accelerate", "deepspeed")
#: A README larger than this is read only this far: entry points come early.
MAX_BYTES = 512 * 1024
_FENCE = re.compile(r"^\s*(```|~~~)")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
_TRAINING = re.compile(r"train|main|run|finetune|fine_tune|pretrain", re.IGNORECASE)


@dataclass(frozen=True)
class EntryPoint:
    command: str  # as the README writes it (continuation lines joined, prompt removed)
    source: str   # "README.md:12"


def find(root: Path) -> Optional[EntryPoint]:
    """The repository's documented command, or None where its README documents none."""
    for name in READMES:
        readme = root / name
        try:
            if not readme.is_file() or readme.is_symlink():
                continue
            with readme.open("rb") as handle:
                text = handle.read(MAX_BYTES).decode("utf-8", errors="replace")
        except OSError:
            continue
        commands = [(line, cmd) for line, cmd in _commands(text) if _runs_a_script_here(cmd, root)]
        if commands:
            line, command = min(commands, key=lambda c: (_rank(c[1]), c[0]))
            return EntryPoint(command, f"{name}:{line}")
    return None


def _commands(text: str) -> list[tuple[int, str]]:
    """(line, command) for each line of a fenced or indented code block, backslash
    continuations joined, a leading shell prompt removed."""
    found: list[tuple[int, str]] = []
    in_fence = False
    pending: Optional[tuple[int, str]] = None
    for number, raw in enumerate(text.splitlines(), 1):
        if _FENCE.match(raw):
            in_fence, pending = not in_fence, None
            continue
        if not (in_fence or raw.startswith(("    ", "\t"))):
            pending = None
            continue
        line = raw.strip()
        if pending:
            start, head = pending
            line = f"{head} {line}"
        else:
            start = number
            line = re.sub(r"^(\$|%)\s+", "", line)
        if line.endswith("\\"):
            pending = (start, line[:-1].rstrip())
            continue
        pending = None
        if line:
            found.append((start, _without_comment(line)))
    return found


def _without_comment(command: str) -> str:
    """``command`` less a trailing shell comment (``python train.py  # the baseline``)."""
    for match in re.finditer(r"\s#", command):
        head = command[:match.start()].rstrip()
        try:
            if shlex.split(head) == shlex.split(command, comments=True):
                return head
        except ValueError:
            return command
    return command


def _script(command: str) -> Optional[str]:
    """The script (``x.py``) or module (``-m pkg.mod``) a launcher command runs, or None."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    while words and _ENV.match(words[0]):  # CUDA_VISIBLE_DEVICES=0 python ...
        words.pop(0)
    if not words or Path(words[0]).name not in LAUNCHERS and not re.fullmatch(r"python3?(\.\d+)?", words[0]):
        return None
    for i, word in enumerate(words[1:], 1):
        if word == "-m" and i + 1 < len(words):
            module = words[i + 1]
            return None if module.startswith(("torch.", "pip", "venv")) else module.replace(".", "/") + ".py"
        if word.endswith(".py") and not word.startswith("-"):
            return word
    return None


def _runs_a_script_here(command: str, root: Path) -> bool:
    script = _script(command)
    if script is None or Path(script).is_absolute() or ".." in Path(script).parts:
        return False
    path = root / script
    return path.is_file() or (path.with_suffix("") / "__main__.py").is_file()


def _rank(command: str) -> tuple[int, int]:
    """Training before the rest; one process before a multi-process launcher."""
    script = _script(command) or ""
    launcher = 0 if re.match(r"^(\S+=\S*\s+)*python", command) else 1
    return (0 if _TRAINING.search(Path(script).name) else 1, launcher)


def mac_commands(entry: Optional[EntryPoint]) -> str:
    """The "How to test on a Mac" block: the repository's own command, or a placeholder."""
    if entry is None:
        return (
            "```sh\n"
            "porter verify .        # imports every module with CUDA hidden; each failure is tied to a finding\n"
            "porter verify . --run \"<your entry point, with its own flags for a short run>\"\n"
            "PYTORCH_ENABLE_MPS_FALLBACK=1 <your entry point>\n"
            "```\n\n"
            "The README documents no command that runs a script of this repository, so the lines above hold "
            "placeholders (`<...>`): put the command you train or sample with in their place."
        )
    return (
        "```sh\n"
        "porter verify .        # imports every module with CUDA hidden; each failure is tied to a finding\n"
        f"porter verify . --run {shlex.quote(entry.command)}\n"
        f"PYTORCH_ENABLE_MPS_FALLBACK=1 {entry.command}\n"
        "```\n\n"
        f"The command is the one `{entry.source}` documents; shorten the run with its own flags "
        "(fewer steps, a smaller batch) for a first try."
    )
