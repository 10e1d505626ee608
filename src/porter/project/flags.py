"""CUDA flags nothing reads: ``self.sync_cuda = th.cuda.is_available()`` and no ``.sync_cuda``
anywhere else in the tree (guided-diffusion's TrainLoop). Such a flag decides nothing
off CUDA: PT202 makes its finding a note. Byte searches over every source, as the
project model's other facts. And the tree's import probes: functions that return False
when their import of a CUDA-only package fails, whose callers guard CUDA-only code. And
the opt-in options: ``store_true`` options no command of the tree turns on, whose code
runs only for a user who asks (porter.engine.stages.notes)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Mapping

from porter.rulebase.conditions.guards import parse_uncached, probe_functions
from porter.rulebase.cuda_packages import IMPORT_ROOTS

#: ``.name = <...>cuda.is_available()`` (an attribute set from CUDA's availability).
_SET = re.compile(rb"\.(\w+)[ \t]*=[ \t]*[\w.]*cuda\.is_available\(\)")


def unread_flags(sources: Mapping[str, bytes]) -> frozenset[str]:
    """Attribute names set from ``torch.cuda.is_available()`` whose every ``.name`` in the
    tree is such an assignment: set, never read."""
    sets: Counter[str] = Counter()
    for data in sources.values():
        if b"is_available" in data:
            sets.update(m.group(1).decode() for m in _SET.finditer(data))
    if not sets:
        return frozenset()
    uses: Counter[str] = Counter()
    for data in sources.values():
        for name in sets:
            if name.encode() in data:
                uses[name] += len(re.findall(rb"\." + re.escape(name.encode()) + rb"\b", data))
    return frozenset(name for name, count in sets.items() if uses[name] == count)


#: An import of a CUDA-only package indented under something (a ``try`` in a function).
_INDENTED_IMPORT = re.compile(rb"^[ \t]+(?:import|from)[ \t]+(" + b"|".join(
    re.escape(root.encode()) for root in sorted(IMPORT_ROOTS)) + rb")\b", re.M)


def import_probes(sources: Mapping[str, bytes]) -> frozenset[str]:
    """The names of the tree's top-level functions that return False when their ``try``
    import of a CUDA-only package fails (llm-foundry's ``is_flash_v2_installed()``, which
    ``modeling_mpt.py`` imports and tests before ``from flash_attn import bert_padding``),
    and of its module flags set True by such a ``try`` (Megatron-LM's ``HAVE_TE``): a call
    of one, or the flag imported into any module, holds only where that import succeeds."""
    found: set[str] = set()
    for data in sources.values():
        if b"except" in data and _INDENTED_IMPORT.search(data):
            tree = parse_uncached(data)
            if tree is not None:
                found.update(probe_functions(tree, data))
    return frozenset(found)


#: ``--device cuda``, ``--device=cuda:0``, ``--eval-device "cuda"`` in a command line: an
#: option whose name holds "device", given a CUDA device.
_CUDA_OPTION = re.compile(
    rb"(?<![\w-])(--?[\w-]*device[\w-]*)(?:[ \t]*=[ \t]*|[ \t]+)[\"']?cuda(?::\d+)?[\"']?(?![\w:-])",
    re.IGNORECASE)


def cuda_device_options(texts: Mapping[str, bytes]) -> frozenset[str]:
    """The options the tree's own commands (a README, a shell script, a notebook's
    ``!python`` line, a Makefile, a module's usage line) give a CUDA device: ``--device "cuda"`` in Grounded-SAM's
    README reaches ``model.to(args.device)`` in a script with nothing else CUDA-like."""
    found: set[str] = set()
    for data in texts.values():
        if b"cuda" in data or b"CUDA" in data:
            found.update(m.group(1).decode("ascii", "replace") for m in _CUDA_OPTION.finditer(data))
    return frozenset(found)


# -- opt-in options
# Opt-in options: ``--use_8bit_adam`` and the like, which no command of the tree passes.
#
# A training script's ``parser.add_argument("--use_8bit_adam", action="store_true")`` is off
# unless a command line turns it on. Where no command of the repository does (its README, its
# shell scripts, its configs, another script building the command), the code under
# ``if args.use_8bit_adam:`` runs only for a user who asks for it: what porter finds there
# is for information (porter.engine.stages.notes), as code run only where CUDA is.
#
# Byte searches over the whole tree, as the project model's other facts; only a model of the
# whole tree (its texts too) has them: a part of it can't tell what its commands pass.

#: ``add_argument("--name", ...)`` up to its closing parenthesis (one level of nesting).
_ADD_ARGUMENT = re.compile(
    rb"""add_argument\(\s*(?P<names>(?:["']-{1,2}[\w-]+["']\s*,\s*)+)(?P<rest>[^()]*(?:\([^()]*\)[^()]*)*)\)""")
_OPTION = re.compile(rb"""["'](-{1,2}[\w-]+)["']""")
_DEST = re.compile(rb"""\bdest\s*=\s*["'](\w+)["']""")
_STORE_TRUE = re.compile(rb"""\baction\s*=\s*["']store_true["']""")
_DEFAULT_TRUE = re.compile(rb"""\bdefault\s*=\s*True\b""")


def opt_in_options(sources: Mapping[str, bytes], texts: Mapping[str, bytes]) -> dict[str, str]:
    """dest -> its option (``"use_8bit_adam": "--use_8bit_adam"``) of each ``store_true``
    option, off by default, that nothing of the tree turns on: no text of the tree (README,
    script, config, notebook) names the option or its dest, and no Python source names the
    option outside its definitions or sets the dest (``args.use_8bit_adam = True``,
    ``use_8bit_adam=True``). A dest that some definition makes an option of another kind
    (or on by default) is left out: the name means more than one thing."""
    defined: dict[str, list[bytes]] = {}
    other: set[str] = set()
    definitions: dict[bytes, int] = {}
    for data in sources.values():
        if b"add_argument" not in data:
            continue
        for match in _ADD_ARGUMENT.finditer(data):
            options = _OPTION.findall(match.group("names"))
            rest = match.group("rest")
            longs = [o for o in options if o.startswith(b"--")] or options
            named = _DEST.search(rest)
            dest = (named.group(1) if named else longs[0].lstrip(b"-").replace(b"-", b"_")).decode()
            if _STORE_TRUE.search(rest) and not _DEFAULT_TRUE.search(rest):
                defined.setdefault(dest, []).extend(options)
            else:
                other.add(dest)
            for option in options:
                definitions[option] = definitions.get(option, 0) + 1
    if not defined:
        return {}
    words = {w for data in texts.values() for w in _WORD.findall(data)}  # options and config keys alike
    used = Counter(o for data in sources.values() if b"-" in data for o in _USED_OPTION.findall(data))
    set_true = {n for data in sources.values() if b"True" in data for n in _SET_TRUE.findall(data)}
    found: dict[str, str] = {}
    for dest, options in defined.items():
        key = dest.encode()
        if dest in other or key in words or key in set_true:
            continue
        if any(o in words or used[o] > definitions.get(o, 0) for o in options):
            continue  # a command, a config or a script that builds the command line turns it on
        found[dest] = next((o for o in options if o.startswith(b"--")), options[0]).decode()
    return found


#: A word of a text (README, script, config): an option (``--use_8bit_adam``) or a key.
_WORD = re.compile(rb"[\w-]+")
#: An option named in Python code (``"--use_8bit_adam"``, ``f"... --use_8bit_adam"``).
_USED_OPTION = re.compile(rb"(?<![\w-])-{1,2}\w[\w-]*")
#: ``NAME = True`` / ``NAME=True`` (a keyword, an attribute set).
_SET_TRUE = re.compile(rb"\b(\w+)\s*=\s*True\b")
