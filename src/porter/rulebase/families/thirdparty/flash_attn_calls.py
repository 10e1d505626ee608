"""flash-attn's attention functions, their runtime twins and whether a call maps onto its twin
exactly (the flash-attn rules, TP101 and TP102).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.rule import Rule, keyword
from porter.rulebase.syntax import literal_is
from porter.rulebase.families.thirdparty.uses import (
    UseFinder,
    arguments_fit,
)


_OPTIONS = ("dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
            "deterministic", "return_attn_probs")
#: flash_attn function → (runtime twin, its leading parameters). Positional arguments
#: are accepted up to ``causal`` only: later positions differ between flash_attn 2.x
#: releases (``window_size`` and ``softcap`` were inserted before ``alibi_slopes``).
FUNCTIONS = {
    "flash_attn_func": ("attention", ("q", "k", "v")),
    "flash_attn_qkvpacked_func": ("attention_qkvpacked", ("qkv",)),
    "flash_attn_kvpacked_func": ("attention_kvpacked", ("q", "kv")),
    "flash_attn_varlen_func": ("attention_varlen", (
        "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")),
    "flash_attn_varlen_qkvpacked_func": ("attention_varlen_qkvpacked",
                                         ("qkv", "cu_seqlens", "max_seqlen")),
    "flash_attn_varlen_kvpacked_func": ("attention_varlen_kvpacked", (
        "q", "kv", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")),
}
_MODULES = ("flash_attn", "flash_attn.flash_attn_interface")
TARGETS = {f"{m}.{f}": f for m in _MODULES for f in FUNCTIONS}
#: FlashAttention-3 (``pip install`` from flash-attention/hopper): its own module.
FA3 = "flash_attn_interface.flash_attn_func"
#: FA3's options that FA2 shares (FA3 has no dropout); q, k, v are the only positionals
#: accepted, because FA3's fourth is softmax_scale and FA2's dropout_p.
_FA3_OPTIONS = frozenset({"q", "k", "v", "softmax_scale", "causal", "window_size", "softcap",
                          "deterministic"})
ROOTS = ("flash_attn", "flash_attn_interface")
#: flash-attn 1.x's attention module (removed in 2.0): its twin is a class of the runtime.
V1_CLASS = "flash_attn.flash_attention.FlashAttention"


def _needs_flash(call: cst.Call) -> Optional[str]:
    """The argument only flash_attn's kernels can honour, if the call passes one."""
    probs = keyword(call, "return_attn_probs")
    if probs is not None and not literal_is(probs.value, "False"):
        return "return_attn_probs"
    table = keyword(call, "block_table")
    if table is not None and not literal_is(table.value, "None"):
        return "block_table"
    return None


def unpacked_call(node: cst.CSTNode) -> list[cst.Call]:
    """The call whose result ``out, lse = f(...)`` unpacks or ``f(...)[0]`` indexes."""
    if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call) \
            and any(isinstance(t.target, (cst.Tuple, cst.List)) for t in node.targets):
        return [node.value]
    if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Call):
        return [node.value]
    return []


def fa3_problem(call: cst.Call, unpacked: bool) -> Optional[tuple[str, str]]:
    """Why an FA3 call can't become fa3_attention (message, suggestion), or None."""
    if not arguments_fit(call, 3, _FA3_OPTIONS) or keyword(call, "return_attn_probs"):
        return ("FlashAttention-3's `flash_attn_func` with these arguments can't be mapped exactly: "
                "FA3 has no dropout and its 4th positional is softmax_scale",
                "porter_runtime.fa3_attention(q, k, v, softmax_scale=..., causal=...)")
    if unpacked:
        return ("FlashAttention-3's `flash_attn_func` result is unpacked or indexed (`out, lse = ...`): "
                "its softmax_lse exists only in FA3's CUDA kernel",
                "take `out = porter_runtime.fa3_attention(q, k, v, ...)` and then `if isinstance(out, "
                "tuple): out = out[0]`; compute lse with torch.logsumexp where it is needed")
    return None


def fa2_problem(call: cst.Call, function: str) -> Optional[tuple[str, str]]:
    """Why a flash_attn call can't become its twin (message, suggestion), or None."""
    twin, leading = FUNCTIONS[function]
    allowed = frozenset(leading + _OPTIONS + ("block_table",))
    if not arguments_fit(call, len(leading) + 3, allowed):
        return (f"`{function}` with these arguments can't be mapped exactly; positional arguments "
                "after `causal`, `*args` and unknown keywords differ between flash_attn releases",
                f"porter_runtime.{twin}(...) with keyword arguments")
    needs = _needs_flash(call)
    if needs is not None:
        return (f"`{function}(..., {needs}=...)` needs flash_attn's CUDA kernels; porter_runtime.{twin} "
                "raises NotImplementedError for it off CUDA", _SUGGEST_NEEDS[needs])
    return None


class PortedUses(UseFinder, cst.CSTVisitor):
    """Whether every use of a flash_attn name in a module is a call TP101 rewrites."""

    prefixes = ROOTS

    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.qualname = rule.qualname
        self.all_ported = True
        self._unpacked: set[cst.Call] = set()

    def visit_Assign(self, node: cst.Assign) -> None:
        self._unpacked.update(unpacked_call(node))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._unpacked.update(unpacked_call(node))

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        if call is None or name not in TARGETS and name not in (FA3, V1_CLASS):
            self.all_ported = False
        elif name == V1_CLASS:
            pass  # any arguments: the twin has 1.x's signature
        elif name == FA3:
            self.all_ported &= fa3_problem(call, call in self._unpacked) is None
        else:
            self.all_ported &= fa2_problem(call, TARGETS[name]) is None


_SUGGEST_NEEDS = {
    "return_attn_probs": "drop return_attn_probs (and the softmax_lse/S_dmask it returns) off CUDA, "
                         "or compute the log-sum-exp with torch.logsumexp(q @ k.transpose(-1, -2) * "
                         "scale, -1) where it is needed",
    "block_table": "off CUDA gather the pages into contiguous k/v (k_cache[block_table].flatten(1, 2)) "
                   "and call porter_runtime.attention_varlen without block_table",
}
