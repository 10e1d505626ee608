"""xformers: memory_efficient_attention and its bias types become the runtime's twins."""

from __future__ import annotations

from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.families.type_checks import TypeCheckUses
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.thirdparty.twin_flags import flags_for_twins, mark_probe_imports
from porter.rulebase.families.thirdparty.xformers_names import (
    ATTENTION,
    BIAS_NAMES,
    BIASES,
    CONSTRUCTORS,
    HELPER_NAMES,
    KEYWORDS,
    bias_callee,
    helper_call,
    resolved,
)
from porter.rulebase.families.thirdparty.uses import (
    GuardTracker,
    UseFinder,
    arguments_fit,
    drop_dead_chains,
    example_code,
    package_units,
    stop_evidence,
    without_stops,
)

_CHAIN_ADVICE = ("give `except ImportError:` a fallback (a flag and a PyTorch path), or call "
                 "porter_runtime.memory_efficient_attention")


class _Uses(UseFinder, cst.CSTVisitor):
    """Whether every use of an xformers name in a module is one TP201/TP202 rewrite."""

    prefixes = ("xformers",)

    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.qualname = rule.qualname
        self.rule = rule
        self.all_ported = True

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        ported = call is not None and (
            (name in ATTENTION and arguments_fit(call, 6, KEYWORDS)) or bias_callee(self.rule, call)
            or helper_call(self.rule, call))
        self.all_ported = self.all_ported and bool(ported)


class XformersAttention(Rule):
    """`xformers.ops.memory_efficient_attention` becomes `porter_runtime.memory_efficient_attention`.

    What:
    Rewrites calls of `memory_efficient_attention` (from `xformers.ops` or
    `xformers.ops.fmha`, however imported) into
    `porter_runtime.memory_efficient_attention(...)` with the same arguments.

    Why:
    xformers' kernels need CUDA; on a Mac `import xformers.ops` fails or its
    operators raise "No operator found for `memory_efficient_attention_forward`".

    Fix safety:
    Safe. On CUDA with xformers importable the twin calls xformers' own function with
    the caller's arguments. Elsewhere it computes xformers' documented result,
    softmax(q·kᵀ·scale + bias)·v in layout BMHK (3-D and 5-D BMGHK inputs too):
    `LowerTriangularMask` causal top-left, `LowerTriangularFromBottomRightMask`
    bottom-right, `BlockDiagonal*Mask` one attention per packed sequence, tensors
    and other bias objects added to the scores.

    A `try` whose every branch imports xformers or re-raises ("xFormers is
    required") is no guard: once every use in the file is ported it goes like a plain
    import, otherwise it is reported. Where the module keeps its own availability flag
    (`XFORMERS_AVAILABLE = False` in `except ImportError:`) and stops on it (`if not
    XFORMERS_AVAILABLE: raise ...`, `assert XFORMERS_AVAILABLE`) before the ported
    path, that stop is removed once every xformers use in the file is ported, and
    reported otherwise; the `try` that sets the flag goes too once nothing in the
    tree reads its names (porter.edits.probes). A flag that a branch still stops on
    further in (`if not XFORMERS_AVAILABLE: if attn_bias is not None: raise ...`) is set
    to `porter_runtime.twins_stand_in("xformers")` in its `except ImportError:` instead,
    once every xformers use in the file is ported: False on CUDA, as before, and True
    elsewhere, where the twins run. The imports of such a `try` stay (they are the
    flag's test) and are marked `# noqa: F401` once the port took their last use. Uses
    inside the body of a `try` whose handler
    falls back to PyTorch are guarded, and not reported (TP203).

    Known limits:
    `op=` (the choice of xformers kernel) has no meaning off CUDA and is ignored
    there. Calls with `*args`/`**kwargs` or unknown keywords are reported. On CUDA
    without xformers installed the ported code runs SDPA where the original raised,
    as with any import porter removes.
    """

    code = "TP201"
    name = "xformers-attention"
    safety = Safety.SAFE
    needs = Needs(
        # the chains, flags and stops are decided wherever xformers is used, whichever
        # twin (TP201, TP202, TP204) ports the uses
        targets=frozenset({"xformers"}),
        unit=package_units(["xformers"]),
    )

    valid = [
        "def f(xops, q, k, v):\n    return xops.memory_efficient_attention(q, k, v)\n",
        "import mylib as xops\nout = xops.memory_efficient_attention(q, k, v)\n",
        "from mylib import memory_efficient_attention\nout = memory_efficient_attention(q, k, v)\n",
    ]
    invalid = [
        Example(
            "import xformers.ops as xops\n\n"
            "out = xops.memory_efficient_attention(q, k, v, attn_bias=None, p=0.1)\n",
            "import porter_runtime\n\n"
            "out = porter_runtime.memory_efficient_attention(q, k, v, attn_bias=None, p=0.1)\n",
        ),
        Example(
            "from xformers.ops import memory_efficient_attention\n"
            "out = memory_efficient_attention(q, k, v, bias, 0.0, 0.125)\n",
            "import porter_runtime\n"
            "out = porter_runtime.memory_efficient_attention(q, k, v, bias, 0.0, 0.125)\n",
        ),
        Example(
            "import xformers.ops.fmha as fmha\nout = fmha.memory_efficient_attention(q, k, v, op=OP)\n",
            "import porter_runtime\nout = porter_runtime.memory_efficient_attention(q, k, v, op=OP)\n",
        ),
        Example("from xformers.ops import memory_efficient_attention as mea\nout = mea(*qkv)\n"),
        # a "guard" that re-raises is no guard: it goes with the import's last use
        Example(
            example_code("""
            try:
                import xformers.ops as xops
            except ImportError as e:
                raise ImportError("xFormers is required: pip install xformers") from e

            out = xops.memory_efficient_attention(q, k, v, p=0.0)
            """),
            example_code("""
            import porter_runtime
            out = porter_runtime.memory_efficient_attention(q, k, v, p=0.0)
            """),
        ),
        # the module's own flag stops the ported path off CUDA: the stop goes, then
        # the probe, whose names nothing reads any more (porter.edits.probes)
        Example(
            example_code("""
            try:
                from xformers.ops import memory_efficient_attention
                XFORMERS_AVAILABLE = True
            except ImportError:
                XFORMERS_AVAILABLE = False


            def attend(q, k, v):
                if not XFORMERS_AVAILABLE:
                    raise ImportError("xFormers is required for this model")
                return memory_efficient_attention(q, k, v)
            """),
            example_code("""
            import porter_runtime


            def attend(q, k, v):
                return porter_runtime.memory_efficient_attention(q, k, v)
            """),
        ),
        # a use that stays (SwiGLU): the stop is reported (line 7), not removed
        Example("import torch\ntry:\n    import xformers.ops as xops\n    HAS_XFORMERS = True\n"
                "except ImportError:\n    HAS_XFORMERS = False\nassert HAS_XFORMERS, 'install xformers'\n"
                "mlp = xops.SwiGLU(8, 16)\nout = xops.memory_efficient_attention(q, k, v)\n",
                "import porter_runtime\nimport torch\ntry:\n    import xformers.ops as xops\n    HAS_XFORMERS = True\n"
                "except ImportError:\n    HAS_XFORMERS = False\nassert HAS_XFORMERS, 'install xformers'\n"
                "mlp = xops.SwiGLU(8, 16)\nout = porter_runtime.memory_efficient_attention(q, k, v)\n"),
        # a stop further in: the flag is True where the twins run, False on CUDA as before
        Example(
            example_code("""
            try:
                from xformers.ops import memory_efficient_attention
                XFORMERS_AVAILABLE = True
            except ImportError:
                XFORMERS_AVAILABLE = False


            class MemEffAttention(Attention):
                def forward(self, q, k, v, attn_bias=None):
                    if not XFORMERS_AVAILABLE:
                        if attn_bias is not None:
                            raise AssertionError("xFormers is required for using nested tensors")
                        return super().forward(q, k, v)
                    return memory_efficient_attention(q, k, v, attn_bias=attn_bias)
            """),
            example_code("""
            import porter_runtime
            try:
                from xformers.ops import memory_efficient_attention  # noqa: F401
                XFORMERS_AVAILABLE = True
            except ImportError:
                XFORMERS_AVAILABLE = porter_runtime.twins_stand_in("xformers")


            class MemEffAttention(Attention):
                def forward(self, q, k, v, attn_bias=None):
                    if not XFORMERS_AVAILABLE:
                        if attn_bias is not None:
                            raise AssertionError("xFormers is required for using nested tensors")
                        return super().forward(q, k, v)
                    return porter_runtime.memory_efficient_attention(q, k, v, attn_bias=attn_bias)
            """),
        ),
    ]

    def _scan(self) -> tuple[set[str], bool]:
        """(the module's availability flags, whether every xformers use gets ported)."""
        if not hasattr(self, "_scanned"):
            self._scanned = stop_evidence(self, ["xformers"], _Uses(self))
        return self._scanned

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body = self._without_stops(original.body, updated.body)
        return updated if body is updated.body else updated.with_changes(body=body)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        updated = updated.with_changes(body=self._without_stops(original.body, updated.body))
        flags, ported = self._scan()
        updated = flags_for_twins(self, original, updated, ["xformers"], flags, ported, "xformers")
        updated = drop_dead_chains(self, original, updated, ["xformers"], _CHAIN_ADVICE)
        return mark_probe_imports(original, updated, ["xformers"])

    def _without_stops(self, original, updated):
        flags, ported = self._scan()
        return without_stops(self, original, updated, flags, ported, "xformers")

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if resolved(self, original.func) not in ATTENTION:
            return updated
        if not arguments_fit(original, 6, KEYWORDS):
            self.flag(original, "`memory_efficient_attention` with unpacked or unknown arguments "
                      "can't be checked", suggestion="porter_runtime.memory_efficient_attention("
                      "q, k, v, attn_bias=..., p=..., scale=...)")
            return updated
        new = updated.with_changes(func=self.runtime("memory_efficient_attention"))
        return self.rewrite(original, new, "`memory_efficient_attention` now runs xformers where "
                            "it can and exact SDPA elsewhere")


class XformersBias(Rule):
    """xformers' attention bias types become `porter_runtime.xformers_bias.*`.

    What:
    Rewrites the construction of `LowerTriangularMask`,
    `LowerTriangularMaskWithTensorBias`, `LowerTriangularFromBottomRightMask`,
    `BlockDiagonalMask`, `BlockDiagonalCausalMask`,
    `BlockDiagonalCausalFromBottomRightMask` and the padded-keys masks of a KV cache,
    `BlockDiagonalPaddedKeysMask` and `BlockDiagonalCausalWithOffsetPaddedKeysMask`
    (called directly, or through
    `.from_seqlens(...)` / `.from_tensor_list(...)`) into the same call on
    `porter_runtime.xformers_bias`.

    Why:
    The bias classes live in `xformers.ops`, which does not import without CUDA.

    Fix safety:
    Safe. On CUDA with xformers importable, every stand-in constructor returns
    xformers' own object built from the same arguments. Elsewhere it returns a
    stand-in with the same geometry, methods (`materialize`, `make_causal`, `split`)
    and mask, which `porter_runtime.memory_efficient_attention` understands.

    Known limits:
    Only construction is rewritten; other uses of the classes (`isinstance`,
    subclassing) are reported by TP203, since the stand-in is not xformers' class on
    CUDA.
    """

    code = "TP202"
    name = "xformers-bias"
    safety = Safety.SAFE
    needs = Needs(targets=frozenset(BIASES))

    valid = [
        "def f(xops):\n    return xops.LowerTriangularMask()\n",
        "import mylib as xops\nbias = xops.LowerTriangularMask()\n",
        "from mylib import BlockDiagonalMask\nbias = BlockDiagonalMask.from_seqlens([3, 4])\n",
    ]
    invalid = [
        Example(
            "import xformers.ops as xops\nbias = xops.LowerTriangularMask()\n",
            "import porter_runtime\nbias = porter_runtime.xformers_bias.LowerTriangularMask()\n",
        ),
        Example(
            "from xformers.ops.fmha.attn_bias import BlockDiagonalMask\n"
            "bias = BlockDiagonalMask.from_seqlens(seqlens).make_causal()\n",
            "import porter_runtime\n"
            "bias = porter_runtime.xformers_bias.BlockDiagonalMask.from_seqlens(seqlens).make_causal()\n",
        ),
        Example(
            "from xformers.ops import fmha\nbias = fmha.attn_bias.LowerTriangularFromBottomRightMask()\n",
            "import porter_runtime\n"
            "bias = porter_runtime.xformers_bias.LowerTriangularFromBottomRightMask()\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        found = bias_callee(self, original)
        if found is None:
            return updated
        target, name = found
        stand_in = cst.Attribute(self.runtime("xformers_bias"), cst.Name(name))
        if target is original.func:
            new = updated.with_changes(func=stand_in)
        else:
            new = updated.with_changes(func=updated.func.with_changes(value=stand_in))  # type: ignore[attr-defined]
        return self.rewrite(original, new, f"`{name}` is xformers' own on CUDA and a stand-in "
                            "elsewhere")


class XformersUnsupported(GuardTracker, TypeCheckUses, UseFinder, Rule):
    """Other xformers APIs are reported with what to use instead.

    What:
    Reports every use of an `xformers` name that TP201 and TP202 do not rewrite:
    other operators (`memory_efficient_attention_forward`, `SwiGLU`, `unbind`,
    `fmha.cutlass` ...), `xformers.components`, and the bias classes used as values
    (`isinstance(b, LowerTriangularMask)`, subclassing).

    Why:
    xformers does not import without CUDA, and these have no twin that is exact on
    CUDA.

    Fix safety:
    Review only; each finding names the PyTorch replacement.

    A name in an annotation (`bias: Optional[BlockDiagonalMask]`) is a note, and so is a
    module class (`SwiGLU`) only tested against, since a type test runs no
    kernel (porter.rulebase.families.type_checks); what fails is the import, reported on its
    own, and the construction. A bias class tested against stays a finding: off CUDA
    TP202 builds porter's stand-in, which is not xformers' class.

    Known limits:
    One finding per use; the import statement itself is not reported.
    """

    code = "TP203"
    name = "xformers-unsupported"
    safety = Safety.REVIEW
    needs = Needs(targets=frozenset({"xformers"}))
    prefixes = ("xformers",)

    valid = [
        "def f(xformers):\n    return xformers.ops.SwiGLU(4, 8)\n",
        "import mylib as xformers\nxformers.ops.unbind(x)\n",
        "import xformers.ops as xops\nout = xops.memory_efficient_attention(q, k, v, xops.LowerTriangularMask())\n",
    ]
    invalid = [
        Example("import xformers.ops as xops\nmlp = xops.SwiGLU(512, 2048)\n"),
        Example("from xformers.ops import LowerTriangularMask\ncausal = isinstance(bias, LowerTriangularMask)\n"),
        Example("from xformers.ops.fmha import memory_efficient_attention_forward as fwd\nout = fwd(q, k, v)\n"),
        Example(  # the class is built, not only tested against
            dedent("""\
                from xformers.ops import SwiGLU


                class LLaMAMLP(nn.Module):
                    def __init__(self, config):
                        super().__init__()
                        self.swiglu = SwiGLU(config.n_embd, config.intermediate_size, bias=False)
                """),
            line=7,
        ),
        Example(  # only an annotation: a note (mistral-inference, blind round 12)
            dedent("""\
                from typing import Optional

                from xformers.ops.fmha.attn_bias import AttentionBias


                def attention(q, k, v, mask: Optional[AttentionBias] = None):
                    return q
                """),
            line=6, message="only an annotation",
        ),
        Example(  # only a type test's class: a note (the import is the PT999 finding)
            dedent("""\
                import math

                from xformers.ops import SwiGLU


                def init_weights(module, n_embd, n_layer):
                    for name, p in module.named_parameters():
                        if name == "w3.weight" and isinstance(module, SwiGLU):
                            nn.init.normal_(p, mean=0.0, std=1 / math.sqrt(n_embd) / n_layer)
                """),
            line=8, message="only a type test's class",
        ),
    ]

    def visit_Annotation(self, node: cst.Annotation) -> None:
        self._in_annotation = getattr(self, "_in_annotation", 0) + 1

    def leave_Annotation(self, original: cst.Annotation, updated: cst.Annotation) -> cst.Annotation:
        self._in_annotation -= 1
        return updated

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        if self.guarded():
            return  # the try's body runs only where the import worked; its handler falls back
        if call is None and getattr(self, "_in_annotation", 0):
            self.note(node, f"`{name}` needs xformers (for information: only an annotation here, which runs no "
                      "kernel; the import is reported on its own)", suggestion=_advice(name))
            return
        if call is not None and (name in ATTENTION or bias_callee(self, call) is not None
                                 or name in HELPER_NAMES):
            return  # TP201 / TP202 / TP204
        if name in BIASES and self._is_constructor_base(node):
            return
        if call is None and name not in BIASES:
            self.defer_reference(node, name)  # a class only tested against is a note
            return
        self._report(node, name, call, False)

    def on_reference(self, node: cst.BaseExpression, name: str, type_test_only: bool) -> None:
        self._report(node, name, None, type_test_only)

    def _report(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call], type_test_only: bool) -> None:
        if type_test_only:
            self.note(node, f"`{name}` needs xformers (for information: only a type test's class here, which "
                      "runs no kernel; the import is reported on its own)", suggestion=_advice(name))
            return
        self.flag(call or node, f"`{name}` needs xformers, which does not import without CUDA",
                  suggestion=_advice(name))

    def _is_constructor_base(self, node: cst.BaseExpression) -> bool:
        return any(isinstance(c.func, cst.Attribute) and c.func.value is node
                   and c.func.attr.value in CONSTRUCTORS for c in self._callees.values())


def _advice(name: str) -> str:
    last = name.rsplit(".", 1)[-1]
    if last in BIAS_NAMES:
        return ("compare with porter_runtime.xformers_bias." + last +
                " off CUDA, or test the attribute you need instead of the class")
    if last == "SwiGLU":
        return "an nn.Module computing w3(F.silu(w1(x)) * w2(x)) with nn.Linear layers"
    if last.startswith("memory_efficient_attention"):
        return "porter_runtime.memory_efficient_attention(q, k, v, attn_bias=..., p=..., scale=...)"
    return "guard the import (try/except ImportError) and give the code a PyTorch path off CUDA"
