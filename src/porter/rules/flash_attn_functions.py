"""flash-attn's attention functions become the runtime's twins (TP101)."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.families.thirdparty.flash_attn_calls import (
    FA3,
    FUNCTIONS,
    PRIVATE,
    PRIVATE_TARGETS,
    ROOTS,
    TARGETS,
    V1_CLASS,
    PortedUses,
    TwinValues,
    fa2_problem,
    fa3_problem,
    private_problem,
    result_uses,
    unpacked_call,
)
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import EQ, with_arg
from porter.rulebase.families.thirdparty.twin_flags import flags_for_twins, mark_probe_imports
from porter.rulebase.families.thirdparty.uses import (
    chain_alternatives,
    drop_dead_chains,
    example_code,
    module_chains,
    package_units,
    stop_evidence,
    without_stops,
)


_CHAIN_ADVICE = ("give the last `except ImportError:` a fallback (`flash_attn_func = None` and a "
                 "PyTorch path), or call porter_runtime.attention / porter_runtime.fa3_attention")


class FlashAttnFunc(TwinValues, Rule):
    """flash-attn's attention functions become `porter_runtime.attention*` with the same arguments.

    What:
    Rewrites calls of `flash_attn_func`, `flash_attn_qkvpacked_func`,
    `flash_attn_kvpacked_func`, `flash_attn_varlen_func`,
    `flash_attn_varlen_qkvpacked_func` and `flash_attn_varlen_kvpacked_func`, however
    imported (`from flash_attn import ...`, `flash_attn.flash_attn_interface`, module
    imports, aliases), into `porter_runtime.attention`, `attention_qkvpacked`,
    `attention_kvpacked`, `attention_varlen`, `attention_varlen_qkvpacked` and
    `attention_varlen_kvpacked`, keeping every argument as written; the function handed
    on as a value (`attn_func=flash_attn_func`) becomes the twin itself. flash_attn's private
    `_flash_attn_forward`, `_flash_attn_varlen_forward`, `_flash_attn_backward` and
    `_flash_attn_varlen_backward`, which custom autograd Functions call for the
    log-sum-exp and for gradients of a merged output, become `porter_runtime.flash_attn_forward`
    and its siblings; where only the way the result is unpacked shows which release's
    layout the call was written for, `flash_attn_release="2.6"` (or "2.7") is passed
    too. The import that only served those calls goes away. FlashAttention-3's `flash_attn_interface.flash_attn_func`,
    alone or tried first in a `try: ... except ImportError:` chain that falls back to
    FlashAttention-2, becomes `porter_runtime.fa3_attention`, which tries them in the same
    order. A chain whose every branch imports flash_attn (or raises) is no guard: once
    its names have no use left it goes like a plain import; otherwise it is reported.
    A stop on the module's own flag (`HAS_FLASH = False` in `except ImportError:`,
    then `if not HAS_FLASH: raise ...` / `assert HAS_FLASH`) goes once every flash_attn
    use in the file is ported, and is reported otherwise; the `try` that sets the flag
    goes too once nothing in the tree reads its names (porter.edits.probes).

    Why:
    flash-attn does not build without CUDA (`pip install flash-attn` fails on a Mac), so
    `from flash_attn import flash_attn_func` raises `ModuleNotFoundError`.

    Fix safety:
    Safe. The twins have flash_attn's signatures; on CUDA with flash_attn importable and
    fp16/bf16 inputs they call the same flash_attn function with the caller's
    arguments. Elsewhere they compute flash-attn's semantics with
    scaled_dot_product_attention (bottom-right causal and window masks, GQA/MQA,
    ALiBi, softcap, zero rows for empty windows); with `return_attn_probs=True` they
    return `(out, softmax_lse, None)`, the log-sum-exp computed in PyTorch and
    differentiable (ring attention's references backpropagate through it), and no
    encoded dropout mask. Calls passing a paged `block_table` need flash_attn's own
    kernels and are reported instead, as are calls with `*args`/`**kwargs`, unknown keywords, or
    positional arguments after `causal` (their meaning changed between releases).
    `fa3_attention` calls FA3's own function on CUDA where `flash_attn_interface`
    imports and returns what it returns (`(out, lse)` in some releases, so
    `isinstance(out, tuple)` checks keep working); elsewhere it returns the tensor.
    An FA3 call whose result is unpacked or indexed (`out, lse = ...`, `...[0]`) is
    reported: off CUDA there is no `lse` to return.

    Known limits:
    A name bound both by the flash_attn import and by a fallback (`try: from flash_attn
    import flash_attn_func` / `except ImportError: flash_attn_func = None` or another
    import) is left alone: the file already has its own fallback. Dropout draws
    different random masks than flash-attn's kernel.
    """

    code = "TP101"
    name = "flash-attn-func"
    safety = Safety.SAFE
    needs = Needs(
        calls_only=False,  # an import chain is reported even where its names are only values
        targets=frozenset({*TARGETS, *PRIVATE_TARGETS, FA3, V1_CLASS}),
        # an import chain is removed once no use is left in the module
        unit=package_units(ROOTS),
    )

    valid = [
        # shadowed: a parameter named like the function
        "def attend(q, k, v, flash_attn_func):\n    return flash_attn_func(q, k, v)\n",
        # lookalike: another package's function of the same name
        "from mylib import flash_attn_func\nout = flash_attn_func(q, k, v, causal=True)\n",
        "import mylib as flash_attn\nout = flash_attn.flash_attn_func(q, k, v)\n",
        # already guarded with its own fallback: not double-wrapped
        "try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n"
        "    flash_attn_func = None\n\n"
        "def attend(q, k, v):\n    if flash_attn_func is None:\n        return sdpa(q, k, v)\n"
        "    return flash_attn_func(q, k, v, causal=True)\n",
    ]
    invalid = [
        # from-import: the import goes away with its last use
        Example(
            "import torch\nfrom flash_attn import flash_attn_func\n\n"
            "out = flash_attn_func(q, k, v, dropout_p=0.1, causal=True)  # (B, S, H, D)\n",
            "import porter_runtime\nimport torch\n\n"
            "out = porter_runtime.attention(q, k, v, dropout_p=0.1, causal=True)  # (B, S, H, D)\n",
        ),
        # a reference that needs the log-sum-exp (ring-flash-attention's tests)
        Example(
            "from flash_attn import flash_attn_qkvpacked_func\n\n"
            "out, lse, _ = flash_attn_qkvpacked_func(qkv, 0.0, causal=True, return_attn_probs=True)\n",
            "import porter_runtime\n\n"
            "out, lse, _ = porter_runtime.attention_qkvpacked(qkv, 0.0, causal=True, return_attn_probs=True)\n",
        ),
        # alias through the interface module
        Example(
            "from flash_attn.flash_attn_interface import flash_attn_varlen_func as varlen\n"
            "out = varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, window_size=(128, 0))\n",
            "import porter_runtime\n"
            "out = porter_runtime.attention_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=True, "
            "window_size=(128, 0))\n",
        ),
        # module import with an alias
        Example(
            "import flash_attn as fa\n\n"
            "def attend(qkv):\n    return fa.flash_attn_qkvpacked_func(qkv, 0.0, None, True)\n",
            "import porter_runtime\n\n"
            "def attend(qkv):\n    return porter_runtime.attention_qkvpacked(qkv, 0.0, None, True)\n",
        ),
        Example(
            "from flash_attn import flash_attn_interface\n"
            "out = flash_attn_interface.flash_attn_kvpacked_func(q, kv, causal=True)\n"
            "out2 = flash_attn_interface.flash_attn_varlen_kvpacked_func(q, kv, cu_q, cu_k, mq, mk)\n"
            "out3 = flash_attn_interface.flash_attn_varlen_qkvpacked_func(qkv, cu, m)\n",
            "import porter_runtime\n"
            "out = porter_runtime.attention_kvpacked(q, kv, causal=True)\n"
            "out2 = porter_runtime.attention_varlen_kvpacked(q, kv, cu_q, cu_k, mq, mk)\n"
            "out3 = porter_runtime.attention_varlen_qkvpacked(qkv, cu, m)\n",
        ),
        # guarded by a flag only: the calls are rewritten, the guarded import stays (it is
        # the flag's test), marked as imported for it
        Example(
            "try:\n    from flash_attn import flash_attn_func\n    HAS_FLASH = True\n"
            "except ImportError:\n    HAS_FLASH = False\n\n"
            "def attend(q, k, v):\n    if HAS_FLASH:\n        return flash_attn_func(q, k, v)\n"
            "    return sdpa(q, k, v)\n",
            "import porter_runtime\n"
            "try:\n    from flash_attn import flash_attn_func  # noqa: F401\n    HAS_FLASH = True\n"
            "except ImportError:\n    HAS_FLASH = False\n\n"
            "def attend(q, k, v):\n    if HAS_FLASH:\n        return porter_runtime.attention(q, k, v)\n"
            "    return sdpa(q, k, v)\n",
        ),
        # flash-attn 1.x's module, imported where it is built (the import goes with its use)
        Example(
            example_code("""
            import torch.nn as nn


            class QKVFlashAttention(nn.Module):
                def __init__(self, embed_dim, num_heads, attention_dropout=0.0, device=None, dtype=None):
                    from flash_attn.flash_attention import FlashAttention

                    super().__init__()
                    factory_kwargs = {"device": device, "dtype": dtype}
                    self.inner_attn = FlashAttention(attention_dropout=attention_dropout, **factory_kwargs)
            """),
            example_code("""
            import porter_runtime
            import torch.nn as nn


            class QKVFlashAttention(nn.Module):
                def __init__(self, embed_dim, num_heads, attention_dropout=0.0, device=None, dtype=None):
                    super().__init__()
                    factory_kwargs = {"device": device, "dtype": dtype}
                    self.inner_attn = porter_runtime.FlashAttention(attention_dropout=attention_dropout, **factory_kwargs)
            """),
        ),
        # FlashAttention-3 first, FlashAttention-2 as the fallback: no guard, ported
        Example(
            example_code("""
            import torch

            try:
                from flash_attn_interface import flash_attn_func  # FlashAttention-3
            except ImportError:
                from flash_attn import flash_attn_func


            def attend(q, k, v):
                out = flash_attn_func(q, k, v, causal=True)
                if isinstance(out, tuple):  # FA3 returns (out, lse)
                    out = out[0]
                return out
            """),
            example_code("""
            import porter_runtime
            import torch


            def attend(q, k, v):
                out = porter_runtime.fa3_attention(q, k, v, causal=True)
                if isinstance(out, tuple):  # FA3 returns (out, lse)
                    out = out[0]
                return out
            """),
        ),
        # the same chain through module aliases, re-raising at the end
        Example(
            example_code("""
            try:
                import flash_attn_interface as fa
            except ImportError:
                try:
                    import flash_attn as fa
                except ImportError:
                    raise ImportError("flash-attn is required")
            out = fa.flash_attn_func(q, k, v, softmax_scale=0.125)
            """),
            example_code("""
            import porter_runtime
            out = porter_runtime.fa3_attention(q, k, v, softmax_scale=0.125)
            """),
        ),
        # handed on as a value (duo-attention's patch/llama.py): the twin, and the import goes
        Example(
            example_code("""
            from flash_attn import flash_attn_func

            from duo_attn.ulysses import UlyssesAttention

            full_attn_func = flash_attn_func
            attn = UlyssesAttention(attn_func=flash_attn_func)
            """),
            example_code("""
            import porter_runtime

            from duo_attn.ulysses import UlyssesAttention

            full_attn_func = porter_runtime.attention
            attn = UlyssesAttention(attn_func=porter_runtime.attention)
            """),
        ),
        # FA3's (out, lse) unpacked: off CUDA there is no lse (line 2)
        Example("from flash_attn_interface import flash_attn_func\n"
                "out, lse = flash_attn_func(q, k, v, causal=True)\n"),
        # a chain whose names stay in use is reported (line 1): it is no guard
        Example("try:\n    from flash_attn_interface import flash_attn_func\nexcept ImportError:\n"
                "    from flash_attn import flash_attn_func\nATTN = {'flash': flash_attn_func}\n"),
        # the chain also records which branch ran: the calls are ported, the chain
        # (which still fails off CUDA) is reported at line 2
        Example(
            example_code("""
            import torch
            try:
                from flash_attn_interface import flash_attn_func
                FA_VERSION = 3
            except ImportError:
                from flash_attn import flash_attn_func
                FA_VERSION = 2
            out = flash_attn_func(q, k, v, causal=True)
            """),
            example_code("""
            import porter_runtime
            import torch
            try:
                from flash_attn_interface import flash_attn_func
                FA_VERSION = 3
            except ImportError:
                from flash_attn import flash_attn_func
                FA_VERSION = 2
            out = porter_runtime.fa3_attention(q, k, v, causal=True)
            """),
        ),
        # the module's own flag stops the ported path off CUDA: the stop goes, then
        # the probe, whose names nothing reads any more (porter.edits.probes)
        Example(
            example_code("""
            try:
                from flash_attn import flash_attn_func
                HAS_FLASH = True
            except ImportError:
                HAS_FLASH = False


            def attend(q, k, v):
                assert HAS_FLASH, "pip install flash-attn"
                return flash_attn_func(q, k, v, causal=True)
            """),
            example_code("""
            import porter_runtime


            def attend(q, k, v):
                return porter_runtime.attention(q, k, v, causal=True)
            """),
        ),
        # a custom autograd Function over flash_attn's private forward/backward (ring
        # attention, online-softmax merges): their twins bind 2.7's positional layout
        Example(
            example_code("""
            import torch
            from flash_attn.flash_attn_interface import _flash_attn_backward, _flash_attn_forward


            class BlockAttention(torch.autograd.Function):
                @staticmethod
                def forward(ctx, q, k, v, scale):
                    out, lse, _, rng_state = _flash_attn_forward(q, k, v, 0.0, scale, True, -1, -1, 0.0, None, False)
                    ctx.save_for_backward(q, k, v, out, lse, rng_state)
                    ctx.scale = scale
                    return out

                @staticmethod
                def backward(ctx, dout):
                    q, k, v, out, lse, rng_state = ctx.saved_tensors
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                    _flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, 0.0, ctx.scale, True, -1, -1, 0.0,
                                         None, False, rng_state)
                    return dq, dk, dv, None
            """),
            example_code("""
            import porter_runtime
            import torch


            class BlockAttention(torch.autograd.Function):
                @staticmethod
                def forward(ctx, q, k, v, scale):
                    out, lse, _, rng_state = porter_runtime.flash_attn_forward(q, k, v, 0.0, scale, True, -1, -1, 0.0, None, False)
                    ctx.save_for_backward(q, k, v, out, lse, rng_state)
                    ctx.scale = scale
                    return out

                @staticmethod
                def backward(ctx, dout):
                    q, k, v, out, lse, rng_state = ctx.saved_tensors
                    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
                    porter_runtime.flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, 0.0, ctx.scale, True, -1, -1, 0.0,
                                         None, False, rng_state)
                    return dq, dk, dv, None
            """),
        ),
        # keywords only, no window: the 8 values unpacked say flash_attn 2.5/2.6's layout
        Example(
            example_code("""
            from flash_attn.flash_attn_interface import _flash_attn_varlen_forward

            _, _, _, _, out, lse, _, _ = _flash_attn_varlen_forward(
                q=q,
                k=k,
                v=v,
                cu_seqlens_q=cu_seqlens,
                cu_seqlens_k=cu_seqlens,
                max_seqlen_q=max_seqlen,
                max_seqlen_k=max_seqlen,
                softmax_scale=softmax_scale,
                causal=True,
                dropout_p=0.0,
            )
            """),
            example_code("""
            import porter_runtime

            _, _, _, _, out, lse, _, _ = porter_runtime.flash_attn_varlen_forward(
                q=q,
                k=k,
                v=v,
                cu_seqlens_q=cu_seqlens,
                cu_seqlens_k=cu_seqlens,
                max_seqlen_q=max_seqlen,
                max_seqlen_k=max_seqlen,
                softmax_scale=softmax_scale,
                causal=True,
                dropout_p=0.0,
                flash_attn_release="2.6",
            )
            """),
        ),
        # nothing shows which release's result this expects: a finding
        Example("from flash_attn.flash_attn_interface import _flash_attn_forward\n"
                "result = _flash_attn_forward(q, k, v, 0.0, scale, True)\n"),
        Example("import flash_attn\nout = flash_attn.flash_attn_varlen_func("
                "q, k, v, cu_q, cu_k, mq, mk, block_table=table)\n"),
        # positional arguments after `causal` changed meaning between releases
        Example("from flash_attn import flash_attn_func\n"
                "out = flash_attn_func(q, k, v, 0.0, None, True, (-1, -1), 0.0)\n"),
        Example("from flash_attn import flash_attn_func\nout = flash_attn_func(*qkv, **opts)\n"),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._chains = None
        self._unpacked: set[cst.Call] = set()
        self._uses: Optional[dict[cst.Call, tuple]] = None  # how calls' results are used

    def visit_Assign(self, node: cst.Assign) -> None:
        self._unpacked.update(unpacked_call(node))
        self.not_values(node)

    def visit_Subscript(self, node: cst.Subscript) -> None:
        self._unpacked.update(unpacked_call(node))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self._chains is None:
            self._chains = module_chains(self.ctx.module, ROOTS)
        options = chain_alternatives(self, original.func, self._chains)
        if not options:
            return updated
        if options == [V1_CLASS]:
            new = updated.with_changes(func=self.runtime("FlashAttention"))
            return self.rewrite(original, new, "flash-attn 1.x's `FlashAttention` module is now the runtime's "
                                "(1.x's own class on CUDA where it imports, its semantics on SDPA elsewhere)")
        if options[0] == FA3 and all(TARGETS.get(o) == "flash_attn_func" for o in options[1:]):
            return self._fa3(original, updated)
        functions = {TARGETS.get(o) or PRIVATE_TARGETS.get(o) for o in options}
        if len(functions) != 1 or None in functions:
            return updated  # two different imports bind the name: the file has its own fallback
        function = functions.pop()
        if function in PRIVATE:
            return self._private(original, updated, function)
        return self._fa2(original, updated, function)

    def _private(self, original: cst.Call, updated: cst.Call, function: str) -> cst.BaseExpression:
        if self._uses is None:
            self._uses = result_uses(self.ctx.module)
        problem, release = private_problem(original, function, self._uses.get(original))
        if problem is not None:
            self.flag(original, problem[0], suggestion=problem[1])
            return updated
        new = updated.with_changes(func=self.runtime(PRIVATE[function]))
        if release is not None:
            new = with_arg(new, cst.Arg(cst.SimpleString(f'"{release}"'), keyword=cst.Name("flash_attn_release"),
                                        equal=EQ))
        told = f" (flash_attn {release}'s layout, as its result's use shows)" if release else ""
        return self.rewrite(original, new, f"`{function}` (flash_attn's private function) now runs flash_attn's "
                            f"own on CUDA and the same computation in PyTorch elsewhere{told}")

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        flags, ported = self._scan()
        body = without_stops(self, original.body, updated.body, flags, ported, "flash_attn")
        updated = flags_for_twins(self, original, updated.with_changes(body=body), ROOTS, flags, ported, "flash_attn")
        updated = drop_dead_chains(self, original, updated, ROOTS, _CHAIN_ADVICE)
        return mark_probe_imports(original, updated, ROOTS)

    def _fa3(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        problem = fa3_problem(original, original in self._unpacked)
        if problem is not None:
            self.flag(original, problem[0], suggestion=problem[1])
            return updated
        new = updated.with_changes(func=self.runtime("fa3_attention"))
        return self.rewrite(original, new, "FlashAttention-3's `flash_attn_func` now runs FA3, then "
                            "FA2, where CUDA has them and exact SDPA elsewhere")

    def _fa2(self, original: cst.Call, updated: cst.Call, function: str) -> cst.BaseExpression:
        problem = fa2_problem(original, function)
        if problem is not None:
            self.flag(original, problem[0], suggestion=problem[1])
            return updated
        new = updated.with_changes(func=self.runtime(FUNCTIONS[function][0]))
        return self.rewrite(original, new, f"`{function}` now runs flash-attn where it can and "
                            "exact SDPA elsewhere")

    def _scan(self) -> tuple[set[str], bool]:
        """(the module's availability flags, whether every flash_attn use gets ported)."""
        if not hasattr(self, "_scanned"):
            self._scanned = stop_evidence(self, ROOTS, PortedUses(self))
        return self._scanned

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        flags, ported = self._scan()
        body = without_stops(self, original.body, updated.body, flags, ported, "flash_attn")
        return updated if body is updated.body else updated.with_changes(body=body)
