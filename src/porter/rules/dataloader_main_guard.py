"""DataLoader workers in a script without a ``__main__`` guard: what macOS's ``spawn`` start method breaks."""

from __future__ import annotations

from textwrap import dedent
from typing import Iterator, Optional, Sequence

import libcst as cst

from porter.rulebase.evidence import CalledByName, Uses
from porter.rulebase.families.dataloader import DATALOADER, workers, workers_arg
from porter.rulebase.rule import Example, Needs, Rule, Safety, keyword, positional
from porter.rulebase.syntax import (
    block_statements,
    is_main_guard,
    is_runtime_call,
    replace_arg,
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
    """A DataLoader with workers that starts at import time (no `__main__` guard) loads in the main process where workers spawn.

    What:
    Finds a `DataLoader(..., num_workers=N)` (N > 0 or not a literal) that runs at
    import time: built at module level and then iterated there (a module-level loop,
    or its name used by later module-level code, or passed straight into a call), or
    built in a function that module-level code calls (`main()` at the bottom of the
    script, directly or through other functions of the file). Rewrites its
    `num_workers=N` to `num_workers=porter_runtime.unguarded_workers(N)`; a call that
    also passes `persistent_workers` or `prefetch_factor` (DataLoader refuses them with
    no workers) or `**kwargs` is reported instead, with the guard as the fix.

    Why:
    macOS starts DataLoader workers with `spawn`, which re-imports the main script in
    each worker. Unguarded training code then starts workers again and fails with
    `RuntimeError: An attempt has been made to start a new process before the current
    process has finished its bootstrapping phase.`, followed by
    `DataLoader worker (pid(s) …) exited unexpectedly`. Linux uses `fork` and never
    shows this.

    Fix safety:
    Safe. On CUDA, and wherever workers start with `fork` (Linux, CPU-only too),
    `unguarded_workers(N)` is `N`. Where they start with `spawn` (macOS's default, and
    `porter verify --emulate mps`) it is 0: the same batches, loaded in the main
    process, where the original fails. Porter does not move code under a guard: that
    changes what importing the module does, and the message suggests it for speed.

    A notebook is not re-run by its workers (spawn re-imports a script, and a notebook's
    kernel has no file): there a cell's loader is reported only when what the workers
    unpickle (the dataset, sampler, `collate_fn`, `worker_init_fn`) may live in the
    notebook's `__main__`, which a worker cannot import. An argument made by an
    imported class or function (`TextAudioLoader(...)` from the repository's
    `data_utils`) is importable.

    Known limits:
    Calls are followed only through functions of the same file called by name;
    methods, other modules and `DataLoader` subclasses are not followed. In a notebook,
    a name is followed through one assignment in its own cell.
    """

    code = "PT403"
    name = "dataloader-main-guard"
    safety = Safety.SAFE
    needs = Needs(targets=DATALOADER, unit=_LOADER_OR_CALLED)

    valid = [
        "from torch.utils.data import DataLoader\n\ndef main():\n    loader = DataLoader(ds, num_workers=4)\n"
        "    for batch in loader:\n        step(batch)\n\nif __name__ == '__main__':\n    main()\n",
        "from torch.utils.data import DataLoader\nloader = DataLoader(ds, num_workers=0)\nfor b in loader:\n    step(b)\n",
        "import mylib\nloader = mylib.DataLoader(ds, num_workers=4)\nfor b in loader:\n    step(b)\n",
        "def f(DataLoader):\n    return DataLoader(ds, num_workers=4)\nfor b in f(L):\n    step(b)\n",
        Example(  # a notebook's cell: the dataset and collate_fn are the repository's own classes
            dedent("""\
                from torch.utils.data import DataLoader

                from data_utils import TextAudioSpeakerCollate, TextAudioSpeakerLoader

                dataset = TextAudioSpeakerLoader(hps.data.validation_files, hps.data)
                collate_fn = TextAudioSpeakerCollate()
                loader = DataLoader(dataset, num_workers=8, shuffle=False, batch_size=1, pin_memory=True,
                                    drop_last=True, collate_fn=collate_fn)
                data_list = list(loader)
                """),
            path="inference.ipynb",
        ),
    ]
    invalid = [
        Example(  # PyTorch-GAN's scripts: options, models, loaders and the training loop at module level
            dedent("""\
                from torch.utils.data import DataLoader

                dataloader = DataLoader(
                    ImageDataset("../../data/%s" % opt.dataset_name, transforms_=transforms_, unaligned=True),
                    batch_size=opt.batch_size,
                    shuffle=True,
                    num_workers=opt.n_cpu,
                )
                for epoch in range(opt.epoch, opt.n_epochs):
                    for i, batch in enumerate(dataloader):
                        step(batch)
                """),
            dedent("""\
                import porter_runtime
                from torch.utils.data import DataLoader

                dataloader = DataLoader(
                    ImageDataset("../../data/%s" % opt.dataset_name, transforms_=transforms_, unaligned=True),
                    batch_size=opt.batch_size,
                    shuffle=True,
                    num_workers=porter_runtime.unguarded_workers(opt.n_cpu),
                )
                for epoch in range(opt.epoch, opt.n_epochs):
                    for i, batch in enumerate(dataloader):
                        step(batch)
                """),
            line=3, message="loads in the main process there",
        ),
        Example("import torch as t\n\ndef main():\n    loader = t.utils.data.DataLoader(ds, num_workers=args.workers)\n"
                "    train(loader)\n\nmain()\n",
                "import porter_runtime\nimport torch as t\n\ndef main():\n"
                "    loader = t.utils.data.DataLoader(ds, num_workers=porter_runtime.unguarded_workers(args.workers))\n"
                "    train(loader)\n\nmain()\n"),
        Example("from torch.utils.data import DataLoader as DL\n\ndef build():\n    return DL(ds, 8, True, None, None, 2)\n\n"
                "def main():\n    fit(build())\n\nmain()\n",
                "import porter_runtime\nfrom torch.utils.data import DataLoader as DL\n\ndef build():\n"
                "    return DL(ds, 8, True, None, None, porter_runtime.unguarded_workers(2))\n\n"
                "def main():\n    fit(build())\n\nmain()\n"),
        Example(  # DataLoader refuses persistent_workers without workers: reported, with the guard as the fix
            "from torch.utils.data import DataLoader\n\nloader = DataLoader(ds, num_workers=4, persistent_workers=True)\n"
            "for batch in loader:\n    step(batch)\n",
            line=3, message="no `if __name__ == \"__main__\":` guard"),
        Example(  # a notebook's cell: the collate function may be one the notebook defines
            dedent("""\
                from torch.utils.data import DataLoader
                from torchvision import datasets, transforms

                train_set = datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())
                loader = DataLoader(train_set, batch_size=64, num_workers=4, collate_fn=pad_batch)
                for images, labels in loader:
                    print(images.shape)
                    break
                """),
            path="explore.ipynb", line=5, message="in a notebook",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        statements = list(_unguarded(node.body))
        found = self._top_level(statements) + self._called(node, statements)
        self._unguarded_loaders: dict[int, tuple[str, str]] = {}
        if self.ctx.path.endswith(".ipynb"):
            self._notebook(node, found)
            return
        for call, why, fix in found:
            self._unguarded_loaders.setdefault(id(call), (why, fix))

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        found = getattr(self, "_unguarded_loaders", {}).get(id(original))
        if found is None:
            return updated
        why, fix = found
        given = workers_arg(original)
        if given is not None and is_runtime_call(self, given.value):
            return updated  # ported
        starts = (f"DataLoader(num_workers={workers(original)}) starts worker processes at import time ({why}, no "
                  f"`if __name__ == \"__main__\":` guard); macOS spawns workers, which re-import this script and "
                  f"fail with `{_BOOTSTRAP}`")
        arg = workers_arg(updated)
        blocked = [k for k in ("persistent_workers", "prefetch_factor") if keyword(original, k) is not None]
        if arg is None or blocked or any(a.star for a in original.args):
            self.flag(original, starts + (_GUARD_NOTE if fix == _GUARD_FIX else ""), suggestion=fix)
            return updated
        new = replace_arg(updated, arg, self.runtime_call("unguarded_workers", arg.value))
        return self.rewrite(original, new, starts + "; the runtime loads in the main process there (num_workers=0, "
                            "the same batches) and keeps the workers on CUDA and wherever they fork (Linux)")

    def _notebook(self, module: cst.Module, found: list[tuple[cst.Call, str, str]]) -> None:
        """A cell's loaders whose pickled arguments may be the notebook's own."""
        made = _made_by(module)
        for call, why, _ in found:
            if not all(self._importable(v, made) for v in _pickled(call)):
                self.flag(call, f"DataLoader(num_workers={workers(call)}) in a notebook: macOS spawns workers, "
                          "which unpickle the dataset and functions by name, and a class or function defined "
                          "in the notebook lives in `__main__`, which a worker cannot import",
                          suggestion="move the dataset class and functions into a .py module and import them "
                                     "(or num_workers=0 off CUDA)")

    def _importable(self, value: cst.BaseExpression, made: dict[str, Optional[cst.BaseExpression]]) -> bool:
        """``value`` is an imported name, or built by an imported class or function
        (here, or by the cell's one assignment to the name)."""
        if isinstance(value, cst.Call):
            value = value.func
        if isinstance(value, (cst.Name, cst.Attribute)) and self.qualname(value) is not None:
            return True
        if isinstance(value, cst.Name) and made.get(value.value) is not None:
            return self._importable(made[value.value], {})  # type: ignore[arg-type]
        return False

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


#: DataLoader's parameters a worker unpickles, and their positions.
_PICKLED = {"dataset": 0, "sampler": 3, "batch_sampler": 4, "collate_fn": 6, "worker_init_fn": 10}


def _pickled(call: cst.Call) -> list[cst.BaseExpression]:
    given = positional(call)
    values = []
    for name, index in _PICKLED.items():
        arg = keyword(call, name) or (given[index] if index < len(given) else None)
        if arg is not None:
            values.append(arg.value)
    return values


def _made_by(module: cst.Module) -> dict[str, Optional[cst.BaseExpression]]:
    """Module-level names assigned once to a call (the call), or more often (None)."""
    made: dict[str, Optional[cst.BaseExpression]] = {}
    for stmt in module.body:
        for small in small_statements(stmt):
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Name):
                    once = target.value not in made and isinstance(small.value, cst.Call)
                    made[target.value] = small.value if once else None
    return made
