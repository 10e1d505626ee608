"""flash-attn's attention functions, their runtime twins and whether a call maps onto its twin
exactly (the flash-attn rules, TP101 and TP102).
"""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import Rule, keyword
from porter.rulebase.syntax import literal_is
from porter.rulebase.walk import nodes_of
from porter.rulebase.families.thirdparty.uses import (
    UseFinder,
    arguments_fit,
    chain_alternatives,
    module_chains,
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
#: flash_attn's private forward/backward (custom autograd Functions call them for the
#: log-sum-exp) → their runtime twins, which bind any 2.5-2.8 layout (attn/internals.py).
PRIVATE = {
    "_flash_attn_forward": "flash_attn_forward",
    "_flash_attn_varlen_forward": "flash_attn_varlen_forward",
    "_flash_attn_backward": "flash_attn_backward",
    "_flash_attn_varlen_backward": "flash_attn_varlen_backward",
}
PRIVATE_TARGETS = {f"flash_attn.flash_attn_interface.{f}": f for f in PRIVATE}
#: Where the window argument sits: a pair there is 2.5/2.6's layout, an int 2.7's.
_WINDOW_AT = {"_flash_attn_forward": 6, "_flash_attn_varlen_forward": 10,
              "_flash_attn_backward": 12, "_flash_attn_varlen_backward": 16}
_RELEASE_KEYWORDS = frozenset({"window_size", "window_size_left", "window_size_right", "zero_tensors"})
#: The result's length tells the release: 2.5/2.6's forward returns 8 values and their
#: backward (dq, dk, dv, softmax_d); 2.7's return 4 values and softmax_d.
_RELEASE_BY_ARITY = {("forward", 8): "2.6", ("forward", 4): "2.7", ("backward", 4): "2.6"}
_KERNEL_ONLY = ("block_table", "leftpad_k", "seqused_k")
#: flash-attn 1.x's attention module (removed in 2.0): its twin is a class of the runtime.
V1_CLASS = "flash_attn.flash_attention.FlashAttention"


def _needs_flash(call: cst.Call) -> Optional[str]:
    """The argument only flash_attn's kernels can honour, if the call passes one
    (``return_attn_probs=True`` is not one: the twins return ``(out, softmax_lse, None)``)."""
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


class _ResultUses(cst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.uses: dict[cst.Call, tuple] = {}

    def visit_Assign(self, node: cst.Assign) -> None:
        if isinstance(node.value, cst.Call) and len(node.targets) == 1:
            target = node.targets[0].target
            if isinstance(target, (cst.Tuple, cst.List)) and \
                    not any(isinstance(e, cst.StarredElement) for e in target.elements):
                self.uses[node.value] = ("unpack", len(target.elements))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        if isinstance(node.value, cst.Call) and len(node.slice) == 1:
            index = node.slice[0].slice
            if isinstance(index, cst.Index) and isinstance(index.value, cst.Integer):
                self.uses[node.value] = ("index", int(index.value.value))

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Call):
            self.uses[node.value] = ("discard",)


def result_uses(module: cst.Module) -> dict[cst.Call, tuple]:
    """How each call's result is used, where the statement around it shows it (the
    ``use`` of private_problem)."""
    visitor = _ResultUses()
    module.visit(visitor)
    return visitor.uses


class PortedUses(UseFinder, cst.CSTVisitor):
    """Whether every use of a flash_attn name in a module is a call TP101 rewrites."""

    prefixes = ROOTS

    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.qualname = rule.qualname
        self.all_ported = True
        self._unpacked: set[cst.Call] = set()
        self._uses: Optional[dict[cst.Call, tuple]] = None
        self.module = rule.ctx.module

    def visit_Assign(self, node: cst.Assign) -> None:
        self._unpacked.update(unpacked_call(node))

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._unpacked.update(unpacked_call(node))

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        if call is not None and name in PRIVATE_TARGETS:
            if self._uses is None:
                self._uses = result_uses(self.module)
            self.all_ported &= private_problem(call, PRIVATE_TARGETS[name], self._uses.get(call))[0] is None
        elif call is None and name in TARGETS:
            pass  # handed on as a value: TP101 names the twin instead
        elif call is None or name not in TARGETS and name not in (FA3, V1_CLASS):
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


def private_problem(call: cst.Call, function: str, use: Optional[tuple]
                    ) -> tuple[Optional[tuple[str, str]], Optional[str]]:
    """(why a call of a private flash_attn function can't become its twin, or None;
    the release to pass the twin, when only the way its result is used tells).

    ``use``: ("unpack", n) for ``a, b, ... = f(...)``, ("index", i) for ``f(...)[i]``,
    ("discard",) for a bare call statement, None otherwise."""
    twin = PRIVATE[function]
    names = {a.keyword.value for a in call.args if a.keyword is not None}
    for name in _KERNEL_ONLY + ("return_softmax",):
        arg = keyword(call, name)
        if arg is not None and not literal_is(arg.value, "None" if name != "return_softmax" else "False"):
            return (f"`{function}(..., {name}=...)` needs flash_attn's CUDA kernels; porter_runtime.{twin} "
                    "raises NotImplementedError for it off CUDA",
                    "keep this path for CUDA and give the code a PyTorch path elsewhere"), None
    starred = any(a.star for a in call.args)
    positional = sum(1 for a in call.args if a.keyword is None and not a.star)
    if not starred and (names & _RELEASE_KEYWORDS or positional > _WINDOW_AT[function]):
        return None, None  # the twin reads the release off the call itself
    kind = "backward" if function.endswith("backward") else "forward"
    if use is not None and use[0] == "unpack" and (kind, use[1]) in _RELEASE_BY_ARITY:
        return None, _RELEASE_BY_ARITY[(kind, use[1])]
    if not starred and use is not None and (use == ("discard",) or use == ("index", 0) and kind == "forward"):
        return None, None  # the same in every release: the in-place gradients, or `out`
    if starred:
        return (f"`{function}` is flash_attn's private function, called here with `*`/`**` arguments porter "
                "can't check against a release's layout",
                f"call porter_runtime.{twin}(...) with the arguments written out (it binds flash_attn 2.5 to "
                "2.8's layouts, and runs flash_attn's own function on CUDA)"), None
    return (f"`{function}` is flash_attn's private function, whose arguments and results changed "
            "between releases, and this call does not show which release it was written for",
            f"call porter_runtime.{twin}(..., flash_attn_release=\"2.6\") (or \"2.5\", \"2.7\": the "
            "release this code targets); it runs flash_attn's own function on CUDA"), None


#: flash_attn's other ops with a runtime twin (porter_runtime/attn/flash_ops.py): the
#: padding helpers, the rotary embedding and the Triton norm's functions (TP103).
OPS = {
    "flash_attn.bert_padding.unpad_input": "unpad_input",
    "flash_attn.bert_padding.pad_input": "pad_input",
    "flash_attn.bert_padding.index_first_axis": "index_first_axis",
    "flash_attn.layers.rotary.apply_rotary_emb": "apply_rotary_emb",
    "flash_attn.ops.triton.layer_norm.layer_norm_fn": "layer_norm_fn",
    "flash_attn.ops.triton.layer_norm.rms_norm_fn": "rms_norm_fn",
    "flash_attn.losses.cross_entropy.CrossEntropyLoss": "CrossEntropyLoss",
}


def rebound(module: cst.Module, name: str) -> bool:
    """Whether the module binds ``name`` otherwise than by an import (an ``except
    ImportError:`` fallback, a function of its own): its own choice, left to it."""
    for node in nodes_of(module, (cst.FunctionDef, cst.ClassDef, cst.AssignTarget)):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node.name.value == name:
            return True
        if isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name) and node.target.value == name:
            return True
    return False


def version_import(small: cst.BaseSmallStatement) -> Optional[str]:
    """The name ``from flash_attn import __version__ [as name]`` binds, or None."""
    if not isinstance(small, cst.ImportFrom) or small.relative or small.module is None \
            or dotted_name(small.module) != "flash_attn" or isinstance(small.names, cst.ImportStar) \
            or len(small.names) != 1 or dotted_name(small.names[0].name) != "__version__":
        return None
    alias = small.names[0].asname
    if alias is None:
        return "__version__"
    return alias.name.value if isinstance(alias.name, cst.Name) else None


def version_rewritten(module: cst.Module, name: str) -> bool:
    """Whether ``name`` is bound by a module-level ``from flash_attn import __version__``
    alone on its line, which TP104 rewrites."""
    return any(isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
               and version_import(stmt.body[0]) == name for stmt in module.body)


class TwinValues:
    """Mixin for TP101: flash-attn's function handed on as a value (`full_attn_func =
    flash_attn_func`, `UlyssesAttention(attn_func=flash_attn_func)`: duo-attention, blind
    round 18) becomes its twin, which takes the same arguments wherever the value is called.
    The rule calls :meth:`not_values` from its `visit_Assign`."""

    def not_values(self, node: cst.Assign) -> None:
        self._skipped().update(id(t.target) for t in node.targets)

    def _skipped(self) -> set[int]:
        if not hasattr(self, "_not_values"):
            self._not_values: set[int] = set()  # callees, targets, keyword names, attribute parts
        return self._not_values

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Global(self, node: cst.Global) -> None:
        self._skipped().update(id(item.name) for item in node.names)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self._skipped().update(id(item.name) for item in node.names)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        self._skipped().update(id(n) for n in nodes_of(node, (cst.Name, cst.Attribute)))

    def visit_Del(self, node: cst.Del) -> None:
        self._skipped().add(id(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._skipped().add(id(node.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._skipped().add(id(node.target))

    def visit_Call(self, node: cst.Call) -> None:
        self._skipped().add(id(node.func))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._skipped().add(id(node.keyword))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._skipped().update((id(node.value), id(node.attr)))

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._value(original, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.BaseExpression:
        return self._value(original, updated)

    def _value(self, original: cst.BaseExpression, updated: cst.BaseExpression) -> cst.BaseExpression:
        if id(original) in self._skipped():
            return updated
        if self._chains is None:  # type: ignore[has-type]
            self._chains = module_chains(self.ctx.module, ROOTS)  # type: ignore[attr-defined]
        options = chain_alternatives(self, original, self._chains)
        if not options or len(options) != 1 or options[0] not in TARGETS:
            return updated
        function = TARGETS[options[0]]
        return self.rewrite(original, self.runtime(FUNCTIONS[function][0]),  # type: ignore[attr-defined]
                            f"`{function}` handed on as a value is now its twin, which runs flash-attn where it "
                            "can and exact SDPA elsewhere, with the same arguments")
