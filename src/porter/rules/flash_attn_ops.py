"""flash_attn's padding helpers, rotary embedding, Triton norm and fused loss call runtime twins (TP103)."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.families.thirdparty.flash_attn_calls import OPS, rebound
from porter.rulebase.families.thirdparty.uses import GuardTracker
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import EQ


class FlashAttnOps(GuardTracker, Rule):
    """flash_attn's `unpad_input`, `pad_input`, `index_first_axis`, `apply_rotary_emb`, `layer_norm_fn`, `rms_norm_fn` and `CrossEntropyLoss` become runtime twins.

    What:
    Rewrites calls of `flash_attn.bert_padding.unpad_input` / `pad_input` /
    `index_first_axis`, `flash_attn.layers.rotary.apply_rotary_emb` and
    `flash_attn.ops.triton.layer_norm.layer_norm_fn` / `rms_norm_fn`, and the construction
    of `flash_attn.losses.cross_entropy.CrossEntropyLoss`, to the same-named `porter_runtime`
    functions (and class), arguments kept. A call whose result is
    unpacked into four names (`x, idx, cu, m = unpad_input(h, mask)`, flash-attn before
    2.6) passes `results=4`. The import goes with its last use.

    Why:
    flash_attn does not build without CUDA, so `from flash_attn.layers.rotary import
    apply_rotary_emb` stops the module at import, although these ops are plain
    arithmetic: the padding helpers are PyTorch code in flash_attn itself.

    Fix safety:
    Safe. On a CUDA machine where flash_attn imports, each twin calls flash_attn's own
    function with the caller's arguments. Elsewhere the padding helpers run flash_attn's
    own PyTorch code; `apply_rotary_emb` runs flash_attn's reference
    (`apply_rotary_emb_torch`) in float32, with the kernel's offsets, variable-length
    batches (`cu_seqlens`) and positions past the table left as they are; the norms add
    the residual first and normalise in float32 as the kernel does. Arguments only the
    Triton kernel honours (`x1`, `rowscale`, `return_dropout_mask=True`) raise
    NotImplementedError off CUDA. The loss is computed in float32 as the kernel does
    (label smoothing, logit scale, z-loss, `ignore_index`); `inplace_backward` only saves
    memory; a vocabulary split over several processes raises NotImplementedError.

    Known limits:
    A name the module also binds itself (an `except ImportError:` fallback, a function of
    its own) and a call under a guard of the import are left to the module. Classes
    (`RotaryEmbedding`, the Triton `RMSNorm`) and the other ops are TP102's.
    """

    code = "TP103"
    name = "flash-attn-ops"
    safety = Safety.SAFE
    needs = Needs(calls_only=True, targets=frozenset(OPS), whole_file=True)  # rebound() reads the module

    valid = [
        # the module's own fallback decides
        dedent("""\
            try:
                from flash_attn.layers.rotary import apply_rotary_emb
            except ImportError:
                def apply_rotary_emb(x, cos, sin, interleaved=False):
                    return x

            q = apply_rotary_emb(q, cos, sin)
            """),
        "def f(apply_rotary_emb, q, cos, sin):\n    return apply_rotary_emb(q, cos, sin)\n",
    ]
    invalid = [
        Example(  # picotron/model.py
            dedent("""\
                import torch.nn as nn
                from flash_attn.flash_attn_interface import flash_attn_func
                from flash_attn.layers.rotary import apply_rotary_emb
                from flash_attn.ops.triton.layer_norm import layer_norm_fn


                class TritonRMSNorm(nn.Module):
                    def forward(self, hidden_states, residual=None, prenorm=False, residual_in_fp32=False):
                        return layer_norm_fn(hidden_states, self.weight, None, residual=residual, eps=self.eps,
                                             prenorm=prenorm, residual_in_fp32=residual_in_fp32, is_rms_norm=True)


                def rotate(q, k, cos, sin, head_dim):
                    q = apply_rotary_emb(q, cos[:, :head_dim // 2], sin[:, :head_dim // 2], interleaved=False)
                    k = apply_rotary_emb(k, cos[:, :head_dim // 2], sin[:, :head_dim // 2], interleaved=False)
                    return q, k
                """),
            dedent("""\
                import porter_runtime
                import torch.nn as nn
                from flash_attn.flash_attn_interface import flash_attn_func


                class TritonRMSNorm(nn.Module):
                    def forward(self, hidden_states, residual=None, prenorm=False, residual_in_fp32=False):
                        return porter_runtime.layer_norm_fn(hidden_states, self.weight, None, residual=residual, eps=self.eps,
                                             prenorm=prenorm, residual_in_fp32=residual_in_fp32, is_rms_norm=True)


                def rotate(q, k, cos, sin, head_dim):
                    q = porter_runtime.apply_rotary_emb(q, cos[:, :head_dim // 2], sin[:, :head_dim // 2], interleaved=False)
                    k = porter_runtime.apply_rotary_emb(k, cos[:, :head_dim // 2], sin[:, :head_dim // 2], interleaved=False)
                    return q, k
                """),
        ),
        Example(  # FastChat / LLaVA-style packing, flash-attn 2.5's four results
            dedent("""\
                from flash_attn.bert_padding import pad_input, unpad_input


                def packed(hidden, mask, attend):
                    batch, seqlen = mask.shape
                    x, indices, cu_seqlens, max_s = unpad_input(hidden, mask)
                    return pad_input(attend(x, cu_seqlens, max_s), indices, batch, seqlen)
                """),
            dedent("""\
                import porter_runtime


                def packed(hidden, mask, attend):
                    batch, seqlen = mask.shape
                    x, indices, cu_seqlens, max_s = porter_runtime.unpad_input(hidden, mask, results=4)
                    return porter_runtime.pad_input(attend(x, cu_seqlens, max_s), indices, batch, seqlen)
                """),
        ),
        Example(  # EasyContext's train.py (blind round 17): flash-attn's fused loss over a long sequence
            dedent("""\
                from flash_attn.losses.cross_entropy import CrossEntropyLoss

                loss_func = CrossEntropyLoss(inplace_backward=True)
                """),
            dedent("""\
                import porter_runtime

                loss_func = porter_runtime.CrossEntropyLoss(inplace_backward=True)
                """),
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = self.matches(original.func)
        if name is None or self.guarded():
            return updated
        if isinstance(original.func, cst.Name) and rebound(self.ctx.module, original.func.value):
            return updated
        twin = OPS[name]
        new = updated.with_changes(func=self.runtime(twin))
        if twin == "unpad_input" and original in self._four:
            new = new.with_changes(args=[*new.args[:-1], new.args[-1].with_changes(
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                cst.Arg(cst.Integer("4"), keyword=cst.Name("results"), equal=EQ)])
        return self.rewrite(original, new, f"flash_attn's `{name.rsplit('.', 1)[1]}` now runs flash_attn's own on "
                            "CUDA and the same computation in PyTorch elsewhere")

    def visit_Assign(self, node: cst.Assign) -> None:
        target = node.targets[0].target if len(node.targets) == 1 else None
        if isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 4 \
                and isinstance(node.value, cst.Call):
            self._four.add(node.value)

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._four: set[cst.Call] = set()
