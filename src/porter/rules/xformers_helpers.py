"""xformers' tensor helpers (unbind, scaled_index_add, index_select_cat) become the runtime's twins."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.thirdparty.uses import example_code
from porter.rulebase.families.thirdparty.xformers_names import HELPER_NAMES, helper_call, resolved


class XformersHelpers(Rule):
    """xformers' tensor helpers become `porter_runtime.xformers_ops.*`.

    What:
    Rewrites calls of `unbind`, `scaled_index_add` and `index_select_cat` (from
    `xformers.ops`, however imported) into the same call on
    `porter_runtime.xformers_ops`.

    Why:
    They live in `xformers.ops`, which does not import without CUDA, yet each is a
    few lines of PyTorch: ViT blocks (DINOv2's stochastic-depth residuals, packed
    nested-tensor batches) call them beside `memory_efficient_attention`.

    Fix safety:
    Safe. On CUDA with xformers importable each twin calls xformers' own function
    with the caller's arguments. Elsewhere it runs the PyTorch code xformers documents
    as its equivalent: `torch.unbind(x, dim)`; `input.index_add_(0, index, source *
    scaling, alpha=alpha)` in place, returning `input`, as xformers' forward does;
    `torch.cat([s[i.long()].flatten() for s, i in zip(sources, indices)])`.

    Known limits:
    Calls with `*args`/`**kwargs` or unknown keywords are left to TP203. Other helpers
    (`stack_or_none`, `get_stack_strides`) are reported by TP203.
    """

    code = "TP204"
    name = "xformers-helpers"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset(HELPER_NAMES), calls_only=True)

    valid = [
        "def f(xops, qkv):\n    return xops.unbind(qkv, 2)\n",
        "import torch\nq, k, v = torch.unbind(qkv, 2)\n",
        "from mylib import index_select_cat\nout = index_select_cat(xs, idx)\n",
    ]
    invalid = [
        Example(
            example_code("""
            import torch.nn.functional as F
            from xformers.ops import unbind


            def attend(self, x):
                B, N, C = x.shape
                qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).transpose(1, 3)
                q, k, v = unbind(qkv, 2)
                return F.scaled_dot_product_attention(q, k, v)
            """),
            example_code("""
            import porter_runtime
            import torch.nn.functional as F


            def attend(self, x):
                B, N, C = x.shape
                qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).transpose(1, 3)
                q, k, v = porter_runtime.xformers_ops.unbind(qkv, 2)
                return F.scaled_dot_product_attention(q, k, v)
            """),
        ),
        Example(
            example_code("""
            from xformers.ops import index_select_cat, scaled_index_add


            def add_residual(x, brange, residual, residual_scale_factor, scaling_vector):
                return scaled_index_add(x, brange, residual.to(dtype=x.dtype), scaling=scaling_vector,
                                        alpha=residual_scale_factor)


            def cat_subsets(x_list, branges):
                return index_select_cat([x.flatten(1) for x in x_list], branges)
            """),
            example_code("""
            import porter_runtime


            def add_residual(x, brange, residual, residual_scale_factor, scaling_vector):
                return porter_runtime.xformers_ops.scaled_index_add(x, brange, residual.to(dtype=x.dtype), scaling=scaling_vector,
                                        alpha=residual_scale_factor)


            def cat_subsets(x_list, branges):
                return porter_runtime.xformers_ops.index_select_cat([x.flatten(1) for x in x_list], branges)
            """),
        ),
        Example("import xformers.ops as xops\nparts = xops.unbind(*args)\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        name = HELPER_NAMES.get(resolved(self, original.func) or "")
        if name is None:
            return updated
        if helper_call(self, original) is None:
            self.flag(original, f"`{name}` with unpacked or unknown arguments can't be checked",
                      suggestion=f"porter_runtime.xformers_ops.{name}(...) with the arguments spelled out")
            return updated
        new = updated.with_changes(func=cst.Attribute(self.runtime("xformers_ops"), cst.Name(name)))
        return self.rewrite(original, new, f"`{name}` is xformers' own on CUDA and its documented "
                            "PyTorch equivalent elsewhere")
