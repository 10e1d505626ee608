"""Code after a CUDA-only import that porter left as is, in the same function or branch.

yolov5's ``DetectMultiBackend`` loads a TensorRT engine in one arm of a long ``if``::

    elif engine:  # TensorRT
        import tensorrt as trt              # TP603: the finding a human must see
        if device.type == "cpu":
            device = torch.device("cuda:0")  # runs only where tensorrt imported
        ...
        im = torch.from_numpy(np.empty(shape, dtype=dtype)).to(device)

The statements after the import run only where it succeeded, and a package porter does
not port (TensorRT, no Mac build) never imports on a Mac: what porter finds there is
listed for information (porter.engine.stages.notes), and the import keeps its finding. An
import porter ported (a rewrite on its line: flash_attn to porter_runtime) opens no
such region, since the code after it then runs on a Mac too. Only a function's body
or a branch's block counts: the rest of a module is what its import's fix (a guard)
lets run, and a ``try`` with an ``except ImportError`` is porter.rulebase.conditions.guards'.
"""

from __future__ import annotations

import ast
from typing import Callable, Collection, Iterator, Optional

from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.conditions.guards import Region

#: Statements whose blocks run later or in their own way, not as a branch of code.
_NOT_BRANCHES = (ast.ClassDef, ast.Try)


def import_tails(tree: ast.Module, rewritten_lines: Collection[int],
                 cuda_module: Callable[[str], bool] = is_cuda_only_module) -> list[Region]:
    """The regions after each unported CUDA-only import in a function or a branch."""
    regions = []
    for block in _blocks(tree):
        for index, stmt in enumerate(block[:-1]):
            if _imports_cuda(stmt, cuda_module) and stmt.lineno not in rewritten_lines:
                first, last = block[index + 1], block[-1]
                span = ((first.lineno, 0), (last.end_lineno or last.lineno, 1 << 30))
                regions.append(Region(span, stmt.lineno, "import-tail", ()))
                break
    return regions


def top_level_cuda_import(tree: ast.Module, rewritten_lines: Collection[int],
                          cuda_module: Callable[[str], bool] = is_cuda_only_module,
                          ported: Optional[ast.Module] = None) -> Optional[int]:
    """The line of the first CUDA-only import porter left as is at the module's own top
    level (not under ``try``, ``if`` or a definition), or None. ``ported``: the module as
    porter writes it; an import it no longer holds (the clean-up removed it with its last
    use) was not left as is."""
    kept = None if ported is None else {ast.dump(s) for s in ported.body if isinstance(s, (ast.Import, ast.ImportFrom))}
    return next((stmt.lineno for stmt in tree.body
                 if _imports_cuda(stmt, cuda_module) and stmt.lineno not in rewritten_lines
                 and (kept is None or ast.dump(stmt) in kept)), None)


def _blocks(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list below the module's own, but a class's or a ``try``'s body."""
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and not isinstance(node, _NOT_BRANCHES):
            for name in ("body", "orelse"):
                block = getattr(node, name, None)
                if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                    yield block


def _imports_cuda(stmt: ast.stmt, cuda_module: Callable[[str], bool]) -> bool:
    if isinstance(stmt, ast.Import):
        return any(cuda_module(alias.name) for alias in stmt.names)
    return isinstance(stmt, ast.ImportFrom) and not stmt.level and bool(stmt.module) and cuda_module(stmt.module)
