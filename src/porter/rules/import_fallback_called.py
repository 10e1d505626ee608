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
    rb"(?m)^except\b[^\n]*:(?:[ \t]*[A-Za-z_]\w*[ \t]*=[ \t]*None\b"
    rb"|[^\n]*\n(?:(?:[ \t][^\n]*|#[^\n]*|)\n)*?[ \t]+[A-Za-z_]\w*[ \t]*=[ \t]*None\b)")


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
    function tests the name.

    Why:
    The package never installs off CUDA, so the name is always `None` there, and the
    call raises `TypeError: 'NoneType' object is not callable`: the fallback looks
    optional but is not.

    Fix safety:
    Review. Where porter_runtime has a PyTorch twin of the name (apex's `FusedAdam`,
    `FusedLAMB`, `FusedLayerNorm`, `FusedRMSNorm`, `AdamATan2`), the suggestion is to
    fall back to it (it runs the package's own class wherever the package imports);
    otherwise, to test the name and use a PyTorch path.

    Known limits:
    Only a `try` of the module's own body is looked at, only calls in its module are seen, and only
    by the name the `try` binds.
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
                    if isinstance(small, cst.Assign) and _is_none(small.value):
                        for target in small.targets:
                            name = target.target.value if isinstance(target.target, cst.Name) else None
                            if name in imported and is_cuda_only_module(imported[name]):
                                self._fallbacks[name] = _Fallback(imported[name], statement)

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
        func = original.func
        base = func.value if isinstance(func, cst.Attribute) else func  # `rotary_emb.apply(...)` too
        if not isinstance(base, cst.Name) or base.value not in self._fallbacks:
            return updated
        name = base.value
        error = "AttributeError" if base is not func else "TypeError"
        if any(_mentions(test, name) for test in self._tests) or self._asserted(name):
            return updated
        fallback = self._fallbacks[name]
        line = self.ctx.positions()[fallback.line_node].start.line
        reduced = getattr(self.ctx, "reduced", None)  # a module with stubs (porter.engine.stages.segments)
        line = reduced.original_line(line) if reduced is not None else line
        twin = _twin(fallback.module, name)
        where = f" (line {line})"
        self.flag(original, f"`{name}` is None off CUDA: `{fallback.module}` never installs there, so its "
                            f"`except ImportError:` sets it to None{where}, and this call raises {error}",
                  suggestion=f"fall back to `porter_runtime.{twin}` (the same class in PyTorch) instead of None"
                  if twin else f"test `{name} is not None` here and give it a PyTorch path")
        return updated

    def _asserted(self, name: str) -> bool:
        """An ``assert`` in the enclosing function (or the module) tests the name."""
        functions = [f for f in self._functions if isinstance(f, cst.FunctionDef)]
        scope = functions[-1] if functions else self.ctx.module
        return any(_mentions(node.test, name) for node in nodes_of(scope, cst.Assert))


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
