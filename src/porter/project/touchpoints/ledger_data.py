"""The ledger's data: a CUDA touchpoint, its states, and what the whole tree tells about imports
(porter.project.touchpoints.ledger accounts for each touchpoint)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

from porter.project.known_modules import KNOWN, is_standard

CODE, NAME = "PT999", "cuda-touchpoint"
STATES = ("rewritten", "reported", "guarded", "inert", "unaccounted")


@dataclass(frozen=True)
class Touchpoint:
    """One CUDA touchpoint and how the port accounts for it. Plain, picklable data."""

    line: int
    column: int  # 1-based, as a Finding's
    kind: str
    what: str
    state: str
    #: the rule code (rewritten, reported), "line N" (guarded), the reason (inert),
    #: or why it may fail off CUDA (unaccounted)
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TreeContext:
    """What the whole scanned tree tells about imports (porter.project.known_modules)."""

    local: frozenset[str] = frozenset()
    declared: frozenset[str] = frozenset()
    #: The tree's root and its Python sources and notebooks (relative, "/" separators):
    #: where porter.edits.probes looks for another module reading a flag. Empty: one file alone.
    root: str = ""
    sources: frozenset[str] = frozenset()
    #: Extension modules the tree's own build compiles (CUDAExtension / CppExtension names).
    extensions: frozenset[str] = frozenset()
    #: The tree's import probes (porter.project.flags.import_probes): a call of one guards.
    probes: frozenset[str] = frozenset()

    def is_local(self, root: str) -> bool:
        return root in self.local

    def resolves(self, root: str) -> bool:
        return root in self.local or root in self.declared or root in KNOWN or is_standard(root) \
            or root == "porter_runtime"


def counts(touchpoints: Iterable[Touchpoint]) -> dict[str, int]:
    found = dict.fromkeys(STATES, 0)
    for t in touchpoints:
        found[t.state] += 1
    return found

