"""What the DataLoader rules share: the DataLoader's names and whether it starts worker processes."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.syntax import argument, int_value

DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
_NUM_WORKERS_INDEX = 5


def workers_arg(call: cst.Call) -> Optional[cst.Arg]:
    """A DataLoader call's ``num_workers`` argument (keyword or sixth positional)."""
    return argument(call, "num_workers", _NUM_WORKERS_INDEX)


def workers(call: cst.Call) -> Optional[str]:
    """Source-ish text of a DataLoader's num_workers when it may be > 0, else None."""
    arg = workers_arg(call)
    if arg is None:
        return None
    value = int_value(arg.value)
    if value is not None:
        return str(value) if value > 0 else None
    return cst.Module([]).code_for_node(arg.value)
