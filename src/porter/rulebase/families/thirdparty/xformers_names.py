"""The names of xformers' API that porter's xformers rules (TP201-TP204) match, and
the tests they share: what a call resolves to, whether it builds a bias, whether it is a
twinned helper with arguments its twin takes."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.matching import Ambiguous
from porter.rulebase.families.thirdparty.uses import arguments_fit

MODULES = ("xformers.ops", "xformers.ops.fmha")
ATTENTION = frozenset(f"{m}.memory_efficient_attention" for m in MODULES)
BIAS_NAMES = ("LowerTriangularMask", "LowerTriangularMaskWithTensorBias",
               "LowerTriangularFromBottomRightMask", "BlockDiagonalMask",
               "BlockDiagonalCausalMask", "BlockDiagonalCausalFromBottomRightMask",
               "BlockDiagonalPaddedKeysMask", "BlockDiagonalCausalWithOffsetPaddedKeysMask")
BIASES = {f"{m}.{n}": n for m in (*MODULES, "xformers.ops.fmha.attn_bias") for n in BIAS_NAMES}
CONSTRUCTORS = frozenset({"from_seqlens", "from_tensor_list"})
#: xformers' tensor helpers with a twin in porter_runtime.xformers_ops: how many
#: positional arguments each takes, and its keywords (xformers 0.0.35).
HELPERS = {"unbind": (2, frozenset({"x", "dim"})),
            "scaled_index_add": (5, frozenset({"input", "index", "source", "scaling", "alpha"})),
            "index_select_cat": (2, frozenset({"sources", "indices"}))}
HELPER_NAMES = {f"{m}.{n}": n for m in ("xformers.ops", "xformers.ops.indexing", "xformers.ops.unbind")
                 for n in HELPERS}
KEYWORDS = frozenset({"query", "key", "value", "attn_bias", "p", "scale", "op", "output_dtype"})

def resolved(rule, node: cst.BaseExpression) -> Optional[str]:
    name = rule.qualname(node)
    return None if name is None or isinstance(name, Ambiguous) else name


def helper_call(rule, call: cst.Call) -> Optional[str]:
    """The helper's name when ``call`` is one of xformers' twinned tensor helpers with
    arguments the twin takes (``xops.unbind(qkv, 2)``)."""
    found = HELPER_NAMES.get(resolved(rule, call.func) or "")
    if found is None or not arguments_fit(call, *HELPERS[found]):
        return None
    return found


def bias_callee(rule, call: cst.Call) -> Optional[tuple[cst.BaseExpression, str]]:
    """(the class expression, its name) when ``call`` builds an xformers bias:
    ``LowerTriangularMask()`` or ``BlockDiagonalMask.from_seqlens(...)``."""
    func = call.func
    found = BIASES.get(resolved(rule, func) or "")
    if found is not None:
        return func, found
    if isinstance(func, cst.Attribute) and func.attr.value in CONSTRUCTORS:
        found = BIASES.get(resolved(rule, func.value) or "")
        if found is not None:
            return func.value, found
    return None
