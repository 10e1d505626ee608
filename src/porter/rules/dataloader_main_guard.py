"""DataLoader workers in a script without a ``__main__`` guard: what macOS's ``spawn`` start method breaks."""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

import libcst as cst

from porter.rulebase.evidence import CalledByName, Uses
from porter.rulebase.families.dataloader import DATALOADER, workers
from porter.rulebase.rule import Example, Needs, Rule, Safety
from porter.rulebase.syntax import (
    block_statements,
    is_main_guard,
    small_statements,
)


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


#: A use of a DataLoader; and, since `_called` follows calls by name from module-level
#: code into the module's functions, every function some code calls by its name.
_LOADER_OR_CALLED = Uses(DATALOADER) | CalledByName()


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
    needs = Needs(targets=DATALOADER, unit=_LOADER_OR_CALLED)

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
