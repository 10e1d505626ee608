"""Matching ``porter verify``'s failures to porter's own findings on the tree.

Porter analyses the tree in dry-run mode (the engine, as ``porter migrate`` without
``--write``). A failure is *named* when a finding sits on the statement of one of its
traceback lines inside the tree (innermost first; the import statements that only chain
one tree module to the next are passed over), or on an earlier statement of the same
function that sets a name the innermost failing statement reads, or at an import of the module a
``ModuleNotFoundError`` names (in the failing files first, then anywhere), or, when that
import carries none, on every use of the names the import binds (the rewrite of
``flash_attn_func(...)`` also drops ``from flash_attn import flash_attn_func``).
Otherwise it is NOT NAMED by porter, and a ``# porter: ignore`` on the failing line is
pointed out.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from porter.engine.run import run
from porter.rulebase.cuda_packages import is_cuda_only_module, looks_compiled


@dataclass
class Mapping:
    """Whether porter's report names a failure, and by which findings."""

    named: bool
    findings: list[dict] = field(default_factory=list)  # code, path, line, action, message
    #: where a ``# porter: ignore`` comment silenced the failing line (not named on purpose)
    silenced: Optional[tuple[str, int]] = None
    #: the module a ModuleNotFoundError names, when nothing says it is CUDA's: a missing
    #: dependency of the project, not a CUDA cause porter should have named
    dependency: Optional[str] = None
    #: the failure's class: "cuda" (named by a finding, or CUDA in the failure itself),
    #: "missing-dependency" or "other" (no sign of CUDA in it)
    cause: str = "other"

    def text(self) -> str:
        if self.dependency:
            return f"not installed: {self.dependency} (a missing dependency, no sign of CUDA)"
        if not self.named and self.cause == "other":
            return "other: no sign of CUDA in it (NOT NAMED by porter)"
        if not self.named:
            return "CUDA: NOT NAMED by porter"
        first = self.findings[0]
        more = f" (+{len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        return f"named by finding {first['code']} at {first['path']}:{first['line']}{more}"


class FindingIndex:
    """Porter's findings on the tree (dry run), by file and line, with statement spans."""

    def __init__(self, root: Path, findings: Sequence[dict]) -> None:
        self.root = root
        self.by_path: dict[str, list[dict]] = {}
        for f in findings:
            self.by_path.setdefault(f["path"], []).append(f)
        self._spans: dict[str, Optional[list[tuple[int, int, Optional[ast.stmt]]]]] = {}

    def _statements(self, rel: str):
        if rel not in self._spans:
            try:
                tree = ast.parse((self.root / rel).read_bytes())
            except (SyntaxError, ValueError, OSError):
                self._spans[rel] = None
            else:
                spans = []
                for node in ast.walk(tree):
                    if isinstance(node, ast.stmt):
                        body = getattr(node, "body", None)
                        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                            end = max(node.lineno, body[0].lineno - 1)  # a compound statement: its header
                        else:
                            end = node.end_lineno or node.lineno
                        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                        spans.append((first, end, node))
                self._spans[rel] = spans
        return self._spans[rel]

    def span(self, rel: str, line: int) -> tuple[int, int]:
        """The lines of the (innermost) statement at ``line``."""
        best = (line, line)
        for first, last, _ in self._statements(rel) or []:
            if first <= line <= last and (best == (line, line) or last - first < best[1] - best[0]):
                best = (first, last)
        return best

    def at(self, rel: str, line: int) -> list[dict]:
        first, last = self.span(rel, line)
        return [f for f in self.by_path.get(rel, []) if first <= f["line"] <= last]

    def feeding(self, rel: str, line: int) -> list[dict]:
        """Findings on the statements that bind a name the statement at ``line`` reads,
        earlier in the same function (or at module level): ``device = "cuda"`` found three
        lines above the ``x.to(device)`` that fails names that failure."""
        statements = self._statements(rel) or []
        first, last = self.span(rel, line)
        failing = next((node for a, b, node in statements if (a, b) == (first, last)), None)
        if failing is None:
            return []
        read = {n.id for n in ast.walk(failing) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        scope = self._scope(statements, failing)
        found = []
        findings = self.by_path.get(rel, [])
        for a, b, node in statements:
            if b >= first or not isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                continue
            here = [f for f in findings if a <= f["line"] <= b]
            if not here:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if bound & read and self._scope(statements, node) is scope:
                found += here
        return found

    @staticmethod
    def _scope(statements, node: ast.stmt) -> Optional[ast.AST]:
        """The innermost function around ``node`` (None: the module)."""
        best: Optional[ast.AST] = None
        for _, _, candidate in statements:
            if isinstance(candidate, (ast.FunctionDef, ast.AsyncFunctionDef)) and candidate is not node and \
                    candidate.lineno < node.lineno <= (candidate.end_lineno or candidate.lineno):
                if best is None or candidate.lineno > best.lineno:
                    best = candidate
        return best

    def silenced(self, rel: str, line: int) -> bool:
        """Whether a ``# porter: ignore`` comment sits on the statement at ``line``."""
        try:
            lines = (self.root / rel).read_bytes().splitlines()
        except OSError:
            return False
        first, last = self.span(rel, line)
        return any(_IGNORE.search(text) for text in lines[first - 1:last])

    def is_import(self, rel: str, line: int) -> bool:
        for first, last, node in self._statements(rel) or []:
            if first <= line <= last and isinstance(node, (ast.Import, ast.ImportFrom)):
                return True
        return False

    def imports_of(self, module: str, files: Sequence[str]) -> list[dict]:
        """Findings at the import statements of ``module`` (or a parent or child of it);
        else, when every use of the names those imports bind carries a finding, those
        findings (``flash_attn_func(...)`` rewritten: the rewrite drops the import too)."""
        at_import, on_use = [], []
        for rel in files:
            bound: set[str] = set()
            tree_nodes = self._statements(rel) or []
            for first, last, node in tree_nodes:
                if isinstance(node, ast.Import):
                    hits = [a for a in node.names if _related(module, a.name)]
                    bound.update(a.asname or a.name.partition(".")[0] for a in hits)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    hits = [a for a in node.names if _related(module, node.module)
                            or _related(module, f"{node.module}.{a.name}")]
                    bound.update(a.asname or a.name for a in hits if a.name != "*")
                else:
                    continue
                if hits:
                    at_import += [f for f in self.by_path.get(rel, []) if first <= f["line"] <= last]
            uses = sorted({n.lineno for _, _, node in tree_nodes if not isinstance(node, (ast.Import, ast.ImportFrom))
                           for n in ast.iter_child_nodes(node) for n in ast.walk(n)
                           if isinstance(n, ast.Name) and n.id in bound})
            found = [self.at(rel, line) for line in uses]
            if uses and all(found):
                on_use += [f for fs in found for f in fs]
        return at_import or on_use


_IGNORE = re.compile(rb"#\s*porter:\s*ignore")


def _related(missing: str, imported: str) -> bool:
    return missing == imported or imported.startswith(missing + ".") or missing.startswith(imported + ".")


#: CUDA in a failure's own words (torch's "Torch not compiled with CUDA enabled", NCCL, a
#: torch_extensions build, a CUDA-only package's name).
CUDA_TEXT = re.compile(r"cuda|nccl|nvidia|nvcc|cudnn|triton|torch_extensions|Torch not compiled with CUDA", re.IGNORECASE)


def map_failure(frames: Sequence[tuple[str, int]], missing: Sequence[str], index: FindingIndex,
                error: str = "", hidden: Sequence[str] = ()) -> Mapping:
    """Named when a finding sits at a traceback line inside the tree (innermost first;
    the import statements that only chain one tree module to the next are passed over),
    or at an import of the missing module (in the failing files first, then anywhere).
    The class: CUDA when named, or when the failure shows CUDA (a hidden CUDA-only package,
    a missing module with CUDA evidence, CUDA in the error); a missing dependency when a
    module without such evidence is not installed; else other."""
    found: list[dict] = []
    for n, (rel, line) in enumerate(frames):
        if n and index.is_import(rel, line):
            continue
        found = index.at(rel, line)
        if found:
            break
    if not found:  # the innermost frame's statement reads a name a finding's statement set
        inner = next(((rel, line) for n, (rel, line) in enumerate(frames) if not (n and index.is_import(rel, line))),
                     None)
        found = index.feeding(*inner) if inner else []
    if not found:
        files = list(dict.fromkeys(rel for rel, _ in frames))
        for name in missing:
            found = index.imports_of(name, files) or index.imports_of(name, sorted(index.by_path))
            if found:
                break
    seen, unique = set(), []
    for f in found:
        key = (f["code"], f["path"], f["line"])
        if key not in seen:
            seen.add(key)
            unique.append({k: f[k] for k in ("code", "path", "line", "action", "message")})
    silenced = dependency = None
    if not unique:
        silenced = next(((rel, line) for n, (rel, line) in enumerate(frames)
                         if not (n and index.is_import(rel, line)) and index.silenced(rel, line)), None)
        dependency = next((name for name in missing if not _cuda_evidence(name)), None) if not silenced else None
    cuda = bool(unique) or bool(hidden) or any(map(_cuda_evidence, missing)) or bool(CUDA_TEXT.search(error))
    cause = "cuda" if cuda else "missing-dependency" if dependency else "other"
    return Mapping(bool(unique), unique, silenced, None if cuda else dependency, cause)


def _cuda_evidence(module: str) -> bool:
    """The one table of CUDA-only packages, or a compiled extension's name."""
    return is_cuda_only_module(module) or any(looks_compiled(part) for part in module.split("."))


def analyse(config) -> list[dict]:
    """Porter's findings (rewrites and items for a human) on the tree, in dry-run mode."""
    result = run(config)
    return [dict(f.to_dict(), path=item.path) for item in result.files for f in item.findings]
