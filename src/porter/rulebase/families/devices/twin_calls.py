"""The ``torch.cuda`` utilities porter_runtime has twins of, rewritten table-driven.

Each rule class holds a table of qualified name → runtime name, and one mixin turns a call of
a table entry into the same call of the runtime twin, arguments untouched. The twins take the
same parameters (same names, same order) as the torch.cuda functions and forward them verbatim
on CUDA, so keeping the argument list is exact. Codes are split by meaning (sync, cache, seeds,
queries, device selection, memory statistics, bf16, events, NVTX) so that a user can
``--ignore`` one kind without losing the others.
"""

from __future__ import annotations

from typing import ClassVar, Optional

import libcst as cst

from porter.rulebase.rule import has_star_args


def twin_table(names: dict[str, str], *modules: str) -> dict[str, str]:
    """``{"torch.cuda.x": twin}`` plus the same names under torch.cuda's submodules."""
    out = {f"torch.cuda.{name}": twin for name, twin in names.items()}
    for module in modules:
        out.update({f"torch.cuda.{module}.{name}": twin for name, twin in names.items()})
    return out


class TwinCall:
    """Mixin for rules whose calls become ``porter_runtime.<twin>(same arguments)``.

    Not a Rule subclass, so the registry does not take it for a rule.
    """

    table: ClassVar[dict[str, str]]
    #: Keywords the runtime twin does not accept: such a call is reported instead.
    unsupported: ClassVar[frozenset[str]] = frozenset()
    #: Most positional arguments the twin accepts (None: as many as torch.cuda's).
    max_positional: ClassVar[Optional[int]] = None

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        target = self.matches(original.func)  # type: ignore[attr-defined]
        if target is None:
            return updated
        twin = self.table[target]
        if not self._fits(original):
            self.flag(original, f"`{target}(...)` uses arguments porter_runtime.{twin} does not take; "  # type: ignore[attr-defined]
                      "not rewritten: drop them, or keep the call under "
                      "`if porter_runtime.device_type() == \"cuda\":`",
                      suggestion=f"porter_runtime.{twin}(...)")
            return updated
        new = updated.with_changes(func=self.runtime(twin))  # type: ignore[attr-defined]
        return self.rewrite(original, new, f"`{target}` fails or does nothing without CUDA; "  # type: ignore[attr-defined]
                            f"porter_runtime.{twin} forwards to it on CUDA")

    def _fits(self, call: cst.Call) -> bool:
        if self.unsupported and has_star_args(call):
            return False
        if any(a.keyword is not None and a.keyword.value in self.unsupported for a in call.args):
            return False
        positional = [a for a in call.args if a.keyword is None and not a.star]
        return self.max_positional is None or len(positional) <= self.max_positional
