"""DataLoader worker functions that ``spawn`` cannot pickle (lambdas, nested functions)."""

from __future__ import annotations

from dataclasses import dataclass
from textwrap import dedent
from typing import Optional

import libcst as cst

from porter.rulebase.families.dataloader import DATALOADER, workers
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import (
    argument,
)


@dataclass
class _Frame:
    kind: str  # "function" | "class" | "module"
    name: str
    node: Optional[cst.CSTNode] = None  # the function (or module) whose names ``bindings`` holds
    _bindings: Optional[dict[str, str]] = None

    @property
    def bindings(self) -> dict[str, str]:
        """name → "def" | "lambda" | "other", worked out when first asked: only a
        DataLoader's worker function passed by name needs them."""
        if self._bindings is None:
            self._bindings = _bindings(self.node) if self.node is not None else {}
        return self._bindings


class _Bindings(cst.CSTVisitor):
    """What each name of one function body (or module) is bound to."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}

    def _bind(self, name: str, kind: str) -> None:
        self.kinds[name] = kind if self.kinds.get(name, kind) == kind else "other"

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._bind(node.name.value, "def")
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._bind(node.name.value, "other")
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        kind = "lambda" if isinstance(node.value, cst.Lambda) else "holds" if _lambda_in(node.value) else "other"
        for target in node.targets:
            if isinstance(target.target, cst.Name):
                self._bind(target.target.value, kind)

    def visit_Param(self, node: cst.Param) -> None:
        self._bind(node.name.value, "other")


class _LambdaFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        self.found = True
        return False


def _lambda_in(node: cst.CSTNode) -> bool:
    """A lambda anywhere in an expression (``T.Compose([T.Lambda(lambda x: x)])``)."""
    finder = _LambdaFinder()
    node.visit(finder)
    return finder.found


def _bindings(node: cst.CSTNode) -> dict[str, str]:
    found = _Bindings()
    if isinstance(node, cst.FunctionDef):
        node.params.visit(found)
        node.body.visit(found)
    else:
        node.visit(found)
    return found.kinds


_PICKLE_FIX = "def collate(batch): ...  # at module level, then collate_fn=collate"
_DATASET_FIX = "def scale(x): return x / 255  # at module level, then transform=scale"


class DataLoaderUnpicklableFn(Rule):
    """A lambda or local function as a DataLoader's `collate_fn` / `worker_init_fn` is reported.

    What:
    Reports `DataLoader(..., num_workers=N, collate_fn=f)` (and `worker_init_fn=f`)
    where N may be > 0 and `f` is a lambda, a function defined inside another function
    (or a variable holding a lambda), or a `functools.partial` of one. Also a dataset
    built with a lambda in its arguments (`MyDataset(transform=lambda x: x / 255)`,
    `T.Lambda(...)` in a transform), given directly or through a variable bound to it:
    the workers receive the dataset pickled, lambda included.

    Why:
    macOS starts workers with `spawn`, which pickles these functions. A local one
    fails with `AttributeError: Can't pickle local object 'main.<locals>.<lambda>'`
    (torch 2.13 first warns "Got pickle error when attempting to start a worker
    Process."); a module-level lambda fails with `_pickle.PicklingError: Can't pickle
    <function <lambda> at 0x…>: attribute lookup <lambda> on __main__ failed`. Linux
    uses `fork` and never pickles them.

    Fix safety:
    Review (no rewrite). Moving a closure to module level may need its captured values
    passed another way (a class with `__call__`, or `functools.partial` of a
    module-level function).

    Known limits:
    Only names bound in the enclosing functions or the module are followed; a function
    returned by another call (a factory) is not. A dataset's lambda is seen only in the
    call that builds it (or the variable's own assignment), not in a transform variable
    built elsewhere or stored by the dataset's class itself.
    """

    code = "PT404"
    name = "dataloader-unpicklable-fn"
    safety = Safety.REVIEW
    needs = Needs(targets=DATALOADER)

    valid = [
        "from torch.utils.data import DataLoader\n\ndef collate(b):\n    return b\n\n"
        "def main():\n    return DataLoader(ds, num_workers=4, collate_fn=collate)\n",
        "from torch.utils.data import DataLoader\n\ndef main():\n"
        "    return DataLoader(ds, collate_fn=lambda b: b)\n",
        "import mylib\n\ndef main():\n    return mylib.DataLoader(ds, num_workers=2, collate_fn=lambda b: b)\n",
        "from torch.utils.data import DataLoader\n\ndef outer():\n    def collate(b):\n        return b\n\n"
        "    def main(collate):\n        return DataLoader(ds, num_workers=2, collate_fn=collate)\n",
        dedent("""\
        from torch.utils.data import DataLoader

        def main():
            ds = Pairs(transform=lambda x: x / 255)
            return DataLoader(ds, batch_size=8)
        """),
        dedent("""\
        from torch.utils.data import DataLoader

        def main(ds):
            return DataLoader(ds, num_workers=2)
        """),
    ]
    invalid = [
        Example("from torch.utils.data import DataLoader\n\ndef main():\n"
                "    loader = DataLoader(ds, num_workers=4, collate_fn=lambda b: pad(b))\n"),
        Example("import torch as t\n\nclass Trainer:\n    def build(self):\n        def seed(worker_id):\n"
                "            np.random.seed(worker_id)\n"
                "        return t.utils.data.DataLoader(ds, num_workers=self.workers, worker_init_fn=seed)\n"),
        Example("from torch.utils.data import DataLoader\nimport functools\n\ncollate = lambda b: b\n"
                "loader = DataLoader(ds, num_workers=2, collate_fn=functools.partial(collate))\n"),
        Example(
            dedent("""\
            from torch.utils.data import DataLoader as Loader

            def main():
                ds = Pairs(transform=lambda x: x / 255)
                return Loader(ds, batch_size=8, num_workers=4)
            """),
            line=5, message="`dataset` can't be pickled",
        ),
        Example(
            dedent("""\
            import torch
            import torchvision.transforms as T

            loader = torch.utils.data.DataLoader(
                MNIST("data", transform=T.Compose([T.Lambda(lambda x: x.repeat(3, 1, 1))])), num_workers=2)
            """),
            line=5, message="attribute lookup <lambda> on __main__ failed",
        ),
    ]

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self._frames: list[_Frame] = []
        self._module = _Frame("module", "")

    def visit_Module(self, node: cst.Module) -> None:
        self._module = _Frame("module", "", node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._frames.append(_Frame("function", node.name.value, node))

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._frames.pop()
        return updated

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._frames.append(_Frame("class", node.name.value))

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self._frames.pop()
        return updated

    def visit_Call(self, node: cst.Call) -> None:
        if not self.matches(node.func) or workers(node) is None:
            return
        for param, index in (("dataset", 0), ("collate_fn", 6), ("worker_init_fn", 10)):
            arg = argument(node, param, index)
            error = None if arg is None else (self._dataset_error(arg.value) if param == "dataset"
                                              else self._pickle_error(arg.value))
            if error:
                fix = ("give the dataset a module-level function instead of the lambda" if param == "dataset"
                       else "define it at module level and pass it by name")
                self.flag(arg, f"`{param}` can't be pickled for the worker processes macOS spawns "
                          f"(num_workers={workers(node)}): {error}; {fix}",
                          suggestion=_DATASET_FIX if param == "dataset" else _PICKLE_FIX)

    def _dataset_error(self, node: cst.BaseExpression) -> Optional[str]:
        """A dataset built here with a lambda in its arguments, or a name bound to one."""
        if isinstance(node, cst.Call) and _lambda_in(node):
            return self._error(len(self._frames), "<lambda>")
        if not isinstance(node, cst.Name):
            return None
        depth, kind = self._binding(node.value)
        return self._error(depth, "<lambda>") if kind == "holds" else None

    def _pickle_error(self, node: cst.BaseExpression) -> Optional[str]:
        if isinstance(node, cst.Call) and self.matches(node.func, "functools.partial") and node.args:
            return self._pickle_error(node.args[0].value)
        if isinstance(node, cst.Lambda):
            return self._error(len(self._frames), "<lambda>")
        if not isinstance(node, cst.Name):
            return None
        depth, kind = self._binding(node.value)
        if depth == 0:  # a module-level name pickles unless it is a lambda
            return self._error(0, "<lambda>") if kind == "lambda" else None
        return None if kind == "other" else self._error(depth, "<lambda>" if kind == "lambda" else node.value)

    def _binding(self, name: str) -> tuple[int, Optional[str]]:
        """How the innermost function frame that binds ``name`` binds it, with its depth;
        else the module's binding, at depth 0."""
        for depth in range(len(self._frames), 0, -1):
            frame = self._frames[depth - 1]
            kind = frame.bindings.get(name)
            if frame.kind == "function" and kind is not None:
                return depth, kind
        return 0, self._module.bindings.get(name)

    def _error(self, depth: int, name: str) -> Optional[str]:
        """The pickling error for ``name`` defined in the first ``depth`` frames."""
        frames = self._frames[:depth]
        while frames and frames[-1].kind == "class":
            frames = frames[:-1]  # a lambda in a class body: pickled as an attribute lookup
        if not frames:
            return (f"`_pickle.PicklingError: Can't pickle <function {name} at 0x…>: attribute lookup "
                    f"{name} on __main__ failed`") if name == "<lambda>" else None
        qualname = ".".join(f.name + (".<locals>" if f.kind == "function" else "") for f in frames)
        return f"`AttributeError: Can't pickle local object '{qualname}.{name}'`"
