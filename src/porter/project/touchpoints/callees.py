"""A CUDA name handed to the repository's own function that only compares it.

A test hands ``"nccl"`` to a strategy's method, and the method only branches on it::

    result = strategy.wrap_model(model, 0, "nccl")       # the test

    def wrap_model(self, model, local_rank, backend, device_mesh=None):
        if backend == "nccl":                              # each definition
            ...

The string reaches no process group and no device: what it chooses, the callee's own
code chooses, and any CUDA use there has its own touchpoint. The callee is looked for
where the call can reach it: in this file and in the repository modules it imports by
an absolute ``from pkg.mod import ...`` / ``import pkg.mod``. Every definition of that
name found there must leave the parameter unused or only compare it
(porter.project.selectors); none found, or a ``**kwargs`` that takes it, and the
string stays a touchpoint.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Optional

from porter.files.apply import read_or_none
from porter.project import selectors, word_search
from porter.project.touchpoints.ledger_data import TreeContext
from porter.rulebase.conditions.guards import parse_uncached

#: Method names of torch's own objects (and ``str``'s): never the repository's choice.
_NOT_OURS = frozenset({"to", "cuda", "device", "type", "get", "format", "join", "append", "startswith",
                       "endswith", "replace", "split", "setdefault", "update", "pop", "__init__"})

Definition = tuple[ast.FunctionDef, bool]  # the definition, and whether it is a method


def only_selects(tree: ast.Module, context: TreeContext, call: ast.Call, child: ast.AST) -> Optional[str]:
    """Why ``child`` (an argument of ``call``) is inert: every definition of the callee
    that the call can reach leaves its parameter unused or only compares it. None where
    that is not so, or no definition is found."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name is None or name in _NOT_OURS:
        return None
    keyword = child.arg if isinstance(child, ast.keyword) else None
    if keyword is None and (child not in call.args or any(isinstance(a, ast.Starred) for a in call.args)):
        return None
    index = call.args.index(child) if keyword is None else None
    found = list(_definitions(tree, context, name))
    if not found:
        return None
    for definition, method in found:
        param = _parameter(definition, method and isinstance(func, ast.Attribute), keyword, index)
        if param is None or not _unused_or_compared(definition, param):
            return None
    return f"handed to `{name}`, which only compares it or leaves it unused (each of its {len(found)} definitions)"


def _definitions(tree: ast.Module, context: TreeContext, name: str) -> Iterator[Definition]:
    yield from _defined(tree, name)
    if not context.root:
        return
    for module in _imported_local_modules(tree, context):
        for rel in _files_of(context.root, context.sources, module):
            yield from _defined_in_file(context.root, rel, name)


def _defined(tree: ast.Module, name: str) -> Iterator[Definition]:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
                yield stmt, isinstance(node, ast.ClassDef)


@lru_cache(maxsize=256)
def _defined_in_file(root: str, rel: str, name: str) -> tuple[Definition, ...]:
    data = read_or_none(Path(root) / rel)
    if data is None or not word_search.defines(data, name):
        return ()
    tree = parse_uncached(data)
    return tuple(_defined(tree, name)) if tree is not None else ()


def _imported_local_modules(tree: ast.Module, context: TreeContext) -> list[str]:
    modules = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        modules += [m for m in names if context.is_local(m.split(".")[0])]
    return modules


@lru_cache(maxsize=256)
def _files_of(root: str, sources: frozenset[str], module: str) -> tuple[str, ...]:
    """The tree's files that can be ``module`` (``pkg/mod.py``, ``pkg/mod/__init__.py``,
    under any folder a script puts on ``sys.path``)."""
    path = module.replace(".", "/")
    ends = (f"/{path}.py", f"/{path}/__init__.py")
    return tuple(sorted(rel for rel in sources if ("/" + rel).endswith(ends)))


def _parameter(definition: ast.FunctionDef, bound: bool, keyword: Optional[str],
               index: Optional[int]) -> Optional[str]:
    args = definition.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    if keyword is not None:
        return keyword if keyword in positional or keyword in [a.arg for a in args.kwonlyargs] else None
    at = (index or 0) + (1 if bound else 0)
    return positional[at] if at < len(positional) else None


def _unused_or_compared(definition: ast.FunctionDef, param: str) -> bool:
    if not any(isinstance(n, ast.Name) and n.id == param for n in ast.walk(definition)):
        return True
    return selectors.only_compared(definition, param, {})
