"""flash-attn uses porter can't port: reported, with what to do instead (TP102)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.families.thirdparty.flash_attn_calls import (
    FA3,
    FUNCTIONS,
    OPS,
    PRIVATE,
    PRIVATE_TARGETS,
    TARGETS,
    V1_CLASS,
    rebound,
    version_rewritten,
)
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.thirdparty.uses import (
    GuardTracker,
    UseFinder,
    under,
)


#: What to do instead, by the start of the flash_attn name that is used.
_ADVICE = [
    ("flash_attn.flash_attn_interface.flash_attn_with_kvcache",
     "update the cache yourself (k_cache[b, pos:pos + n] = k_new, ...) and call "
     "porter_runtime.attention(q, k_cache[:, :seqlen], v_cache[:, :seqlen], causal=True)"),
    ("flash_attn.flash_attn_with_kvcache",
     "update the cache yourself (k_cache[b, pos:pos + n] = k_new, ...) and call "
     "porter_runtime.attention(q, k_cache[:, :seqlen], v_cache[:, :seqlen], causal=True)"),
    ("flash_attn.bert_padding",
     "flash_attn/bert_padding.py is pure PyTorch: copy unpad_input / pad_input / "
     "index_first_axis into the repository"),
    ("flash_attn.layers.rotary",
     "use the non-fused reference flash_attn.layers.rotary.apply_rotary_emb_torch "
     "(rotate-half in PyTorch), copied into the repository"),
    ("flash_attn.ops.rms_norm", "torch.nn.RMSNorm / torch.nn.functional.rms_norm"),
    ("flash_attn.ops.triton.layer_norm", "torch.nn.functional.layer_norm / rms_norm"),
    ("flash_attn.ops.layer_norm", "torch.nn.functional.layer_norm"),
    ("flash_attn.ops.fused_dense", "torch.nn.Linear (+ the activation) instead of FusedDense / FusedMLP"),
    ("flash_attn.ops.activations", "torch.nn.functional.gelu(x, approximate='tanh') / silu"),
    ("flash_attn.losses.cross_entropy", "torch.nn.CrossEntropyLoss (same label_smoothing and "
     "ignore_index; no inplace_backward / process_group)"),
    ("flash_attn.modules.mha", "the model's own attention module with porter_runtime.attention, "
     "or torch.nn.MultiheadAttention"),
]
_FUNCTION_NAMES = frozenset({*TARGETS, FA3})
_PORTED_CALLS = _FUNCTION_NAMES | {V1_CLASS} | set(PRIVATE_TARGETS)


def _advice(name: str) -> str:
    for prefix, text in _ADVICE:
        if under(name, [prefix]):
            return text
    if name == FA3:
        return "call porter_runtime.fa3_attention (FA3's signature) where this value is used"
    if name == V1_CLASS:
        return "construct porter_runtime.FlashAttention (flash-attn 1.x's signature) where this value is used"
    if name in PRIVATE_TARGETS:
        return (f"call porter_runtime.{PRIVATE[PRIVATE_TARGETS[name]]} (flash_attn's private signature, "
                "with flash_attn_release=\"2.5\"/\"2.6\"/\"2.7\" where the call does not show it) where "
                "this value is used")
    if name in _FUNCTION_NAMES:
        twin = FUNCTIONS[TARGETS[name]][0]
        return f"call porter_runtime.{twin} (same signature) where this value is used"
    return "guard the import (try/except ImportError) and give the code a PyTorch path off CUDA"


class FlashAttnUnsupported(GuardTracker, UseFinder, Rule):
    """flash-attn APIs with no exact runtime twin are reported with what to use instead.

    What:
    Reports every use of a flash_attn name that TP101 does not rewrite:
    `flash_attn_with_kvcache`, `flash_attn.layers.*` (rotary; TP103 rewrites calls of
    `apply_rotary_emb`), `flash_attn.ops.*` (fused norms, dense, activations; TP103
    rewrites calls of the Triton `layer_norm_fn` / `rms_norm_fn`), `flash_attn.modules.*`, `flash_attn.losses.*`,
    `flash_attn.bert_padding` used other than by a call, FlashAttention-3's `flash_attn_interface`, and the
    attention functions used as values (`attn_fn = flash_attn_func`).

    Why:
    These imports fail without CUDA (`ModuleNotFoundError: No module named
    'flash_attn'`), and none has a drop-in twin that is exact on CUDA.

    Fix safety:
    Review only: each finding names the PyTorch replacement (or the pure-PyTorch
    reference inside flash_attn itself) that a human must wire in.

    Known limits:
    One finding per use; the import statement itself is not reported.
    """

    code = "TP102"
    name = "flash-attn-unsupported"
    safety = Safety.REVIEW
    needs = Needs(targets=frozenset({"flash_attn", "flash_attn_interface"}))
    prefixes = ("flash_attn", "flash_attn_interface")

    valid = [
        "def f(flash_attn):\n    return flash_attn.layers.rotary.apply_rotary_emb(x)\n",
        "import mylib as flash_attn\nflash_attn.ops.rms_norm(x)\n",
        # calls of the attention functions are TP101's
        "from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v)\n",
    ]
    invalid = [
        Example("from flash_attn import flash_attn_with_kvcache\n"
                "out = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=n)\n"),
        Example("import flash_attn.layers.rotary as rot\nemb = rot.RotaryEmbedding(64)\n"),
        Example("from flash_attn.ops.rms_norm import RMSNorm\nnorm = RMSNorm(512)\n"),
        Example("from flash_attn import flash_attn_func as fa\nATTENTION = {'flash': fa}\n"),
        Example("from flash_attn.bert_padding import unpad_input\nUNPAD = {'flash': unpad_input}\n"),
        Example("from flash_attn_interface import flash_attn_func as fa3\nATTENTION = {'fa3': fa3}\n"),
    ]

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        if self.guarded():
            return  # the try's body runs only where the import worked; its handler falls back
        if call is not None and name in _PORTED_CALLS:
            return  # TP101 rewrites or reports it
        if name == "flash_attn.__version__" and isinstance(node, cst.Name) \
                and version_rewritten(self.ctx.module, node.value):
            return  # TP104 rewrites its import
        if call is not None and name in OPS and not (isinstance(call.func, cst.Name)
                                                     and rebound(self.ctx.module, call.func.value)):
            return  # TP103 rewrites it
        what = f"`{name}`" + (" (called)" if call is not None else "")
        self.flag(call or node, f"{what} needs the flash_attn package, which does not build "
                  "without CUDA", suggestion=_advice(name))
