"""The ledger: every CUDA touchpoint of a file, each in exactly one state.

Independently of the rules, the ledger finds with the stdlib ``ast`` what ties a file
to CUDA (the *touchpoints*): imports of CUDA-only modules (porter.rulebase.cuda_packages),
imports that resolve nowhere (porter.project.known_modules), ``torch.cuda.*``, ``.cuda()``,
``"cuda"`` / ``"nccl"`` strings, ``cpp_extension`` builds, ``is_cuda`` tests, DDP's
``device_ids`` / ``output_device``, and CUDA environment variables. Then it accounts
for each, in the first state that applies:

- **rewritten** / **reported**: a rule's rewrite or finding covers it (by position:
  the finding starts on the touchpoint, inside it, or on the expression or statement
  around it);
- **guarded**: it only runs where CUDA is present (porter.rulebase.conditions.guards); the guard's line
  is recorded;
- **inert**: it can't fail off CUDA (a message, a docstring, a comparison, a
  ``torch.cuda`` call that answers without CUDA); the reason is recorded;
- **unaccounted**: anything else. Each gets a finding of the catch-all code PT999
  saying what was seen and why it may fail off CUDA.

The ledger reads the file's bytes, never the pre-filter's results, so it is the same
whether or not the pre-filter ran; a byte check first keeps the parse to the files
that can hold a touchpoint.
"""

from __future__ import annotations

import ast
import bisect
import re
from functools import lru_cache
from typing import Optional, Sequence

from porter.project import selectors
from porter.project.touchpoints.ledger_data import CODE, NAME, STATES, Touchpoint, TreeContext, counts
from porter.project.touchpoints.ledger_scan import Scanner
from porter.project.touchpoints.ledger_triggers import trigger_lines, triggered_in_code
from porter.rulebase.conditions.guards import Region, guard_ported, parse
from porter.rulebase.conditions.test_gates import mocks_cuda
from porter.rulebase.cuda_packages import advice_for
from porter.rulebase.rule import Finding, one_line

__all__ = ["CODE", "NAME", "STATES", "Touchpoint", "TreeContext", "account", "catch_all", "counts",
           "finding_for", "scan_failure", "trigger_lines"]

_STOP = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)



def account(
    data: bytes,
    path: str,
    findings: Sequence[Finding],
    context: TreeContext = TreeContext(),
    ignores: Optional[dict[int, frozenset[str]]] = None,
    new: Optional[bytes] = None,
) -> list[Touchpoint]:
    """Every touchpoint of one Python file, each in exactly one state. ``new``: the
    migrated bytes, when they differ (an import whose every use a rule rewrote is gone
    from them: the port removed it)."""
    lines = trigger_lines(data, context)
    if not lines or not triggered_in_code(data, context):
        return []
    tree = parse(data)
    if tree is None:
        return []
    scanner = Scanner(tree, data, context)
    scanner.scan(lines)
    if not scanner.found:
        return []
    regions = scanner.finder.find(expressions=False)
    for node, *_ in scanner.found:
        for parent in scanner._ancestors(node):
            scanner.finder.expression(parent)
    rewrites = [(f.line, f.column - 1) for f in findings if f.action == "rewrite"]
    open_regions = [r for r in regions if not (r.kind == "device" and guard_ported(r, rewrites))]
    by_start: dict[tuple[int, int], list[Finding]] = {}
    for f in findings:
        if f.code != CODE:
            by_start.setdefault((f.line, f.column - 1), []).append(f)
    starts = _Starts(findings)
    out = []
    for node, kind, what, why, inert in scanner.found:
        start, end = scanner.finder.start(node), scanner.finder.end(node)
        state, detail = _state(scanner, node, (start, end), by_start, starts, open_regions, inert, ignores,
                               whole=kind == "ddp-device")
        if state == "unaccounted" and new is not None and kind.endswith("import"):
            state, detail = _removed(node, what.split()[-1], new, findings, tree) or (state, detail)
        if state == "unaccounted" and what == "'nccl'":
            state, detail = _backend_ported(findings, data) or (state, detail)
        if state == "unaccounted":
            state, detail = _mocked(scanner, node) or (state, detail)
        out.append(Touchpoint(start[0], start[1] + 1, kind, what, state, detail if state != "unaccounted" else why))
    out.sort(key=lambda t: (t.line, t.column, t.kind))
    return _once_a_line(out)


def _once_a_line(touchpoints: list[Touchpoint]) -> list[Touchpoint]:
    """The same unaccounted touchpoint again on a line (``{512: 'cuda', 1024: 'cuda'}``) is one
    construct: its first one gets the PT999 finding, which reports the others."""
    seen: set[tuple[int, str, str]] = set()
    out = []
    for t in touchpoints:
        key = (t.line, t.kind, t.what)
        if t.state == "unaccounted" and key in seen:
            t = Touchpoint(t.line, t.column, t.kind, t.what, "reported", CODE)
        elif t.state == "unaccounted":
            seen.add(key)
        out.append(t)
    return out


class _Starts:
    """The findings (other than the ledger's own) sorted by where they start, so that
    those inside one span are found by bisection: a scan of every finding for each
    touchpoint made a file with 8,000 rewrites quadratic."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.entries = sorted(((f.line, f.column - 1), i, f) for i, f in enumerate(findings) if f.code != CODE)
        self.keys = [key for key, _, _ in self.entries]

    def within(self, start, end) -> list[Finding]:
        """The findings starting in [start, end), in the order they were made."""
        chosen = self.entries[bisect.bisect_left(self.keys, start):bisect.bisect_left(self.keys, end)]
        return [f for _, _, f in sorted(chosen, key=lambda entry: entry[1])]


def _state(scanner, node, span, by_start, findings, regions: Sequence[Region], inert, ignores,
           whole: bool = False) -> tuple[str, str]:
    """``whole``: only a rewrite of all of the touchpoint ports it (DDP's ``device_ids=[...]``:
    a rewrite of ``torch.cuda.current_device()`` inside the list still hands DDP a device
    index off CUDA, and the next run would find ``[porter_runtime.current_device()]`` unported)."""
    found = [f for f in _covering(scanner, node, span, by_start, findings)
             if not (whole and f.action == "rewrite" and (f.line, f.column - 1) > span[0])]
    rewrite = next((f for f in found if f.action == "rewrite"), None)
    if rewrite is not None:
        return "rewritten", rewrite.code
    if found:
        return "reported", found[0].code
    guard = next((r for r in regions if r.encloses(span)), None)
    if guard is not None:
        return "guarded", f"line {guard.guard_line}"
    if inert is not None:
        return "inert", inert
    codes = (ignores or {}).get(span[0][0])
    if codes is not None and (not codes or any(CODE.startswith(c) for c in codes)):
        return "inert", "silenced by a `# porter: ignore` comment"
    return "unaccounted", ""


def _mocked(scanner: Scanner, node: ast.AST) -> Optional[tuple[str, str]]:
    """("inert", why) for a touchpoint in a test that mocks CUDA or the process group
    (porter.rulebase.conditions.test_gates.mocks_cuda): what it hands CUDA reaches the mock."""
    for parent in scanner._ancestors(node):
        line = mocks_cuda(parent) if isinstance(parent, ast.stmt) else None
        if line is not None:
            return "inert", f"handed to a mock: the test mocks CUDA or the process group (line {line})"
    return None


def _backend_ported(findings: Sequence[Finding], data: bytes) -> Optional[tuple[str, str]]:
    """A backend name matters only where the process group starts: when the file's
    ``init_process_group`` is (or became) the runtime's (gloo off CUDA), "nccl" is handled."""
    for f in findings:
        if f.action == "rewrite" and "porter_runtime.init_process_group" in f.after:
            return "rewritten", f.code
    if b"porter_runtime.init_process_group(" in data:
        return "inert", "the process group starts through porter_runtime.init_process_group (gloo off CUDA)"
    return None


def _removed(node: ast.AST, module: str, new: bytes, findings: Sequence[Finding],
             old: Optional[ast.AST] = None) -> Optional[tuple[str, str]]:
    """("rewritten", the code of a rewrite of its names) when the port removed the import: it
    is gone, or (``old``: the file before) fewer of its twins are left, and this one was in an
    ``if`` block, which the clean-up edits line by line (EasyContext's ``__main__`` block beside
    a ``try`` of the same import, which stays)."""
    if _still_imported(node, module, new) and not (
            old is not None and _in_if(old, node) and _imports_like(_parse_new(new), node) < _imports_like(old, node)):
        return None
    names = [a.asname or a.name.split(".")[0] for a in node.names]  # type: ignore[attr-defined]
    rewrites = [f for f in findings if f.action == "rewrite"]
    by_name = [f for f in rewrites if any(n in f.before for n in names)]
    chosen = (by_name or rewrites)[:1]
    return ("rewritten", chosen[0].code) if chosen else None


#: the migrated bytes, parsed once for all of a file's import touchpoints
_parse_new = lru_cache(maxsize=2)(parse)


def _imports_like(tree: Optional[ast.AST], node: ast.AST) -> int:
    """How many imports of ``tree`` import what ``node`` does (its module, a name of it)."""
    wanted = {(a.name, a.asname) for a in node.names}  # type: ignore[attr-defined]
    return 0 if tree is None else sum(
        1 for other in ast.walk(tree) if type(other) is type(node)
        and getattr(other, "module", None) == getattr(node, "module", None)
        and getattr(other, "level", 0) == getattr(node, "level", 0)
        and any((a.name, a.asname) in wanted for a in other.names))  # type: ignore[attr-defined]


def _in_if(tree: ast.AST, node: ast.AST) -> bool:
    """Whether ``node`` is a statement of a module-level ``if`` block (at any depth of ``if``s)."""
    todo = [s for s in getattr(tree, "body", ()) if isinstance(s, ast.If)]
    while todo:
        branch = todo.pop()
        if any(s is node for s in branch.body + branch.orelse):
            return True
        todo += [s for s in branch.body + branch.orelse if isinstance(s, ast.If)]
    return False


def _still_imported(node: ast.AST, module: str, new: bytes) -> bool:
    """Whether the migrated bytes still import what ``node`` imports: the same names from
    the same module. Another import from the module stays beside a removed one (MoBA,
    blind round 9: ``from flash_attn import flash_attn_varlen_func`` went with its last
    use while ``from flash_attn.flash_attn_interface import (...)`` stayed)."""
    tree = _parse_new(new)
    if tree is None:  # unreadable: any import of the module counts, as a text search sees it
        return re.search(rb"\b(?:import|from)[ \t]+" + re.escape(module.encode()) + rb"\b", new) is not None
    return _imports_like(tree, node) > 0


def _covering(scanner: Scanner, node: ast.AST, span, by_start, starts: _Starts) -> list[Finding]:
    """The findings that cover a touchpoint: starting inside it, or on an enclosing
    expression or statement (a review only up to the touchpoint's own statement; a
    rewrite up to the enclosing function, since it replaced all of the node)."""
    start, end = span
    found = starts.within(start, end)
    in_statement = True
    child = node
    for parent in scanner._ancestors(node):
        if isinstance(parent, _STOP):
            break
        if isinstance(parent, ast.arguments):  # a default: a rewrite of it starts on the parameter's name
            child, parent = parent, selectors.defaulted_parameter(parent, child) or parent
        else:
            child = parent
        if not hasattr(parent, "lineno"):
            continue  # withitem, comprehension, arguments: no position of their own
        for f in by_start.get(scanner.finder.start(parent), ()):
            if in_statement or f.action == "rewrite":
                found.append(f)
        if isinstance(parent, ast.stmt):
            in_statement = False
    return found


def finding_for(path: str, touchpoint: Touchpoint, source_line: str) -> Finding:
    """The catch-all finding of an unaccounted touchpoint."""
    return Finding(
        code=CODE, rule=NAME, path=path, line=touchpoint.line, column=touchpoint.column, action="review",
        message=f"CUDA touchpoint `{touchpoint.what}` that no rule ported or named: {touchpoint.detail}",
        before=one_line(source_line), suggestion=_suggestion(touchpoint),
    )


def _suggestion(touchpoint: Touchpoint) -> str:
    if touchpoint.kind in ("cuda-import", "unresolved-import"):
        return advice_for(touchpoint.what.split()[-1])
    return {
        "torch.cuda": "guard it with `if torch.cuda.is_available():` or use the porter_runtime equivalent",
        "cuda-method": "`.to(porter_runtime.device())`",
        "string": "porter_runtime.device() for a device, porter_runtime.dist_backend('nccl') for a backend",
        "device-words": "the device the runtime resolved, by its bare name, as the first word: "
                        "f\"{porter_runtime.device_type()} fp16\"",
        "env": "os.environ.get(...) with a default",
        "cpp-extension": "build the extension only where CUDA is present and keep a PyTorch path",
        "ddp-device": "device_ids only where the device is CUDA (None elsewhere)",
    }.get(touchpoint.kind, "")


def scan_failure(path: str, exc: Exception) -> Finding:
    """The finding that says the ledger could not account for a file (a porter bug)."""
    return Finding(code=CODE, rule=NAME, path=path, line=1, column=1, action="review",
                   message=f"porter's ledger could not scan this file ({type(exc).__name__}: {exc}); "
                           "its CUDA touchpoints are not accounted for")


def catch_all(path: str, data: bytes, touchpoints: Sequence[Touchpoint]) -> list[Finding]:
    """One PT999 finding per unaccounted touchpoint."""
    lines = data.decode("utf-8", "replace").splitlines()
    return [finding_for(path, t, lines[t.line - 1] if t.line <= len(lines) else "")
            for t in touchpoints if t.state == "unaccounted"]

