"""Parameters that only select by name: ``impl='cuda'`` is compared, never used as a device.

StyleGAN2-ADA's ops take ``impl='cuda'`` and test ``if impl == 'cuda' and x.device.type ==
'cuda':`` (the reference implementation runs otherwise); their wrappers hand the choice on
(``upfirdn2d(..., impl=impl)``). A default like that can't fail off CUDA: the ledger
(porter.project.touchpoints.ledger) counts it inert. A parameter that is read any other way (handed
to ``torch.device``, stored, formatted) is not one.
"""

from __future__ import annotations

import ast
from typing import Mapping, Optional, Union

Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def module_functions(tree: ast.Module) -> dict[str, Function]:
    """The module's top-level functions by name (a callee the choice is handed on to)."""
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def defaulted_parameter(arguments: ast.arguments, default: ast.AST) -> Optional[ast.arg]:
    """The parameter whose default is ``default``."""
    positional = arguments.posonlyargs + arguments.args
    pairs = list(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None]
    return next((arg for arg, value in pairs if value is default), None)


def only_compared(function: Function, name: str, functions: Mapping[str, Function], depth: int = 0) -> bool:
    """Whether every read of the parameter ``name`` in ``function`` compares it (``==``,
    ``in``) or hands it on by the same keyword to a function of the module that only
    compares it too; and nothing rebinds it."""
    parents = {child: parent for parent in ast.walk(function) for child in ast.iter_child_nodes(parent)}
    reads = 0
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        if not isinstance(node.ctx, ast.Load):
            return False
        reads += 1
        parent = parents.get(node)
        if isinstance(parent, ast.Compare):
            continue
        if not _handed_on(parent, parents, functions, depth):
            return False
    return reads > 0


def _handed_on(parent: Optional[ast.AST], parents: Mapping[ast.AST, ast.AST],
               functions: Mapping[str, Function], depth: int) -> bool:
    if not isinstance(parent, ast.keyword) or parent.arg is None or depth >= 3:
        return False
    call = parents.get(parent)
    callee = functions.get(call.func.id) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None
    return callee is not None and only_compared(callee, parent.arg, functions, depth + 1)
