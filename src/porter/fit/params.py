"""Where a command sets a parameter, and the command with another value in its place.

Three ways a training command takes a batch size: a flag (``--batch_size=64``,
``--batch-size 64``), a Hydra-style override (``batch_size=64``,
``+data.batch_size=64``, also an ``env VAR=64`` prefix) or an environment variable.
``porter fit`` only changes values the command already sets: that value is the original.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

STYLES = ("auto", "flag", "override", "env")


class ParamError(ValueError):
    """The parameter is missing from the command, or its value is not a whole number."""


@dataclass(frozen=True)
class Slot:
    """One place that holds the value: an argv token, or an environment variable."""

    index: Optional[int]  # the argv token holding the value; None for the environment
    prefix: str  # the token's text before the value ('--batch_size=', 'batch_size='), '' if whole
    key: str = ""  # how the command spells the setting: '--batch-size', 'batch_size'


@dataclass(frozen=True)
class Param:
    name: str  # as given: 'batch_size', '--batch-size', 'data.batch_size', 'BATCH_SIZE'
    style: str  # 'flag', 'override' or 'env'
    slots: tuple[Slot, ...]  # every occurrence; all are changed, the last one is the original
    original: int

    @property
    def spelling(self) -> str:
        """How the command spells it, for messages: '--batch_size', 'batch_size', '$BATCH_SIZE'."""
        if self.style == "env":
            return f"${self.name}"
        return self.slots[-1].key


def flag_spellings(name: str) -> list[str]:
    """'batch_size' -> ['--batch_size', '--batch-size']; a name with dashes is taken as is."""
    if name.startswith("-"):
        return [name]
    out = [f"--{name}"]
    for a, b in (("_", "-"), ("-", "_")):
        alt = f"--{name.replace(a, b)}"
        if alt not in out:
            out.append(alt)
    return out


def _flag_slots(argv: Sequence[str], name: str) -> list[Slot]:
    slots = []
    spellings = flag_spellings(name)
    for i, token in enumerate(argv):
        for flag in spellings:
            if token == flag and i + 1 < len(argv):
                slots.append(Slot(i + 1, "", flag))
            elif token.startswith(flag + "="):
                slots.append(Slot(i, flag + "=", flag))
    return slots


def _override_slots(argv: Sequence[str], name: str) -> list[Slot]:
    if name.startswith("-"):
        return []
    pattern = re.compile(r"(\+{0,2}" + re.escape(name) + r"=)")
    slots = []
    for i, token in enumerate(argv):
        match = pattern.match(token)
        if match:
            slots.append(Slot(i, match.group(1), match.group(1)[:-1]))
    return slots


def _value(text: str, name: str, where: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ParamError(f"{name} is {text!r} in {where}; porter fit needs a whole number there") from None
    if value < 1:
        raise ParamError(f"{name} is {value} in {where}; porter fit needs a positive number")
    return value


def locate(argv: Sequence[str], name: str, style: str = "auto",
           environ: Mapping[str, str] = {}) -> Param:
    """Find NAME in the command (or the environment) and read its original value."""
    finders = {"flag": _flag_slots, "override": _override_slots}
    order = ["flag", "override", "env"] if style == "auto" else [style]
    for kind in order:
        if kind == "env":
            if name in environ:
                return Param(name, "env", (Slot(None, "", name),), _value(environ[name], name, "the environment"))
            continue
        slots = finders[kind](argv, name)
        if slots:
            last = slots[-1]
            return Param(name, kind, tuple(slots),
                         _value(argv[last.index][len(last.prefix):], name, "the command"))
    hint = {
        "flag": f"add {flag_spellings(name)[0]}=N to the command",
        "override": f"add {name}=N to the command",
        "env": f"set it: {name}=N porter fit ...",
    }
    how = "; ".join(hint[k] for k in order)
    raise ParamError(f"the command does not set {name}, so porter fit doesn't know its original value: {how}")


def apply(argv: Sequence[str], env: Mapping[str, str], params: Mapping[Param, int]
          ) -> tuple[list[str], dict[str, str]]:
    """The command and extra environment with each parameter set to its new value."""
    out, extra = list(argv), {}
    for param, value in params.items():
        if param.style == "env":
            extra[param.name] = str(value)
            continue
        for slot in param.slots:
            out[slot.index] = f"{slot.prefix}{value}"
    return out, {**env, **extra}


def command_line(argv: Sequence[str], extra_env: Mapping[str, str]) -> str:
    """What to type in a POSIX shell: 'BATCH_SIZE=8 python train.py ...'."""
    prefix = "".join(f"{k}={shlex.quote(v)} " for k, v in extra_env.items())
    return prefix + shlex.join(argv)


_NPROC = re.compile(r"--(?:nproc[_-]per[_-]node|num[_-]processes)(?:=(\d+))?$")


def processes(argv: Sequence[str]) -> int:
    """Processes a launcher starts: torchrun's --nproc_per_node, accelerate's --num_processes; else 1."""
    for i, token in enumerate(argv):
        match = _NPROC.match(token)
        if match:
            text = match.group(1) or (argv[i + 1] if i + 1 < len(argv) else "")
            if text.isdigit():
                return int(text)
    return 1
