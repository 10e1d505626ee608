"""Imports inside functions that a rewrite left unused (porter.edits.unused_imports' other half).

``from xformers.ops import memory_efficient_attention`` at the top of a ``forward`` whose
call a rule rewrote still fails off CUDA each time the function runs: it goes, as a
top-level import does.
"""

from __future__ import annotations

import ast
from collections import Counter
from typing import Any, Optional

import libcst as cst

from porter.edits.import_lines import alias_asname
from porter.rulebase.conditions.guards import parse
from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.matching import dotted_name

class Names(cst.CSTVisitor):
    """How often each name occurs (as any ``Name`` node) in the nodes visited."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def visit_Name(self, node: cst.Name) -> None:
        self.counts[node.value] += 1



def _local_import_bindings(tree: ast.AST) -> set[str]:
    """The names absolute imports bind inside functions, at any depth (cheap: ``ast``)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    names.update((a.asname or a.name.split(".")[0]) for a in inner.names)
                elif isinstance(inner, ast.ImportFrom) and not inner.level:
                    names.update((a.asname or a.name) for a in inner.names if a.name != "*")
    return names


class _Lines(cst.CSTVisitor):
    """A function's simple statement lines at any depth (not inside a nested definition),
    each with the number of statements of its block."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[cst.SimpleStatementLine, int]] = []
        self._blocks: list[int] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._blocks.append(len(node.body))

    def leave_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        self._blocks.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
        self.found.append((node, self._blocks[-1] if self._blocks else 0))
        return False


def _function_lines(function: cst.FunctionDef) -> list[tuple[cst.SimpleStatementLine, int]]:
    lines = _Lines()
    function.body.visit(lines)
    return lines.found


class _Functions(cst.CSTVisitor):
    """Each function by its path (``Block.forward``); a path defined twice maps to None."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.found: dict[str, Optional[cst.FunctionDef]] = {}

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.append(node.name.value)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.append(node.name.value)
        path = ".".join(self.stack)
        self.found[path] = None if path in self.found else node

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.pop()


def _loads(node: cst.CSTNode, name: str) -> int:
    """How often ``node`` reads ``name`` outside imports and attribute/keyword names
    (a field walk)."""
    from porter.rulebase.families.thirdparty.uses import uses

    return uses(node, [name], skip=cst.Pass())


def _local_import_names(line: cst.SimpleStatementLine) -> list[tuple[str, cst.ImportAlias]]:
    """The names a function's absolute import line binds (FastChat's ``get_gpu_memory``
    kept ``import torch`` for ``torch.cuda.device`` alone; ChatGLM-6B's Trainer an FSDP
    ``ShardedGradScaler`` import in an ``elif`` for the call now made to the runtime)."""
    found = []
    for small in line.body:
        if isinstance(small, cst.Import):
            for alias in small.names:
                full = dotted_name(alias.name) or ""
                found.append((alias_asname(alias) or full.split(".")[0], alias))
        elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None \
                and not isinstance(small.names, cst.ImportStar):
            for alias in small.names:
                found.append((alias_asname(alias) or dotted_name(alias.name) or "", alias))
    return found


def remove_dead_local_imports(new_module: cst.Module, ctx: Any) -> cst.Module:
    """``from xformers.ops import memory_efficient_attention`` at the top of a ``forward``
    whose call a rule rewrote still fails off CUDA each time the function runs: an
    absolute import among a function's own statements (at any depth) goes (one name of
    it, or the line) when the function used the name before the rewrites and no longer
    does, as top-level imports do; the only statement of its block becomes ``pass``. Functions
    are matched by their path (``Block.forward``); a line marked ``# porter: ignore``
    stays. Only names a replaced node read can have lost their use."""
    tree = parse(ctx.source)
    if tree is None:
        return new_module
    local = _local_import_bindings(tree)
    if not local:
        return new_module
    taken = Names()
    for original, _ in ctx.replaced:
        original.visit(taken)
    if local.isdisjoint(taken.counts):
        return new_module
    before, after = _Functions(), _Functions()
    ctx.module.visit(before)
    new_module.visit(after)
    edits: dict[int, set[str]] = {}  # id of a new import line -> the names it loses
    sole: set[int] = set()  # ... that loses all of them and is its block's only statement
    for path, function in after.found.items():
        old = before.found.get(path)
        if function is None or old is None or not isinstance(function.body, cst.IndentedBlock):
            continue
        old_lines = [line for line, _ in _function_lines(old)]
        for line, siblings in _function_lines(function):
            names = _local_import_names(line)
            if not names or taken.counts.keys().isdisjoint(n for n, _ in names):
                continue
            twin = next((o for o in old_lines if o.deep_equals(line)), None)
            if twin is None or ctx.ignored(twin):
                continue
            dead = {name for name, _ in names if _loads(old, name) > 0 and _loads(function, name) == 0}
            if dead and _cuda_only(line):  # the line is edited anyway: a name it never used would keep it failing
                dead |= {name for name, _ in names if _loads(old, name) == 0}
            if dead:
                edits[id(line)] = dead
                if siblings < 2 and dead >= {name for name, _ in names}:
                    sole.add(id(line))
    if not edits:
        return new_module
    return new_module.visit(_DropLocalNames(edits, sole))


class _DropLocalNames(cst.CSTTransformer):
    """Drops the dead names; an import line that is its block's only statement (llm-foundry's
    ``try: from flash_attn import bert_padding, flash_attn_interface`` / ``except ImportError
    as e: raise e``) becomes ``pass``, so that the block stays and the import no longer fails."""

    def __init__(self, edits: dict[int, set[str]], sole: set[int]) -> None:
        super().__init__()
        self.edits = edits
        self.sole = sole
        self.removed: set[int] = set()

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine):
        dead = self.edits.get(id(original))
        if dead is None:
            return updated
        kept_smalls = []
        for small in updated.body:
            if isinstance(small, (cst.Import, cst.ImportFrom)) and not isinstance(small.names, cst.ImportStar):
                names = [a for a in small.names
                         if (alias_asname(a) or ((dotted_name(a.name) or "").split(".")[0]
                                                 if isinstance(small, cst.Import) else dotted_name(a.name)))
                         not in dead]
                if not names:
                    continue
                if len(names) != len(small.names):
                    names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                    small = small.with_changes(names=names)
            kept_smalls.append(small)
        if not kept_smalls and id(original) in self.sole:
            return cst.SimpleStatementLine([cst.Pass()], leading_lines=updated.leading_lines)
        if not kept_smalls:
            self.removed.add(id(original))
            return cst.RemoveFromParent()
        return updated.with_changes(body=kept_smalls)

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        """A function that now starts below a removed import line starts without the
        blank line that followed it. A block left empty keeps its lines."""
        if original.body and not updated.body:
            return original
        if not original.body or id(original.body[0]) not in self.removed:
            return updated
        first = updated.body[0]
        if all(line.comment is None for line in first.leading_lines):
            first = first.with_changes(leading_lines=[])
        return updated.with_changes(body=[first, *updated.body[1:]])


def _cuda_only(line: cst.SimpleStatementLine) -> bool:
    """Whether the line imports from a CUDA-only package (EasyContext's test function:
    ``from flash_attn import flash_attn_qkvpacked_func, flash_attn_func`` where only the
    second is called, and rewritten: the first alone kept the import failing off CUDA)."""
    for small in line.body:
        if isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
            return is_cuda_only_module(dotted_name(small.module) or "")
        if isinstance(small, cst.Import):
            return all(is_cuda_only_module(dotted_name(a.name) or "") for a in small.names)
    return False


def drop_names_in_lines(old_module: cst.Module, new_module: cst.Module, dead: dict[int, set[str]],
                        lines_of) -> cst.Module:
    """``new_module`` with the names ``dead`` gives (by the id of an old line) dropped from the
    twin of that line; ``lines_of(body)`` lists the lines of a module body to match them in,
    in order. A line left with nothing becomes ``pass`` where it is its block's only statement."""
    old_lines, new_lines = lines_of(old_module.body), lines_of(new_module.body)
    edits: dict[int, set[str]] = {}
    sole: set[int] = set()
    for old in old_lines:
        names = dead.get(id(old))
        twin = next((n for n in new_lines if n.deep_equals(old) and id(n) not in edits), None) if names else None
        if twin is None:
            continue
        edits[id(twin)] = names
        if names >= {name for name, _ in _local_import_names(twin)} and _block_sizes(new_module.body).get(id(twin)) == 1:
            sole.add(id(twin))
    return new_module.visit(_DropLocalNames(edits, sole)) if edits else new_module


def _block_sizes(body, found: Optional[dict] = None) -> dict[int, int]:
    """id of each line in the module's ``if``/``else`` blocks -> how many statements its block has."""
    found = {} if found is None else found
    for stmt in body:
        if isinstance(stmt, (cst.If, cst.Else)) and isinstance(stmt.body, cst.IndentedBlock):
            found.update((id(line), len(stmt.body.body)) for line in stmt.body.body)
            _block_sizes(stmt.body.body, found)
            if isinstance(stmt, cst.If) and stmt.orelse is not None:
                _block_sizes([stmt.orelse], found)
    return found
