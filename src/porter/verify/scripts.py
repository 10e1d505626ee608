"""Which files are scripts, and the part of a script ``porter verify`` imports.

A script's top level *is* the program: nanoGPT's ``train.py`` trains at the top level,
a launcher spawns its children, a ``configurator.py`` walks ``sys.argv``. Importing it
would run all that (for minutes, or with the verifier's argv). So a file that the tree
does not import, with no ``if __name__ == "__main__":`` block, whose top level does work
(a loop, a ``with``, a call made for its effect) is a script, and the import stage runs
only its header: the top-level imports (and a ``try`` around them) and the ``sys.path``
edits they may need. Whether the program runs is ``--run``'s question.
"""

from __future__ import annotations

import ast
from typing import Optional

#: Calls at a module's top level that set the process up rather than run the program.
_SETUP_CALLS = ("sys.path.", "warnings.", "logging.", "os.environ.", "torch.manual_seed", "random.seed",
                "np.random.seed", "numpy.random.seed", "matplotlib.use", "load_dotenv")


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _setup_call(stmt: ast.stmt) -> bool:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    name = _dotted(stmt.value.func) + "."
    return any(name.startswith(prefix) or name == prefix + "." for prefix in _SETUP_CALLS)


def _main_guard(stmt: ast.stmt) -> bool:
    test = getattr(stmt, "test", None)
    return (isinstance(stmt, ast.If) and isinstance(test, ast.Compare)
            and "__name__" in {_dotted(test.left), *(_dotted(c) for c in test.comparators)})


def _works(stmt: ast.stmt) -> bool:
    """Whether a top-level statement runs the program rather than defines it."""
    if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith)):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, (ast.Call, ast.Await)):
        return not _setup_call(stmt)
    if isinstance(stmt, (ast.If, ast.Try)):
        inner = stmt.body + stmt.orelse + getattr(stmt, "finalbody", [])
        inner += [s for h in getattr(stmt, "handlers", []) for s in h.body]
        return any(_works(s) for s in inner)
    return False


def _path_edit(stmt: ast.stmt) -> bool:
    """``sys.path.insert(0, ...)`` and the like: the imports after it may need it."""
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and _dotted(stmt.value.func).startswith("sys.path."))


def _header(stmt: ast.stmt) -> bool:
    """Imports and the sys.path edits they need; no other setup call (``torch.manual_seed(
    seed)`` reads a name the skipped top level assigns)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)) or _path_edit(stmt):
        return True
    if isinstance(stmt, ast.Try):  # try: import x / except ImportError: x = None
        return all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) for s in stmt.body)
    return False


#: Calls that start another program: ``os.system("pip install gradio==3.50.2")``.
_SPAWNS = ("os.system", "os.popen", "subprocess.run", "subprocess.call", "subprocess.check_call",
           "subprocess.check_output", "subprocess.Popen", "subprocess.getoutput", "subprocess.getstatusoutput",
           "os.execv", "os.execvp", "os.execl", "os.execlp", "os.spawnv", "os.spawnl", "pip.main")


def _spawns(stmt: ast.stmt) -> bool:
    """Whether a top-level statement starts another program (GroundingDINO's
    ``gradio_app.py`` builds the package and pip-installs its pins at import)."""
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) or _main_guard(node):
            continue  # defined, or run as a program: not run by an import
        if isinstance(node, ast.Call) and _dotted(node.func) in _SPAWNS:
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False


def script_header(tree: ast.Module, imported: bool) -> Optional[tuple[int, ...]]:
    """The first lines of the top-level statements to run when the file is a script; None
    when it is a module to import whole. A module whose top level starts another program
    (``os.system("pip install ...")``) is never imported whole: verify would run it, and
    install into the environment it checks."""
    if any(_spawns(s) for s in tree.body):
        return _header_lines(tree)
    if imported or any(_main_guard(s) for s in tree.body) or not any(_works(s) for s in tree.body):
        return None
    return _header_lines(tree)


#: Calls a path a ``sys.path`` edit reads may be computed with (no program runs in them).
_PATH_CALLS = ("os.path.", "os.getcwd", "os.fspath", "Path", "pathlib.", "str")


def _header_lines(tree: ast.Module) -> tuple[int, ...]:
    """The header's statements (``_header``) and the top-level assignments before them that
    their ``sys.path`` edits read, where only paths are computed: ChatRWKV's ``current_path =
    os.path.dirname(os.path.abspath(__file__))``, then ``sys.path.append(f"{current_path}/../rwkv_pip_package/src")``."""
    kept = [s for s in tree.body if _header(s)]
    wanted = {n.id for s in kept if _path_edit(s) for n in ast.walk(s) if isinstance(n, ast.Name)}
    for stmt in reversed(tree.body[:max((tree.body.index(s) for s in kept if _path_edit(s)), default=0)]):
        targets = [t.id for t in getattr(stmt, "targets", ()) if isinstance(t, ast.Name)]
        if isinstance(stmt, ast.Assign) and set(targets) & wanted and _computes_a_path(stmt.value):
            kept.append(stmt)
            wanted |= {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)}
    return tuple(sorted(s.lineno for s in kept))


def _computes_a_path(value: ast.expr) -> bool:
    # a method of a value computed here (``Path(__file__).resolve()``) is dotted from "."
    return all(_dotted(n.func).startswith((*_PATH_CALLS, ".")) for n in ast.walk(value) if isinstance(n, ast.Call))
