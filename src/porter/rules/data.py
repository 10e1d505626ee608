"""DataLoader and pinned memory: pinning only on CUDA, and what breaks under macOS's
``spawn`` start method (unguarded scripts, unpicklable worker functions)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from textwrap import dedent
from typing import Iterator, Optional, Sequence

import libcst as cst

from porter.rulebase.availability_checks import availability_test
from porter.rulebase.rule import Example, Needs, Rule, Safety, string_value
from porter.rulebase.syntax import (
    argument,
    argument_pair,
    block_statements,
    int_value,
    is_main_guard,
    is_runtime_call,
    is_true,
    replace_arg,
    small_statements,
)

DATALOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
_PIN_INDEX = 7  # pin_memory's position in DataLoader(...)


def _pins_memory(facts) -> bool:
    # a `pin_memory=` / `pin_memory_device=` keyword, or a {"pin_memory": ...} entry
    return bool(facts.keywords & {"pin_memory", "pin_memory_device"}) or "pin_memory" in facts.strings


class PinMemory(Rule):
    """`pin_memory=True` becomes `pin_memory=porter_runtime.pin_memory()`.

    What:
    Rewrites `pin_memory=True` and `pin_memory=torch.cuda.is_available()` passed to
    any call, and the same values under a `"pin_memory"` dict key (the
    `kwargs = {"num_workers": 1, "pin_memory": True}` idiom), to
    `porter_runtime.pin_memory()`. In a `DataLoader(...)` call, any other non-literal
    value `v` becomes `porter_runtime.pin_memory(v)` and `pin_memory_device="cuda"`
    becomes `pin_memory_device=porter_runtime.pin_memory_device("cuda")`.

    Why:
    Pinning needs CUDA. On a Mac the DataLoader warns `'pin_memory' argument is set as
    true but not supported on MPS now, device pinned memory won't be used.` (2.7 and
    later) and `pin_memory_device` is deprecated from 2.9.

    Fix safety:
    Safe. On CUDA `porter_runtime.pin_memory()` is True (as were `True` and
    `torch.cuda.is_available()`), `porter_runtime.pin_memory(v)` is `bool(v)` (the
    DataLoader only tests its truth), and `pin_memory_device(d)` is `d`. Elsewhere they
    are False and `""`, which turn pinning off.

    Known limits:
    A non-literal value passed to anything but `DataLoader` is left alone;
    `loader.pin_memory` then reads a bool where the value was another truthy object.
    """

    code = "PT401"
    name = "pin-memory"
    safety = Safety.SAFE
    # `pin_memory=True` is rewritten in any call (`DataLoader`, `torch.empty`,
    # `torch.autograd.graph.save_on_cpu`: each pins only with CUDA), so the word alone
    # lets a file through the pre-filter, whatever the call's name.
    needs = Needs(words=frozenset({"pin_memory"}), file_filter=_pins_memory)

    valid = [
        "def make(DataLoader, ds):\n    return DataLoader(ds, pin_memory=pin)\n",
        "import mylib\nloader = mylib.DataLoader(ds, pin_memory=pin)\n",
        "from torch.utils.data import DataLoader\nloader = DataLoader(ds, pin_memory=False)\n",
        "x = t.pin_memory()\n",
    ]
    invalid = [
        Example(
            "from torch.utils.data import DataLoader\nloader = DataLoader(ds, batch_size=32, pin_memory=True)\n",
            "import porter_runtime\nfrom torch.utils.data import DataLoader\n"
            "loader = DataLoader(ds, batch_size=32, pin_memory=porter_runtime.pin_memory())\n",
        ),
        Example(
            "import torch as t\nloader = t.utils.data.DataLoader(ds, pin_memory=args.pin_mem, pin_memory_device='cuda')\n",
            "import porter_runtime\nimport torch as t\nloader = t.utils.data.DataLoader(ds, "
            "pin_memory=porter_runtime.pin_memory(args.pin_mem), "
            "pin_memory_device=porter_runtime.pin_memory_device('cuda'))\n",
        ),
        Example(
            "import torch\nkwargs = {'num_workers': 1, 'pin_memory': True} if use_cuda else {}\n"
            "loader = torch.utils.data.DataLoader(ds, **kwargs)\n",
            "import porter_runtime\nimport torch\n"
            "kwargs = {'num_workers': 1, 'pin_memory': porter_runtime.pin_memory()} if use_cuda else {}\n"
            "loader = torch.utils.data.DataLoader(ds, **kwargs)\n",
        ),
        Example(  # autograd's offloading pins its CPU copies only where CUDA is
            "from torch.autograd.graph import save_on_cpu\n"
            "with save_on_cpu(pin_memory=True, device_type=dev.type):\n    y = model(x)\n",
            "import porter_runtime\nfrom torch.autograd.graph import save_on_cpu\n"
            "with save_on_cpu(pin_memory=porter_runtime.pin_memory(), device_type=dev.type):\n    y = model(x)\n",
        ),
        Example(
            "import torch\nloader = make_loader(ds, pin_memory=torch.cuda.is_available())\n",
            "import porter_runtime\nimport torch\nloader = make_loader(ds, pin_memory=porter_runtime.pin_memory())\n",
        ),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        loader = self.matches(original.func, *DATALOADER) is not None
        new = updated
        old, pin = argument_pair(original, updated, "pin_memory", _PIN_INDEX if loader else None)
        if pin is not None:
            value = self._pin_value(old.value, pin.value, loader)
            if value is not None:
                new = replace_arg(new, new.args[list(updated.args).index(pin)], value)
        old, dev = argument_pair(original, updated, "pin_memory_device")
        if loader and dev is not None and string_value(dev.value) != "" and not is_runtime_call(self, old.value):
            new = replace_arg(new, new.args[list(updated.args).index(dev)],
                              self.runtime_call("pin_memory_device", dev.value))
        if new is updated:
            return updated
        return self.rewrite(original, new, "memory pinning needs CUDA; the runtime pins on CUDA only")

    def leave_DictElement(self, original: cst.DictElement, updated: cst.DictElement) -> cst.DictElement:
        if string_value(original.key) != "pin_memory":
            return updated
        value = self._pin_value(original.value, updated.value, loader=False)
        if value is None:
            return updated
        return self.rewrite(original, updated.with_changes(value=value),
                            "memory pinning needs CUDA; the runtime pins on CUDA only")

    def _pin_value(self, old: cst.BaseExpression, new: cst.BaseExpression,
                   loader: bool) -> Optional[cst.BaseExpression]:
        """The runtime expression for a pin_memory value, or None to leave it."""
        if is_true(old) or availability_test(self, old) is True:
            return self.runtime_call("pin_memory")
        literal = isinstance(old, (cst.Name, cst.Integer)) and (
            isinstance(old, cst.Integer) or old.value in ("True", "False", "None"))
        if loader and not literal and not is_runtime_call(self, old):
            return self.runtime_call("pin_memory", new)
        return None


class PinTensor(Rule):
    """`x.pin_memory()` becomes `porter_runtime.pin_tensor(x)`.

    What:
    Rewrites calls of the `.pin_memory()` method with no arguments (tensors, and
    custom batch types that define it for the DataLoader).

    Why:
    Without CUDA, pinning a tensor on a Mac fails with `RuntimeError: Attempted to set
    the storage of a tensor on device "cpu" to a storage on different device "mps:0".
    This is no longer allowed; the devices must match.` (or crashes).

    Fix safety:
    Safe. On CUDA `porter_runtime.pin_tensor(x)` returns `x.pin_memory()`, whatever
    `x` is; elsewhere it returns `x` unchanged.

    Known limits:
    `.pin_memory(device)` (a deprecated argument) is reported, not rewritten. A call on
    an imported module (`mylib.pin_memory()`) is left alone.
    """

    code = "PT402"
    name = "pin-tensor"
    safety = Safety.SAFE
    needs = Needs(methods=frozenset({"pin_memory"}))

    valid = [
        "import mylib\nmylib.pin_memory()\n",
        "flag = loader.pin_memory\n",
        "from torch.utils.data import DataLoader\nloader = DataLoader(ds, pin_memory=False)\n",
    ]
    invalid = [
        Example(
            "import torch\nx = torch.zeros(8).pin_memory()\n",
            "import porter_runtime\nimport torch\nx = porter_runtime.pin_tensor(torch.zeros(8))\n",
        ),
        Example(
            "import torch as t\n\nclass Batch:\n    def pin_memory(self):\n        self.inp = self.inp.pin_memory()\n"
            "        return self\n",
            "import porter_runtime\nimport torch as t\n\nclass Batch:\n    def pin_memory(self):\n"
            "        self.inp = porter_runtime.pin_tensor(self.inp)\n        return self\n",
        ),
        Example(
            "from torch import randn\nbuf = randn(4).pin_memory().to(device, non_blocking=True)\n",
            "import porter_runtime\nfrom torch import randn\n"
            "buf = porter_runtime.pin_tensor(randn(4)).to(device, non_blocking=True)\n",
        ),
        Example("x = t.pin_memory('cuda')\n"),
    ]

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        func = original.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "pin_memory":
            return updated
        if self.qualname(func.value) is not None:
            return updated  # a function of an imported module, not a tensor method
        if original.args:
            self.flag(original, "`.pin_memory(device)` pins for a CUDA device; pinning needs CUDA",
                      suggestion="porter_runtime.pin_tensor(x)")
            return updated
        receiver = updated.func.value  # type: ignore[attr-defined]
        new = self.runtime_call("pin_tensor", receiver.with_changes(lpar=[], rpar=[])
                                if isinstance(receiver, cst.BaseExpression) and receiver.lpar else receiver)
        return self.rewrite(original, new.with_changes(lpar=updated.lpar, rpar=updated.rpar),
                            "pinning needs CUDA; the runtime pins on CUDA only")


# -- spawn: what macOS's start method breaks -------------------------------------------

_NUM_WORKERS_INDEX = 5


def workers(call: cst.Call) -> Optional[str]:
    """Source-ish text of a DataLoader's num_workers when it may be > 0, else None."""
    arg = argument(call, "num_workers", _NUM_WORKERS_INDEX)
    if arg is None:
        return None
    value = int_value(arg.value)
    if value is not None:
        return str(value) if value > 0 else None
    return cst.Module([]).code_for_node(arg.value)


class _Calls(cst.CSTVisitor):
    """Calls in a subtree, not entering functions, lambdas or classes (they run later)."""

    def __init__(self) -> None:
        self.calls: list[cst.Call] = []
        self.names: list[cst.Name] = []

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False


def _scan(nodes: Sequence[cst.CSTNode]) -> _Calls:
    found = _Calls()
    for node in nodes:
        node.visit(found)
    return found


def _run_parts(stmt: cst.BaseStatement) -> list[cst.CSTNode]:
    """The parts of a statement that run when it runs (a compound one: its header)."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return [stmt]
    if isinstance(stmt, (cst.For,)):
        return [stmt.iter]
    if isinstance(stmt, (cst.If, cst.While)):
        return [stmt.test]
    if isinstance(stmt, cst.With):
        return list(stmt.items)
    return []


def _unguarded(body: Sequence[cst.BaseStatement]) -> Iterator[cst.BaseStatement]:
    """Statements that run at import: not in functions, classes or the __main__ guard."""
    for stmt in body:
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(stmt, cst.If) and is_main_guard(stmt.test):
            if isinstance(stmt.orelse, cst.Else):
                yield from _unguarded(block_statements(stmt.orelse.body))
            continue
        yield stmt
        if isinstance(stmt, (cst.If, cst.For, cst.While, cst.With, cst.Try)):
            yield from _unguarded(block_statements(stmt.body))
            for extra in _branches(stmt):
                yield from _unguarded(block_statements(extra))


def _branches(stmt: cst.BaseStatement) -> list[cst.BaseSuite]:
    out: list[cst.BaseSuite] = []
    orelse = getattr(stmt, "orelse", None)
    if isinstance(orelse, cst.If):
        out.append(cst.IndentedBlock(body=[orelse]))
    elif isinstance(orelse, cst.Else):
        out.append(orelse.body)
    if isinstance(stmt, cst.Try):
        out += [h.body for h in stmt.handlers]
        if stmt.finalbody is not None:
            out.append(stmt.finalbody.body)
    return out


_BOOTSTRAP = ("RuntimeError: An attempt has been made to start a new process before the current process "
              "has finished its bootstrapping phase.")
_GUARD_FIX = 'if __name__ == "__main__": main()'
_GUARD_NOTE = ("; move the training code into `def main():` and call it under the guard "
               "(or use num_workers=0 off CUDA)")


def _loader_or_called(unit, file) -> bool:
    # A use of a DataLoader; and, since `_called` follows calls by name from
    # module-level code into the module's functions, every function some code calls
    # by its name.
    return unit.facts.uses_any(DATALOADER) or (
        not isinstance(unit.node, ast.ClassDef) and unit.node.name in file.called_chains)


class DataLoaderMainGuard(Rule):
    """A DataLoader with workers that starts at import time (no `__main__` guard) is reported.

    What:
    Reports a `DataLoader(..., num_workers=N)` (N > 0 or not a literal) that runs at
    import time: built at module level and then iterated there (a module-level loop,
    or its name used by later module-level code, or passed straight into a call), or
    built in a function that module-level code calls (`main()` at the bottom of the
    script, directly or through other functions of the file).

    Why:
    macOS starts DataLoader workers with `spawn`, which re-imports the main script in
    each worker. Unguarded training code then starts workers again and fails with
    `RuntimeError: An attempt has been made to start a new process before the current
    process has finished its bootstrapping phase.`, followed by
    `DataLoader worker (pid(s) …) exited unexpectedly`. Linux uses `fork` and never
    shows this.

    Fix safety:
    Review (no rewrite). Moving code under a guard changes what importing the module
    does; the author decides.

    Known limits:
    Calls are followed only through functions of the same file called by name;
    methods, other modules and `DataLoader` subclasses are not followed.
    """

    code = "PT403"
    name = "dataloader-main-guard"
    safety = Safety.REVIEW
    needs = Needs(targets=DATALOADER, unit_filter=_loader_or_called)

    valid = [
        "from torch.utils.data import DataLoader\n\ndef main():\n    loader = DataLoader(ds, num_workers=4)\n"
        "    for batch in loader:\n        step(batch)\n\nif __name__ == '__main__':\n    main()\n",
        "from torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=0)\nfor b in loader:\n    step(b)\n",
        "import mylib\nloader = mylib.DataLoader(ds, num_workers=4)\nfor b in loader:\n    step(b)\n",
        "def f(DataLoader):\n    return DataLoader(ds, num_workers=4)\nfor b in f(L):\n    step(b)\n",
    ]
    invalid = [
        Example("from torch.utils.data import DataLoader\n\nloader = DataLoader(ds, batch_size=64, num_workers=4)\n"
                "for epoch in range(10):\n    for batch in loader:\n        step(batch)\n"),
        Example("import torch as t\n\ndef main():\n    loader = t.utils.data.DataLoader(ds, num_workers=args.workers)\n"
                "    train(loader)\n\nmain()\n"),
        Example("from torch.utils.data import DataLoader as DL\n\ndef build():\n    return DL(ds, 8, True, None, None, 2)\n\n"
                "def main():\n    fit(build())\n\nmain()\n"),
    ]

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        statements = list(_unguarded(original.body))
        for call, why, fix in self._top_level(statements) + self._called(original, statements):
            self.flag(call, f"DataLoader(num_workers={workers(call)}) starts worker processes at import "
                      f"time ({why}, no `if __name__ == \"__main__\":` guard); macOS spawns workers, which "
                      f"re-import this script and fail with `{_BOOTSTRAP}`" + (_GUARD_NOTE if fix == _GUARD_FIX
                                                                               else ""), suggestion=fix)
        return updated

    def _loaders(self, nodes: Sequence[cst.CSTNode]) -> list[cst.Call]:
        return [c for c in _scan(nodes).calls if self.matches(c.func) and workers(c) is not None]

    def _top_level(self, statements: list[cst.BaseStatement]) -> list[tuple[cst.Call, str, str]]:
        found = []
        loops = any(isinstance(s, (cst.For, cst.While)) for s in statements)
        for i, stmt in enumerate(statements):
            for call in self._loaders(_run_parts(stmt)):
                name = _assigned_name(stmt, call)
                later = [n for s in statements[i + 1:] for n in _scan(_run_parts(s)).names]
                if loops or name is None or any(n.value == name for n in later):
                    found.append((call, "it runs at module level", _GUARD_FIX))
        return found

    def _called(self, module: cst.Module, statements: list[cst.BaseStatement]) -> list[tuple[cst.Call, str, str]]:
        """Loaders built in this file's functions that module-level code calls."""
        defs = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
        todo = [(n.value, n.value) for s in statements for n in _called_names(_run_parts(s)) if n.value in defs]
        seen: set[str] = set()
        found = []
        while todo:
            name, entry = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            body = list(block_statements(defs[name].body))
            inner = [s for stmt in body for s in _walk_body(stmt)]
            fix = f'if __name__ == "__main__": {entry}()'
            found += [(c, f"`{entry}()` is called at module level", fix) for c in self._loaders(inner)]
            todo += [(n.value, entry) for n in _called_names(inner) if n.value in defs]
        return found


def _walk_body(stmt: cst.BaseStatement) -> list[cst.CSTNode]:
    """The run parts of a function-body statement and of the blocks nested in it."""
    parts = list(_run_parts(stmt))
    if isinstance(stmt, (cst.If, cst.For, cst.While, cst.With, cst.Try)):
        for block in [stmt.body, *_branches(stmt)]:
            for inner in block_statements(block):
                parts += _walk_body(inner)
    return parts


def _called_names(nodes: Sequence[cst.CSTNode]) -> list[cst.Name]:
    return [c.func for c in _scan(nodes).calls if isinstance(c.func, cst.Name)]


def _assigned_name(stmt: cst.BaseStatement, call: cst.Call) -> Optional[str]:
    """``x`` when ``stmt`` is ``x = <call>``."""
    for small in small_statements(stmt):
        if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
            target = small.targets[0].target
            if isinstance(target, cst.Name):
                return target.value
    return None


# -- unpicklable worker functions --------------------------------------------------------

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
