"""CUDA flags nothing reads: ``self.sync_cuda = th.cuda.is_available()`` and no ``.sync_cuda``
anywhere else in the tree (guided-diffusion's TrainLoop). Such a flag decides nothing
off CUDA: PT202 makes its finding a note. Byte searches over every source, as the
project model's other facts."""

from __future__ import annotations

import re
from collections import Counter
from typing import Mapping

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
