"""A CUDA-only import's ``None`` fallback that the code calls anyway (PT911)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.cuda_packages import IMPORT_ROOTS, COMPILED, is_cuda_only_module
from porter.rulebase.evidence import InFile, TriesImport
from porter.rulebase.matching import dotted_name
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import callee_name
from porter.rulebase.walk import nodes_of

#: Names porter_runtime has a PyTorch twin of, by the module they are imported from.
_TWINS = {
    "apex.optimizers": {"FusedAdam": "FusedAdam", "FusedLAMB": "FusedLAMB"},
    "apex.normalization": {"FusedLayerNorm": "FusedLayerNorm", "FusedRMSNorm": "FusedRMSNorm"},
    "adam_atan2": {"AdamATan2": "AdamATan2"},
}
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
_TRIES_A_PACKAGE = InFile(TriesImport(*sorted(IMPORT_ROOTS | set(COMPILED))))
#: A module-level `except ...:` (at column 0) whose own lines (indented, blank or comments)
#: reach a `NAME = None`, on its line or below: what the rule needs, in the bytes.
_NONE_FALLBACK = re.compile(
    rb"(?m)^except\b[^\n]*:(?:[ \t]*[A-Za-z_][\w, \t]*=[ \t]*None\b"
    rb"|[^\n]*\n(?:(?:[ \t][^\n]*|#[^\n]*|)\n)*?[ \t]+[A-Za-z_][\w, \t]*=[ \t]*None\b)")


@dataclass(frozen=True)
class _Fallback:
    module: str
    line_node: cst.CSTNode  # the `NAME = None` statement


class ImportFallbackCalled(Rule):
    """A name a `try` imports from a CUDA-only package, set to `None` by its `except ImportError:`, and then called with no check is reported.

    What:
    Reports each call `FusedAdam(...)` (or `rotary_emb.apply(...)`) where the name comes from
    `try: from apex.optimizers import FusedAdam` / `except ImportError: FusedAdam = None`
    and no enclosing `if` (or conditional expression, or `and`) and no `assert` in the
    function tests the name. A call of a name chosen by a conditional expression
    (`(nn.LayerNorm if not rms_norm else RMSNorm)(dim)`) or wrapped by `partial(...)` counts
    as a call of it, unless that expression's own test names it. `a, b = None, None` sets
    each name. `a, b = None` (or `a, b = None, None, None`) is reported where it stands: it
    raises in the handler itself.
    A module of the repository counts as CUDA-only where porter leaves its Triton import as
    it is because every importer catches its failure (Vim's vendored
    `mamba_ssm.ops.triton.layernorm`): off CUDA that import fails, and the name is None.

    Why:
    The package never installs off CUDA, so the name is always `None` there, and the
    call raises `TypeError: 'NoneType' object is not callable`: the fallback looks
    optional but is not.

    Fix safety:
    Review. Where porter_runtime has a PyTorch twin of the name (apex's `FusedAdam`,
    `FusedLAMB`, `FusedLayerNorm`, `FusedRMSNorm`, `AdamATan2`), the suggestion is to
    fall back to it (it runs the package's own class wherever the package imports);
    otherwise, to test the name and use a PyTorch path. `a, b = None` is not rewritten to
    `a, b = None, None`: on a CUDA machine without the package that would turn an error
    into the fallback, a change of behaviour on CUDA.

    Known limits:
    Only a `try` of the module's own body is looked at, only calls in its module are seen, and only
    by the name the `try` binds. A module of the repository is seen only where the file
    also tries an import of a CUDA-only package (the pre-filter's evidence).
    """

    code = "PT911"
    name = "import-fallback-called"
    safety = Safety.REVIEW
    needs = Needs(evidence=_TRIES_A_PACKAGE, unit=_TRIES_A_PACKAGE, byte_patterns=(_NONE_FALLBACK,))

    valid = [
        dedent("""\
            import torch

            try:
                from apex.optimizers import FusedAdam
            except ImportError:
                FusedAdam = None


            def make_optimizer(model, lr):
                if FusedAdam is not None:
                    return FusedAdam(model.parameters(), lr=lr)
                return torch.optim.AdamW(model.parameters(), lr=lr)
            """),
        dedent("""\
            try:
                from xformers.ops import SwiGLU
            except ImportError:
                SwiGLU = None

            act = SwiGLU(8, 8) if SwiGLU is not None else None
            """),
        dedent("""\
            try:
                from mylib import FusedAdam
            except ImportError:
                FusedAdam = None

            opt = FusedAdam(params)
            """),
        dedent("""\
            from functools import partial

            import torch.nn as nn

            try:
                from apex.normalization import FusedRMSNorm, FusedLayerNorm
            except ImportError:
                FusedRMSNorm, FusedLayerNorm = None, None

            norm_cls = partial(FusedRMSNorm if FusedRMSNorm is not None else nn.LayerNorm, eps=1e-5)
            """),
    ]
    invalid = [
        Example(  # the fallback looks optional, but the trainer calls it anyway
            dedent("""\
                import torch

                try:
                    from apex.optimizers import FusedAdam
                except ImportError:
                    FusedAdam = None


                def make_optimizer(model, args):
                    return FusedAdam(model.parameters(), lr=args.lr, weight_decay=args.wd)
                """),
            line=10, message="`FusedAdam` is None off CUDA",
        ),
        Example(
            dedent("""\
                try:
                    from flash_attn.ops.fused_dense import FusedDense
                except ImportError:
                    FusedDense = None


                class MLP:
                    def __init__(self, width):
                        self.fc1 = FusedDense(width, 4 * width)
                """),
            line=9, message="TypeError",
        ),
        Example(  # Vim's vendored mamba: one None for two names raises in the handler itself
            dedent("""\
                try:
                    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
                except ImportError:
                    causal_conv1d_fn, causal_conv1d_update = None
                """),
            line=4, message="cannot unpack None",
        ),
        Example(  # one None too many: Vim's mamba_simple.py
            dedent("""\
                try:
                    from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
                except ImportError:
                    causal_conv1d_fn, causal_conv1d_update = None, None, None
                """),
            line=4, message="raises ValueError",
        ),
        Example(  # the norm class is chosen by a flag, not by a test of the name
            dedent("""\
                from functools import partial

                import torch.nn as nn

                try:
                    from apex.normalization import FusedRMSNorm as RMSNorm
                except ImportError:
                    RMSNorm = None


                def create_block(d_model, rms_norm=True, norm_epsilon=1e-5):
                    norm_cls = partial(nn.LayerNorm if not rms_norm else RMSNorm, eps=norm_epsilon)
                    return norm_cls(d_model)
                """),
            line=12, message="`partial` makes raises TypeError",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._fallbacks: dict[str, _Fallback] = {}
        self._tests: list[cst.CSTNode] = []  # the tests of the enclosing ifs, ternaries and `and`s
        self._functions: list[cst.CSTNode] = []

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._functions.append(node)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.BaseStatement:
        self._functions.pop()
        return updated

    def visit_Try(self, node: cst.Try) -> None:
        if self._functions or not any(node is statement for statement in self.ctx.module.body):
            return  # a `try` of the module's own body only (the evidence the pre-filter checks: TriesImport)
        imported = _imported(node.body)
        for handler in node.handlers:
            if not _catches_import_error(handler) or _raises(handler):
                continue  # a handler that raises (`if torch.cuda.is_available(): raise`, porter's own) decides itself
            for statement in _simple_lines(handler.body):
                for small in statement.body:
                    if isinstance(small, cst.Assign):
                        self._bind_none(small, statement, imported)

    def _bind_none(self, assign: cst.Assign, statement: cst.SimpleStatementLine, imported: dict[str, str]) -> None:
        """Record the names an ``except ImportError:`` line sets to None (``a = None``,
        ``a, b = None, None``); report ``a, b = None``, which raises in the handler itself."""
        for target in assign.targets:
            if isinstance(target.target, cst.Name) and _is_none(assign.value):
                pairs = [(target.target.value, assign.value)]
            elif isinstance(target.target, (cst.Tuple, cst.List)):
                names = [e.value.value if isinstance(e.value, cst.Name) else "" for e in target.target.elements]
                if _is_none(assign.value):
                    missing = [n for n in names if self._unavailable(imported.get(n))]
                    if missing:
                        module = imported[missing[0]]
                        self.flag(statement, f"`{', '.join(names)} = None` raises TypeError (cannot unpack "
                                  f"None) in this `except ImportError:` itself, so the fallback never runs: "
                                  f"`{module}` does not import off CUDA, so this line always runs there",
                                  suggestion=f"set each name: `{', '.join(names)} = {', '.join(['None'] * len(names))}`")
                    continue
                values = assign.value.elements if isinstance(assign.value, (cst.Tuple, cst.List)) else ()
                if not values or not all(isinstance(v, cst.Element) and _is_none(v.value) for v in values):
                    continue
                if len(values) != len(names):
                    missing = [n for n in names if self._unavailable(imported.get(n))]
                    if missing:
                        self.flag(statement, f"{len(names)} names get {len(values)} values: this line raises "
                                  f"ValueError in the `except ImportError:` itself, so the fallback never runs: "
                                  f"`{imported[missing[0]]}` does not import off CUDA, so this line always runs there",
                                  suggestion=f"one None per name: `{', '.join(names)} = "
                                             f"{', '.join(['None'] * len(names))}`")
                    continue
                pairs = [(n, v.value) for n, v in zip(names, values)]
            else:
                continue
            for name, _ in pairs:
                if name in imported and self._unavailable(imported[name]):
                    self._fallbacks[name] = _Fallback(imported[name], statement)

    def _unavailable(self, module: Optional[str]) -> bool:
        """Whether importing ``module`` fails off CUDA: a CUDA-only package; where the tree
        holds that package itself, only a module of it whose Triton import nothing guards
        and porter leaves as is (every importer catches its failure: porter.project.import_fallbacks)."""
        if not module:
            return False
        project = self.ctx.project
        if project is not None and project.provides(module):
            return project.caught_module(module)
        return is_cuda_only_module(module)

    def visit_If(self, node: cst.If) -> None:
        self._tests.append(node.test)

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.BaseStatement:
        self._tests.pop()
        return updated

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._tests.append(node.test)

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        self._tests.pop()
        return updated

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        self._tests.append(node.left)

    def leave_BooleanOperation(self, original, updated) -> cst.BaseExpression:
        self._tests.pop()
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._functions.append(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.BaseStatement:
        self._functions.pop()
        return updated

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        for base, error, own_tests in _called(original):
            name = base.value
            if name not in self._fallbacks:
                continue
            if any(_mentions(test, name) for test in [*self._tests, *own_tests]) or self._asserted(name):
                continue
            fallback = self._fallbacks[name]
            line = self.ctx.positions()[fallback.line_node].start.line
            reduced = getattr(self.ctx, "reduced", None)  # a module with stubs (porter.engine.stages.segments)
            line = reduced.original_line(line) if reduced is not None else line
            twin = _twin(fallback.module, name)
            self.flag(original, f"`{name}` is None off CUDA: `{fallback.module}` does not import there, so its "
                                f"`except ImportError:` sets it to None (line {line}), and {error}",
                      suggestion=f"fall back to `porter_runtime.{twin}` (the same class in PyTorch) instead of None"
                      if twin else f"test `{name} is not None` here and give it a PyTorch path")
            break  # one finding per call
        return updated

    def _asserted(self, name: str) -> bool:
        """An ``assert`` in the enclosing function (or the module) tests the name."""
        functions = [f for f in self._functions if isinstance(f, cst.FunctionDef)]
        scope = functions[-1] if functions else self.ctx.module
        return any(_mentions(node.test, name) for node in nodes_of(scope, cst.Assert))


def _called(call: cst.Call) -> list[tuple[cst.Name, str, list[cst.BaseExpression]]]:
    """The names a call ends up calling, each with what calling None raises there and the
    tests of the conditional expressions it was chosen by: ``f(...)``, ``mod.fn(...)``,
    ``(A if c else B)(...)``, and the callable ``functools.partial(f, ...)`` wraps (it
    raises when the partial is called)."""
    func = call.func
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and callee_name(func) != "partial":
        return [(func.value, "this call raises AttributeError", [])]
    if callee_name(func) == "partial" and call.args and call.args[0].keyword is None and not call.args[0].star:
        return _chosen(call.args[0].value, "the callable this `partial` makes raises TypeError when called")
    return _chosen(func, "this call raises TypeError")


def _chosen(node: cst.BaseExpression, error: str, tests: tuple = ()) -> list[tuple[cst.Name, str, list]]:
    if isinstance(node, cst.Name):
        return [(node, error, list(tests))]
    if isinstance(node, cst.IfExp):
        return [*_chosen(node.body, error, (*tests, node.test)), *_chosen(node.orelse, error, (*tests, node.test))]
    return []


def _imported(body: cst.BaseSuite) -> dict[str, str]:
    """name -> the module a ``try`` body imports it from."""
    found: dict[str, str] = {}
    for statement in _simple_lines(body):
        for small in statement.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    module = dotted_name(alias.name)
                    bound = alias.asname.name if alias.asname else alias.name
                    if module and isinstance(bound, cst.Name):  # `import a.b` binds `a`: only plain names
                        found[bound.value] = module
            if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
                module = dotted_name(small.module)
                if module and not isinstance(small.names, cst.ImportStar):
                    for alias in small.names:
                        bound = alias.asname.name if alias.asname else alias.name
                        if isinstance(bound, cst.Name):
                            found[bound.value] = module
    return found


def _simple_lines(body: cst.BaseSuite) -> list[cst.SimpleStatementLine]:
    """The one-line statements of a block (``try: import x`` on one line: none)."""
    return [s for s in getattr(body, "body", ()) if isinstance(s, cst.SimpleStatementLine)]


def _catches_import_error(handler: cst.ExceptHandler) -> bool:
    kind = handler.type
    if kind is None:
        return True
    names = [e.value for e in kind.elements] if isinstance(kind, cst.Tuple) else [kind]
    return any(isinstance(n, cst.Name) and n.value in _IMPORT_ERRORS for n in names)


def _raises(handler: cst.ExceptHandler) -> bool:
    return next(nodes_of(handler.body, cst.Raise), None) is not None


def _is_none(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "None"


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return any(n.value == name for n in nodes_of(node, cst.Name))  # type: ignore[attr-defined]


def _twin(module: str, name: str) -> Optional[str]:
    return _TWINS.get(module, {}).get(name)
