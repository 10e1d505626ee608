"""What the device-literal rules (PT003, PT004, PT005) share: a literal CUDA device spec
replaced by the device the runtime resolves."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.rule import Rule, cuda_spec
from porter.rulebase.syntax import index_args

#: The tensor and module methods PT003 reads a device from (`.to("cuda")`,
#: `x.new_zeros(n, device="cuda")`); PT005 leaves their calls to it.
DEVICE_METHODS = frozenset({"to", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})


def replace_device_keyword(
    rule: Rule, original: cst.Call, updated: cst.Call, *, as_string: bool, keyword: str = "device"
) -> cst.BaseExpression:
    """``keyword="cuda"`` (or ``"cuda:1"``) of ``updated`` becomes the runtime's device (its
    name, ``as_string``); any other value leaves the call as it is."""
    for i, arg in enumerate(updated.args):
        if arg.keyword is None or arg.keyword.value != keyword:
            continue
        spec = cuda_spec(arg.value)
        if spec is None:
            return updated
        value = runtime_device(rule, spec[0], as_string)
        args = list(updated.args)
        args[i] = arg.with_changes(value=value)
        return rule.rewrite(original, updated.with_changes(args=args), "a literal CUDA device now resolves at run time")
    return updated


def runtime_device(rule: Rule, index: Optional[int], as_string: bool) -> cst.BaseExpression:
    """``porter_runtime.device(i)``, or ``device_str(i)`` for a setting held as a string."""
    # A string setting is often evaluated at import: device_str resolves quietly.
    return rule.runtime_call("device_str" if as_string else "device", *index_args(index))
