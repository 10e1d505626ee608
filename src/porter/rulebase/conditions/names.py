"""What each name of a file stands for, from its imports alone (porter.rulebase.conditions.guards
reads tests such as ``torch.cuda.is_available()`` by it)."""

from __future__ import annotations

import ast
from typing import Iterator, Optional

from porter.rulebase.matching import ast_dotted_name


def statements(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every statement of a tree, at any depth (a tenth of the nodes: cheaper than ``ast.walk``)."""
    stack = list(child_blocks(tree)) if not isinstance(tree, ast.stmt) else [[tree]]
    while stack:
        for stmt in stack.pop():
            yield stmt
            stack.extend(child_blocks(stmt))


def child_blocks(stmt: ast.AST, nested: bool = True) -> Iterator[list[ast.stmt]]:
    """The statement lists of a statement; with ``nested``, those of its ``except``
    handlers and ``case`` clauses too."""
    for name in ("body", "orelse", "finalbody"):
        block = getattr(stmt, name, None)
        if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
            yield block
    if not nested:
        return
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    for case in getattr(stmt, "cases", ()):
        yield case.body


#: What a name the file never imports stands for when the file star-imports a module
#: (``from FastSAM.tools import *``, ``from utils import *``): that module's own ``import
#: torch`` (Grounded-SAM's grounded_fast_sam.py tests ``torch.cuda.is_available()`` and
#: gets torch only that way). Only torch's conventional names.
STAR_IMPORTED = {"torch": "torch", "nn": "torch.nn"}


class Names:
    """What each name of a file stands for, from its imports (flow-insensitive: a name
    imported twice as different things resolves to neither)."""

    def __init__(self, tree: ast.AST) -> None:
        found: dict[str, set[str]] = {}
        for node in statements(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        found.setdefault(alias.asname, set()).add(alias.name)
                    else:
                        root = alias.name.split(".")[0]
                        found.setdefault(root, set()).add(root)
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "porter_runtime":  # a vendored copy (`from mypkg import porter_runtime`)
                        found.setdefault(alias.asname or alias.name, set()).add("porter_runtime")
                    elif alias.name != "*" and node.module and not node.level:
                        found.setdefault(alias.asname or alias.name, set()).add(f"{node.module}.{alias.name}")
        if any(isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)
               for node in getattr(tree, "body", ())):
            for name, target in STAR_IMPORTED.items():
                found.setdefault(name, {target})
        self.imported = {name: next(iter(v)) for name, v in found.items() if len(v) == 1}

    def qualname(self, node: ast.AST) -> Optional[str]:
        if isinstance(node, ast.Name):
            return self.imported.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None
