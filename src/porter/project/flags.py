"""CUDA flags nothing reads: ``self.sync_cuda = th.cuda.is_available()`` and no ``.sync_cuda``
anywhere else in the tree (guided-diffusion's TrainLoop). Such a flag decides nothing
off CUDA: PT202 makes its finding a note. Byte searches over every source, as the
project model's other facts. And the tree's import probes: functions that return False
when their import of a CUDA-only package fails, whose callers guard CUDA-only code."""

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
