"""FlexAttention's calls go through porter_runtime.flex_attention_call, which gives them a
backward off CUDA."""

from __future__ import annotations

from typing import Optional

import libcst as cst

from porter.rulebase.matching import Ambiguous, dotted_name
from porter.rulebase.rule import Example, Needs, Rule, Safety

_TARGET = "torch.nn.attention.flex_attention.flex_attention"
_COMPILERS = frozenset({"torch.compile", "porter_runtime.compile"})


def _compiled_names(module: cst.Module, qualname) -> set[str]:
    """Module-level names bound to a compiled FlexAttention: ``flex_attention =
    torch.compile(flex_attention)`` (also under an ``if``), ``compiled_flex =
    torch.compile(flex_attention, dynamic=False)``."""
    names: set[str] = set()
    imported: set[str] = set()  # the names ``from torch.nn.attention.flex_attention import flex_attention`` binds

    class Finder(cst.CSTVisitor):
        def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
            if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
                return
            if dotted_name(node.module) == _TARGET.rpartition(".")[0]:
                imported.update((a.asname.name.value if a.asname and isinstance(a.asname.name, cst.Name)
                                 else a.name.value) for a in node.names
                                if isinstance(a.name, cst.Name) and a.name.value == "flex_attention")

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_Assign(self, node: cst.Assign) -> None:
            value = node.value
            if not (isinstance(value, cst.Call) and value.args and qualname(value.func) in _COMPILERS):
                return
            inner = value.args[0].value
            if qualname(inner) == _TARGET or (isinstance(inner, cst.Name) and inner.value in names | imported):
                names.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))

    module.visit(Finder())
    return names


class FlexAttentionBackward(Rule):
    """FlexAttention calls become `porter_runtime.flex_attention_call(fn, ...)`.

    What:
    Rewrites each call of `flex_attention` (from `torch.nn.attention.flex_attention`,
    or a module-level name the code bound to its `torch.compile`) into
    `porter_runtime.flex_attention_call(flex_attention, q, k, v, ...)`: the function the
    code calls is the first argument, the arguments follow unchanged.

    Why:
    FlexAttention's forward runs everywhere, but its eager kernel has no backward on
    the CPU or MPS: training fails with `NotImplementedError: FlexAttention does not
    support backward on CPU` where inference passes (torchtitan, attention-gym and
    native-sparse-attention, three blind rounds).

    Fix safety:
    Safe. On CUDA, and wherever no input needs a gradient, the runtime calls the same
    function (torch's, or the code's compiled one) with the same arguments. Elsewhere,
    with a gradient needed, it computes the same attention with torch's own reference
    implementation of FlexAttention (score_mod, block mask, scale and grouped-query
    heads applied), which autograd differentiates; memory there is quadratic in the
    sequence length. Calls that ask for the log-sum-exp go to torch unchanged.

    Known limits:
    A compiled FlexAttention bound inside a function or on an object
    (`self.attn = torch.compile(flex_attention)`) is not followed: its calls stay as
    they are.
    """

    code = "TP206"
    name = "flex-attention-backward"
    safety = Safety.SAFE
    needs = Needs(targets={_TARGET}, words={"flex_attention"}, whole_file=True)

    valid = [
        "from torch.nn.attention.flex_attention import create_block_mask\n"
        "mask = create_block_mask(causal, 1, 1, 128, 128)\n",
        "def flex_attention(q, k, v):\n    return q\nout = flex_attention(q, k, v)\n",
    ]
    invalid = [
        Example(
            "import torch\nfrom torch.nn.attention.flex_attention import flex_attention, create_block_mask\n\n\n"
            "class Attention(torch.nn.Module):\n"
            "    def forward(self, q, k, v, block_mask):\n"
            "        return flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)\n",
            "import porter_runtime\nimport torch\nfrom torch.nn.attention.flex_attention import flex_attention, "
            "create_block_mask\n\n\n"
            "class Attention(torch.nn.Module):\n"
            "    def forward(self, q, k, v, block_mask):\n"
            "        return porter_runtime.flex_attention_call(flex_attention, q, k, v, block_mask=block_mask, "
            "enable_gqa=True)\n",
        ),
        Example(
            "import torch\nfrom torch.nn.attention.flex_attention import flex_attention\n\n"
            "flex_attention = torch.compile(flex_attention)\n\n\n"
            "def attend(q, k, v, mask):\n    return flex_attention(q, k, v, block_mask=mask)\n",
            "import porter_runtime\nimport torch\nfrom torch.nn.attention.flex_attention import flex_attention\n\n"
            "flex_attention = torch.compile(flex_attention)\n\n\n"
            "def attend(q, k, v, mask):\n"
            "    return porter_runtime.flex_attention_call(flex_attention, q, k, v, block_mask=mask)\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._compiled = _compiled_names(ctx.module, self._name_of)

    def _name_of(self, node: cst.BaseExpression) -> Optional[str]:
        name = self.qualname(node)
        return None if name is None or isinstance(name, Ambiguous) else name

    def _is_flex(self, func: cst.BaseExpression) -> bool:
        if isinstance(func, cst.Name) and func.value in self._compiled:
            return True
        return self._name_of(func) == _TARGET

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not self._is_flex(original.func) or len(original.args) < 3 or any(a.star for a in original.args[:3]) \
                or any(a.keyword is not None for a in original.args[:3]):
            return updated
        new = updated.with_changes(func=self.runtime("flex_attention_call"),
                                   args=[cst.Arg(updated.func), *updated.args])
        return self.rewrite(original, new, "FlexAttention has no backward off CUDA: the call runs as before on "
                            "CUDA and through torch's differentiable reference where a gradient is needed elsewhere")
