"""Names bound only where CUDA is (issue 27): `if torch.cuda.is_available(): n_gpus = ...`
and `n_gpus` read after the `if`, which is a NameError on every other machine."""

from __future__ import annotations

from textwrap import dedent
from typing import Iterable, Sequence

import libcst as cst

from porter.rulebase.rule import Example, Needs, Rule, Safety

_AVAILABLE = "torch.cuda.is_available"



class _Names(cst.CSTVisitor):
    """Names a statement binds (``bound``) and reads (``read``), not inside nested definitions."""

    def __init__(self) -> None:
        self.bound: set[str] = set()
        self.read: list[cst.Name] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.bound.add(node.name.value)
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.bound.add(node.name.value)
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self.bound.update(_target_names(node.target))

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.bound.update(_target_names(node.target))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.bound.update(_target_names(node.target))

    def visit_For(self, node: cst.For) -> None:
        self.bound.update(_target_names(node.target))

    def visit_AsName(self, node: cst.AsName) -> None:
        self.bound.update(_target_names(node.name))

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        if node.asname is None:
            name = node.name
            while isinstance(name, cst.Attribute):
                name = name.value
            if isinstance(name, cst.Name):
                self.bound.add(name.value)

    def visit_Name(self, node: cst.Name) -> None:
        self.read.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)  # ``x.n_gpus`` reads ``x``, not ``n_gpus``
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # ``f(n_gpus=1)``: the keyword is no read
        return False


def _target_names(node: cst.BaseExpression) -> Iterable[str]:
    if isinstance(node, cst.Name):
        yield node.value
    elif isinstance(node, (cst.Tuple, cst.List)):
        for element in node.elements:
            yield from _target_names(element.value)
    elif isinstance(node, cst.StarredElement):
        yield from _target_names(node.value)


def _names(nodes: Sequence[cst.CSTNode]) -> _Names:
    found = _Names()
    for node in nodes:
        node.visit(found)
    return found


class CudaGuardedName(Rule):
    """A name bound only under `if torch.cuda.is_available():` and read after the `if`.

    What:
    Reports a name that a block binds only inside `if torch.cuda.is_available():` (no
    `else` binds it, nothing before the `if` does) and reads after that `if`:
    `if torch.cuda.is_available(): n_gpus = torch.cuda.device_count()` then
    `range(n_gpus)`.

    Why:
    Without CUDA the body never runs: the read raises `NameError` (or
    `UnboundLocalError`), however well the rest of the file is ported.

    Fix safety:
    Report only: what the name should hold off CUDA (0 GPUs? 1 device? the CPU?) is
    the author's decision; binding it before the `if` keeps CUDA's value on CUDA.

    Known limits:
    Only reads in the same block after the `if` (not in nested functions, not in
    other modules) and only the `torch.cuda.is_available()` test itself.
    """

    code = "PT908"
    name = "cuda-guarded-name"
    safety = Safety.REVIEW
    needs = Needs(targets=frozenset({_AVAILABLE}), calls_only=True)

    valid = [
        dedent("""\
        import torch

        if torch.cuda.is_available():
            world = torch.cuda.device_count()
        else:
            world = 1
        print(world)
        """),
        dedent("""\
        import torch

        n_gpus = 0
        if torch.cuda.is_available():
            n_gpus = torch.cuda.device_count()
        print(n_gpus)
        """),
        # read only inside the guard
        "import torch\nif torch.cuda.is_available():\n    n = torch.cuda.device_count()\n    print(n)\n",
        # a lookalike
        "import mylib as torch\nif torch.cuda.is_available():\n    n = 1\nprint(n)\n",
        # a parameter rebound under the guard (timm / YOLO's DataParallel wrap): bound before it
        dedent("""\
        import torch


        def for_eval(model):
            if torch.cuda.is_available():
                model = torch.nn.DataParallel(model).cuda()
            return model
        """),
    ]
    invalid = [
        Example(
            dedent("""\
            import torch


            def main():
                if torch.cuda.is_available():
                    n_gpus = torch.cuda.device_count()
                    print("gpus", n_gpus)
                for i in range(n_gpus):
                    print(i)
            """),
            line=8, message="`n_gpus` is bound only when CUDA is available (line 5)",
        ),
        Example(
            dedent("""\
            from torch.cuda import is_available as has_cuda

            if has_cuda():
                from apex import amp
                scaler = None
            model, opt = amp.initialize(model, opt)
            """),
            line=6, message="`amp` is bound only when CUDA is available",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        self._params: list[set[str]] = []
        self._check(node.body)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        params = node.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        every += [p for p in (params.star_arg, params.star_kwarg) if isinstance(p, cst.Param)]
        self._params.append({p.name.value for p in every})

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._params.pop()
        return updated

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._check(node.body)

    def _check(self, body: Sequence[cst.BaseStatement]) -> None:
        for index, stmt in enumerate(body):
            if not isinstance(stmt, cst.If) or not self._guard(stmt.test):
                continue
            guarded = _names([stmt.body]).bound - _names([stmt.orelse] if stmt.orelse else []).bound
            guarded -= _names(body[:index]).bound
            guarded -= self._params[-1] if self._params else set()  # a parameter is bound already
            if guarded:
                self._report(stmt, guarded, body[index + 1:])

    def _guard(self, test: cst.BaseExpression) -> bool:
        return isinstance(test, cst.Call) and not test.args and self.matches(test.func, _AVAILABLE) is not None

    def _report(self, stmt: cst.If, guarded: set[str], after: Sequence[cst.BaseStatement]) -> None:
        rebound: set[str] = set()
        for later in after:
            names = _names([later])
            for read in names.read:
                if read.value in guarded and read.value not in rebound:
                    line = self.ctx.positions()[stmt].start.line
                    reduced = getattr(self.ctx, "reduced", None)  # a module with stubs (porter.engine.stages.segments)
                    line = reduced.original_line(line) if reduced is not None else line
                    self.flag(read, f"`{read.value}` is bound only when CUDA is available (line {line}); "
                              "without CUDA this read raises NameError",
                              suggestion=f"bind `{read.value}` before the `if` (or in an `else`) with its value off CUDA")
                    guarded = guarded - {read.value}
            rebound |= names.bound
