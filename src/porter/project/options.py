"""Opt-in options: ``--use_8bit_adam`` and the like, which no command of the tree passes.

A training script's ``parser.add_argument("--use_8bit_adam", action="store_true")`` is off
unless a command line turns it on. Where no command of the repository does (its README, its
shell scripts, its configs, another script building the command), the code under
``if args.use_8bit_adam:`` runs only for a user who asks for it: what porter finds there
is for information (porter.engine.stages.notes), as code run only where CUDA is.

Byte searches over the whole tree, as the project model's other facts; only a model of the
whole tree (its texts too) has them: a part of it can't tell what its commands pass.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Mapping

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
