"""What the repository's own functions return, for porter.project.value_flow (issue 27).

A helper that sets up the process group often hands the CUDA index back to its caller
(``return rank, local_rank, rank % torch.cuda.device_count()``), and the caller, in
another module, passes it on as a device. A function's return is a tuple of kinds, one
per position (a single value is a tuple of one); the kinds of every ``return`` of the
function, and of every definition a call's name may reach, must agree, else the
position is not followed. Recomputed on each sweep from the names' current kinds,
which only rise, so the answer only rises too.
"""

from __future__ import annotations

import ast
from typing import Iterable, Optional

from porter.project.value_kinds import Callee, Kind, Scope

_MIXED = object()  # two returns of one function disagree, or one returns an unknown value


def returned(value: Optional[ast.AST]) -> list[Optional[ast.AST]]:
    """The expressions a ``return`` hands back, one per position."""
    if isinstance(value, ast.Tuple) and not any(isinstance(e, ast.Starred) for e in value.elts):
        return list(value.elts)
    return [value]


class Returns:
    """Per function scope: the kind returned at each position (None: not followed)."""

    def __init__(self) -> None:
        self.known: dict[Scope, tuple[Optional[Kind], ...]] = {}
        self._seen: dict[Scope, list] = {}

    def start(self) -> None:
        self._seen = {}

    def see(self, scope: Scope, kinds: list[Optional[Kind]]) -> None:
        """One ``return`` of ``scope`` with the kinds of its values."""
        before = self._seen.get(scope)
        if before is None:
            self._seen[scope] = list(kinds)
        elif len(before) != len(kinds):
            self._seen[scope] = [_MIXED] * max(len(before), len(kinds))
        else:
            self._seen[scope] = [a if a == b else _MIXED for a, b in zip(before, kinds)]

    def finish(self) -> bool:
        """Keep this sweep's answer; True when it differs from the last one."""
        new = {scope: tuple(None if k is _MIXED else k for k in kinds) for scope, kinds in self._seen.items()}
        new = {scope: kinds for scope, kinds in new.items() if any(k is not None for k in kinds)}
        changed = new != self.known
        self.known = new
        return changed

    def of(self, callees: Iterable[Callee], position: Optional[int], width: int = 1) -> Optional[Kind]:
        """The kind a call returns (``position`` None: the whole value, not unpacked),
        where every definition the call may reach agrees."""
        kinds = set()
        for callee in callees:
            found = self.known.get(callee.scope)
            if found is None or len(found) != width:
                return None
            kinds.add(found[position or 0])
        return kinds.pop() if len(kinds) == 1 else None

    def followed(self, wanted: tuple[Kind, ...]) -> set[Scope]:
        return {scope for scope, kinds in self.known.items() if any(k in wanted for k in kinds)}
