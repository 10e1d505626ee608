"""adam-atan2: the CUDA package's `AdamATan2` becomes `porter_runtime.AdamATan2`."""

from __future__ import annotations

import libcst as cst

from porter.rulebase.matching import Ambiguous, dotted_name
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.families.thirdparty.uses import arguments_fit

_TARGETS = frozenset({"adam_atan2.AdamATan2", "adam_atan2.adam_atan2.AdamATan2"})
_KEYWORDS = frozenset({"params", "lr", "betas", "weight_decay"})


def _imports_other_names(module: cst.Module) -> bool:
    """Whether the file imports from ``adam_atan2`` a name the package does not export
    (``from adam_atan2 import AdamATan2, cosine_schedule``): then ``adam_atan2`` is the
    repository's own module, which runs everywhere already."""
    for stmt in module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if not isinstance(small, cst.ImportFrom) or small.relative or small.module is None:
                continue
            if dotted_name(small.module) not in ("adam_atan2", "adam_atan2.adam_atan2"):
                continue
            if isinstance(small.names, cst.ImportStar):
                return True
            if any(dotted_name(a.name) != "AdamATan2" for a in small.names):
                return True
    return False


class AdamAtan2Optimizer(Rule):
    """`adam_atan2.AdamATan2` becomes `porter_runtime.AdamATan2` with the same arguments.

    What:
    Rewrites the construction of `AdamATan2` from the `adam-atan2` package (HRM's
    fused CUDA optimizer: `from adam_atan2 import AdamATan2`) into
    `porter_runtime.AdamATan2(...)`.

    Why:
    `pip install adam-atan2` builds a CUDA extension and fails on a Mac; without it
    `import adam_atan2` raises `ModuleNotFoundError: No module named
    'adam_atan2_backend'`.

    Fix safety:
    Safe. On CUDA with the package importable the twin constructs the package's own
    optimizer from the same arguments. Elsewhere it is a pure-PyTorch optimizer with
    the package's defaults (lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-2), state
    layout and update (the package's kernel, csrc/adam_atan2.cu): decoupled weight
    decay, then `p -= lr * atan2(m̂, sqrt(v̂))` (Everett et al. 2024, a = b = 1),
    tested step for step against that rule. A pure-PyTorch module named `adam_atan2`
    (a vendored copy) is used everywhere, as the original import would.

    Known limits:
    A file that imports other names from `adam_atan2` (`cosine_schedule`, ...) uses
    the repository's own module and is left alone. Other uses of the class
    (subclassing, `isinstance`) are reported. lucidrains' `adam_atan2_pytorch` is pure
    PyTorch and needs nothing.
    """

    code = "TP401"
    name = "adam-atan2"
    safety = Safety.SAFE
    needs = Needs(
        whole_file=True,  # what else the module's imports bind
        targets=_TARGETS,
    )

    valid = [
        "def build(AdamATan2, params):\n    return AdamATan2(params, lr=1e-4)\n",
        "import mylib as adam_atan2\nopt = adam_atan2.AdamATan2(params)\n",
        # the repository's own module: it runs everywhere already
        "from adam_atan2 import AdamATan2, cosine_schedule_with_warmup\nopt = AdamATan2(params, lr=1e-4)\n",
        "from adam_atan2_pytorch import AdamAtan2\nopt = AdamAtan2(params, lr=1e-4)\n",
    ]
    invalid = [
        Example(
            "from adam_atan2 import AdamATan2\n\n"
            "optimizer = AdamATan2(model.parameters(), lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95))\n",
            "import porter_runtime\n\n"
            "optimizer = porter_runtime.AdamATan2(model.parameters(), lr=1e-4, weight_decay=0.1, "
            "betas=(0.9, 0.95))\n",
        ),
        Example(
            "import adam_atan2 as aa\nopt = aa.AdamATan2(params, 3e-4)\n",
            "import porter_runtime\nopt = porter_runtime.AdamATan2(params, 3e-4)\n",
        ),
        Example(
            "from adam_atan2 import AdamATan2 as Opt\nOPTIMIZERS = {'adam_atan2': Opt}\n",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._local = _imports_other_names(ctx.module)
        self._callees: set[int] = set()

    def visit_Call(self, node: cst.Call) -> None:
        self._callees.add(id(node.func))

    def visit_Name(self, node: cst.Name) -> None:
        self._report_value_use(node)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._report_value_use(node)

    def _report_value_use(self, node: cst.BaseExpression) -> None:
        if self._local or id(node) in self._callees or self._matched(node) is None:
            return
        self.flag(node, "`AdamATan2` used as a value: only its construction can be rewritten",
                  suggestion="use porter_runtime.AdamATan2 (same signature) in its place")

    def _matched(self, node: cst.BaseExpression):
        name = self.qualname(node)
        return None if name is None or isinstance(name, Ambiguous) or name not in _TARGETS else name

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if self._local or self._matched(original.func) is None:
            return updated
        if not arguments_fit(original, 4, _KEYWORDS):
            self.flag(original, "`AdamATan2` with unpacked or unknown arguments can't be checked",
                      suggestion="porter_runtime.AdamATan2(params, lr=..., betas=..., weight_decay=...)")
            return updated
        new = updated.with_changes(func=self.runtime("AdamATan2"))
        return self.rewrite(original, new, "`AdamATan2` is the CUDA package on CUDA and the same "
                            "update in PyTorch elsewhere")
