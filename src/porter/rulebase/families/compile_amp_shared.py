"""What the ``torch.compile`` and CUDA mixed-precision rules share: the ``"cuda"`` device
type, an argument dropped with its formatting kept, a rename to a runtime twin."""

from __future__ import annotations

from typing import Optional, Sequence

import libcst as cst

from porter.rulebase.rule import string_value


def is_cuda_type(node: Optional[cst.CSTNode]) -> bool:
    """A literal ``"cuda"`` device type (autocast and GradScaler take no index)."""
    return node is not None and string_value(node) == "cuda"


def without(args: Sequence[cst.Arg], drop: cst.Arg) -> list[cst.Arg]:
    """``args`` less ``drop``, keeping the others' formatting (a dropped last
    argument hands its comma, or its absence, to the new last one)."""
    kept = [a for a in args if a is not drop]
    if kept and args and args[-1] is drop:
        kept[-1] = kept[-1].with_changes(comma=drop.comma)
    return kept


class RenameToRuntime:
    """For rules whose runtime twin takes exactly the original's arguments: every
    use of a target name (call, decorator, reference) becomes the twin. A mixin,
    not a Rule, so that the registry does not take it for a rule."""

    renames: dict[str, str] = {}
    message = ""

    def _rename(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        target = self.matches(original, *self.renames)
        if target is None:
            return updated
        return self.rewrite(original, self.runtime(self.renames[target]), self.message)

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._rename(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return self._rename(original, updated)
