"""The engine: find files, filter cheaply, parse, run the rules, import the runtime.

``migrate_source`` turns one file's bytes into new bytes plus findings; it is pure (no
I/O), so it is what the rule-example tests call. ``process_file`` wraps it with reading
and error handling and returns a picklable :class:`FileResult`; files can therefore be
processed in worker processes. Writing, diffing and vendoring live in ``porter.apply``.

Cost control: ``porter.prefilter`` decides from the bytes, then from the stdlib ``ast``,
which rules can match a file (most files stop there); ``porter.segments`` then hands
LibCST only the definitions some rule wants, the others as one-line stubs.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, NamedTuple, Optional, Sequence, Union

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from porter import imports, ledger, probes
from porter.matching import ImportFacts, Resolver
from porter.positions import locate
from porter.prefilter import SyntaxFacts, byte_candidates, candidate_rules
from porter.segments import Reduced, WholeFile, reduce
from porter.rule import BaseRule, Finding, Rule, TextRule
from porter.sources import decode_error, describe_syntax_error, python_syntax_error

if TYPE_CHECKING:  # pragma: no cover
    from porter.runtime_home import Home, Layout


@dataclass
class Options:
    """What a run applies; shared by every file of the run."""

    rules: Sequence[type[BaseRule]]
    unsafe_fixes: bool = False
    #: Where the dependency-manifest rules move CUDA-only requirements: "marker"
    #: (an environment marker) or "extra" (an optional extra); from [tool.porter].
    dependencies: str = "marker"
    #: (glob, code prefixes) pairs from ``per-file-ignores``: rules skipped for those paths.
    per_file_ignores: Sequence[tuple[str, Sequence[str]]] = ()
    #: What the scanned tree tells the ledger about imports (porter.ledger) and the probe
    #: clean-up about its sources (porter.probes); None: nothing, one file alone.
    ledger: Optional["ledger.TreeContext"] = None

    def for_path(self, rel: str) -> "Options":
        """These options less the rules that ``per-file-ignores`` turns off for ``rel``."""
        if not self.per_file_ignores:
            return self
        from porter.config import ignored_codes

        codes = ignored_codes(self.per_file_ignores, rel)
        if not codes:
            return self
        rules = [r for r in self.rules if not r.code.startswith(codes)]
        return replace(self, rules=rules, per_file_ignores=())

    @property
    def source_rules(self) -> list[type[Rule]]:
        return [r for r in self.rules if issubclass(r, Rule)]

    @property
    def text_rules(self) -> list[type[TextRule]]:
        return [r for r in self.rules if issubclass(r, TextRule)]

    def text_rules_for(self, name: str) -> list[type[TextRule]]:
        return [r for r in self.text_rules if any(fnmatch.fnmatch(name, p) for p in r.patterns)]


@dataclass
class SourceResult:
    new: bytes
    findings: list[Finding]
    needs_runtime: bool = False

    @property
    def rewrites(self) -> list[Finding]:
        return [f for f in self.findings if f.action == "rewrite"]


@dataclass
class FileResult:
    """What happened to one file. Plain, picklable data."""

    path: str  # relative to the run's root, with "/" separators
    status: str  # "unchanged" | "changed" | "error" | "skipped"
    findings: list[Finding] = field(default_factory=list)
    error: str = ""
    old: Optional[bytes] = None  # set only when status == "changed"
    new: Optional[bytes] = None
    #: The file (after migration) imports porter_runtime, so the run must vendor it.
    uses_runtime: bool = False
    #: The copy it imports: its folder (relative to the root) and package, when porter
    #: added the import; ``runtime_from`` is the package of an import the file already had.
    runtime_folder: str = ""
    runtime_package: str = ""
    runtime_from: str = ""
    #: Why the file finds that copy only under conditions (porter.runtime_home).
    runtime_note: str = ""
    #: Its CUDA touchpoints and how each is accounted for (porter.ledger).
    ledger: list["ledger.Touchpoint"] = field(default_factory=list)

    @property
    def rewrites(self) -> list[Finding]:
        return [f for f in self.findings if f.action == "rewrite"]

    @property
    def reviews(self) -> list[Finding]:
        return [f for f in self.findings if f.action == "review"]


# -- one file ------------------------------------------------------------------

class _Record(NamedTuple):
    """What a rule recorded, before positions are known."""

    rule: Rule
    node: cst.CSTNode
    action: str  # "rewrite" | "review"
    message: str
    after: Optional[cst.CSTNode]
    suggestion: str


class FileContext:
    """Per-file state shared by the rules of one pass."""

    def __init__(
        self, module: cst.Module, source: bytes, path: str, options: Options, facts: Optional[ImportFacts] = None,
        reduced: Optional[Reduced] = None,
    ) -> None:
        self.module = module
        #: the file's own bytes (rules may search them for file-wide evidence)
        self.source = source
        self.path = path
        self.unsafe_fixes = options.unsafe_fixes
        self.resolver = Resolver(module, facts)
        self.needs_runtime = False
        #: set when ``module`` is the file with some definitions stubbed (porter.segments)
        self.reduced = reduced
        self._positions = None
        self._ignores = _ignore_comments(reduced.data if reduced is not None else source)
        self._records: list[_Record] = []
        #: every node a rule rewrote, kept or not (porter.guards decides which may stay)
        self.rewritten: list[cst.CSTNode] = []
        #: nodes whose rewrite is dropped: they lie in code that only runs on CUDA
        self.frozen: frozenset[cst.CSTNode] = frozenset()
        #: positions already worked out (by porter.guards' check), shared by the passes
        self.located: dict = {}

    def record(
        self,
        rule: Rule,
        node: cst.CSTNode,
        action: str,
        message: str,
        *,
        after: Optional[cst.CSTNode] = None,
        suggestion: str = "",
    ) -> None:
        if action == "rewrite":
            self.rewritten.append(node)
        if action == "rewrite" and after is not None and self._records:
            self._drop_overwritten(node, after)
        self._records.append(_Record(rule, node, action, message, after, suggestion))

    def _drop_overwritten(self, node: cst.CSTNode, after: cst.CSTNode) -> None:
        """Forget the rewrites inside ``node`` that its new replacement threw away.

        Rules leave inner nodes first: when an outer rewrite is built from the original
        node (not from the already rewritten children), the inner rewrites are not in
        the output and must not be reported. One that survives keeps its record. A
        second rule rewriting the very same node keeps the first one's record only
        where the first one's new parts are still in the output (two rules each
        changing one keyword of a call); otherwise one change is reported once.
        """
        inside = _subtree(node)
        kept = _subtree(after)
        self._records = [
            r for r in self._records
            if not (r.action == "rewrite" and (
                (r.node is node and not _survives(r, after)) or
                (r.node is not node and r.node in inside and r.after not in kept)))
        ]

    def positions(self):
        """Every node's position (LibCST's full pass): only for files with
        ``# porter: ignore`` comments, where any node may need checking."""
        if self._positions is None:
            self._positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
        return self._positions

    def suppressed(self, node: cst.CSTNode, code: str) -> bool:
        """Whether a ``# porter: ignore`` comment on one of the node's lines covers ``code``."""
        if not self._ignores:
            return False
        span = self.positions()[node]
        for line in range(span.start.line, span.end.line + 1):
            codes = self._ignores.get(line)
            if codes is not None and (not codes or any(code.startswith(c) for c in codes)):
                return True
        return False

    def ignored(self, node: cst.CSTNode) -> bool:
        """Whether any ``# porter: ignore`` comment, whatever its codes, is on one of
        the node's lines: the import clean-up leaves such a statement as written."""
        if not self._ignores:
            return False
        span = self.positions()[node]
        return any(line in self._ignores for line in range(span.start.line, span.end.line + 1))

    def keeps(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` must stay as written: it only runs where CUDA is (a guard
        porter did not port), so a rewrite there changes nothing off CUDA."""
        return node in self.frozen

    def code_for(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def findings(self) -> list[Finding]:
        """Resolve positions (one metadata pass, only when something was recorded)."""
        if not self._records:
            return []
        wanted = {r.node for r in self._records}
        positions = {n: self.located[n] for n in wanted if n in self.located}
        if len(positions) < len(wanted):
            positions.update(locate(self.module, wanted - positions.keys()))
        out = []
        for rule, node, action, message, after, suggestion in self._records:
            start = positions[node].start
            out.append(
                Finding(
                    code=rule.code,
                    rule=rule.name,
                    path=self.path,
                    line=self.reduced.original_line(start.line) if self.reduced is not None else start.line,
                    column=start.column + 1,
                    action=action,
                    message=message,
                    before=_one_line(self.code_for(node)),
                    after=_one_line(self.code_for(after)) if after is not None else "",
                    suggestion=suggestion,
                )
            )
        out.sort(key=lambda f: (f.line, f.column, f.code))
        return out


def _survives(record: _Record, later: cst.CSTNode) -> bool:
    """Whether every part ``record``'s rewrite changed is still in the code of the
    ``later`` rewrite of the same node (two rules each porting one keyword of a call)."""
    if record.after is None:
        return False
    parts = _changed_parts(record.node, record.after)
    if not parts or record.after in parts:
        return False
    code = _EMPTY.code_for_node(later)
    return all(_EMPTY.code_for_node(part) in code for part in parts)


_EMPTY = cst.Module(body=[])


def _changed_parts(before: cst.CSTNode, after: cst.CSTNode) -> list[cst.CSTNode]:
    """The smallest subtrees of ``after`` that differ from ``before``, matched child
    by child while the two have the same shape."""
    if after is before or after.deep_equals(before):
        return []
    old, new = before.children, after.children
    if type(before) is not type(after) or len(old) != len(new):
        return [after]
    return [part for o, n in zip(old, new) for part in _changed_parts(o, n)]


def _subtree(node: cst.CSTNode) -> set[cst.CSTNode]:
    found: set[cst.CSTNode] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        found.add(current)
        stack.extend(current.children)
    return found


_IGNORE = re.compile(rb"#\s*porter:\s*ignore(?:\[([A-Za-z0-9_, ]*)\])?")


def _ignore_comments(source: bytes) -> dict[int, frozenset[str]]:
    """Line number → codes silenced there (empty: every code), from ``# porter: ignore``.

    Found by a cheap byte scan; a match inside a string literal would only make porter
    more cautious on that line.
    """
    if b"porter:" not in source:
        return {}
    found: dict[int, frozenset[str]] = {}
    for number, line in enumerate(source.splitlines(), 1):
        match = _IGNORE.search(line)
        if match:
            codes = match.group(1)
            found[number] = frozenset(c.strip().upper() for c in codes.decode().split(",") if c.strip()) if codes else frozenset()
    return found


def _one_line(code: str, limit: int = 160) -> str:
    text = " ".join(code.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RuleRunner(cst.CSTTransformer):
    """Runs many rules in one traversal, dispatching each node type to the rules
    that handle it, in the rules' order."""

    def __init__(self, rules: Iterable[Rule], resolver: Resolver) -> None:
        super().__init__()
        self._resolver = resolver
        self._visitors: dict[str, list] = {}
        self._leavers: dict[str, list] = {}
        for rule in rules:
            for attr in dir(type(rule)):
                if attr.startswith("visit_"):
                    self._visitors.setdefault(attr[6:], []).append(getattr(rule, attr))
                elif attr.startswith("leave_"):
                    self._leavers.setdefault(attr[6:], []).append(getattr(rule, attr))

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Attribute):
            self._resolver.attribute_names.add(id(node.attr))
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            self._resolver.inside_import += 1
        for visit in self._visitors.get(type(node).__name__, ()):
            visit(node)
        return True

    # Rules never use LibCST's per-attribute hooks; skipping their lookup saves a
    # getattr per field of every node.
    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        kind = type(original_node).__name__
        for leave in self._leavers.get(kind, ()):
            result = leave(original_node, updated_node)
            if not isinstance(result, type(original_node)):
                if isinstance(original_node, (cst.Import, cst.ImportFrom)):
                    self._resolver.inside_import -= 1
                return result  # a rule replaced the node with another kind: stop here
            updated_node = result
        if isinstance(original_node, (cst.Import, cst.ImportFrom)):
            self._resolver.inside_import -= 1
        return updated_node


#: Set to "0" to parse every file whole (porter.segments); the output is the same.
SEGMENTS_ENV = "PORTER_SEGMENTS"


def migrate_source(
    data: bytes,
    options: Options,
    *,
    path: str = "<string>",
    runtime_bootstrap: Union[None, str, "LazyBootstrap"] = None,
    candidates: Optional[tuple[list[type[Rule]], Optional[SyntaxFacts]]] = None,
    segments: Optional[bool] = None,
) -> SourceResult:
    """Apply the rules to one file's bytes. Raises libcst/encoding errors to the caller.

    ``runtime_bootstrap``: a :class:`LazyBootstrap` that knows the repository, so that
    the runtime import goes where the file's import style puts it and names the copy the
    file finds; None puts ``import porter_runtime`` right after the docstring (examples).
    ``candidates``: what ``candidate_rules`` said of ``data``, when already known.
    ``segments``: parse only the definitions a rule wants (default: unless the
    ``PORTER_SEGMENTS`` environment variable is "0").
    """
    rules, facts = candidates if candidates is not None else candidate_rules(data, options.source_rules)
    if not rules:
        return SourceResult(data, [])
    if segments is None:
        segments = os.environ.get(SEGMENTS_ENV, "1") != "0"
    reduced = reduce(data, facts, rules) if segments and facts is not None else None
    if reduced is not None:
        try:
            result = _migrate(reduced.data, data, path, options, rules, facts, runtime_bootstrap, reduced)
        except WholeFile:
            pass
        else:
            if result.new == reduced.data:
                return SourceResult(data, result.findings, result.needs_runtime)
            new = reduced.splice(result.new)
            if new is not None:
                return SourceResult(new, result.findings, result.needs_runtime)
    return _migrate(data, data, path, options, rules, facts, runtime_bootstrap, None)


def _migrate(
    code: bytes, data: bytes, path: str, options: Options, rules: Sequence[type[Rule]],
    facts: Optional[SyntaxFacts], runtime_bootstrap: Union[None, str, "LazyBootstrap"], reduced: Optional[Reduced],
) -> SourceResult:
    """One LibCST pass of the rules over ``code`` (``data`` itself, or its reduction);
    again, keeping more nodes as written, while rewrites lie in CUDA-only code."""
    module = cst.parse_module(code)
    frozen: frozenset[cst.CSTNode] = frozenset()
    located: dict = {}
    for _ in range(3):
        ctx = FileContext(module, data, path, options, facts.imports if facts is not None else None, reduced)
        ctx.frozen, ctx.located = frozen, located
        new_module = module.visit(RuleRunner((rule(ctx) for rule in rules), ctx.resolver))
        more = cuda_only_rewrites(ctx, data)
        if not more:
            break
        frozen = frozen | more
    if not any(r.action == "rewrite" for r in ctx._records):
        return SourceResult(code, ctx.findings())  # rules change code only through rewrite()
    if ctx.needs_runtime and not ctx.resolver.imports_of("porter_runtime"):
        new_module = imports.add_runtime_import(new_module, runtime_bootstrap)
    new_module = imports.remove_unused(new_module, ctx)
    new_module = probes.remove_dead(new_module, ctx, options.ledger)
    # findings last: removing a dead probe is reported too
    return SourceResult(new_module.bytes, ctx.findings(), ctx.needs_runtime)


def cuda_only_rewrites(ctx: FileContext, data: bytes) -> frozenset[cst.CSTNode]:
    """The rewritten nodes that lie in code only run where CUDA is (porter.guards), under
    a guard no rule ported: issue 14's "no rewrite inside code that only runs on CUDA,
    unless its guard is ported too". Import guards (``try: import flash_attn``) don't
    count: porting the import is porting the guard."""
    nodes = [n for n in ctx.rewritten if n not in ctx.frozen]
    if not nodes or b"cuda" not in data:
        return frozenset()
    from porter.guards import cuda_regions, guard_ported, parse

    tree = parse(data)
    regions = [r for r in cuda_regions(tree, data) if r.kind == "device"] if tree is not None else []
    if not regions:
        return frozenset()
    missing = [n for n in nodes if n not in ctx.located]
    if missing:
        ctx.located.update(locate(ctx.module, missing))
    ranges = ctx.located
    line = ctx.reduced.original_line if ctx.reduced is not None else (lambda n: n)
    where = {n: ((line(ranges[n].start.line), ranges[n].start.column), (line(ranges[n].end.line), ranges[n].end.column))
             for n in nodes if n in ranges}
    open_regions = [r for r in regions if not guard_ported(r, (start for start, _ in where.values()))]
    return frozenset(n for n, span in where.items() if any(r.encloses(span) for r in open_regions))


#: LibCST parses at roughly 100 KB/s on a slow machine: a multi-megabyte generated file
#: would take minutes. Larger files that need porting are reported instead.
MAX_PARSE_BYTES = 1_000_000


def migrate_text(data: bytes, options: Options, *, path: str) -> SourceResult:
    """Apply the text rules matching ``path``'s name to a non-Python file's bytes."""
    name = path.rsplit("/", 1)[-1]
    rules = [r for r in options.text_rules_for(name) if all(w.encode() in data for w in r.words)]
    if not rules:
        return SourceResult(data, [])
    bom = data.startswith(b"\xef\xbb\xbf")
    text = data[3 if bom else 0:].decode("utf-8")
    findings: list[Finding] = []
    for rule_class in rules:
        rule = rule_class(path)
        rule.dependencies = options.dependencies
        text = rule.check(text)
        findings += [
            Finding(rule.code, rule.name, path, f.line, f.column, "rewrite" if f.rewrite else "review",
                    f.message, f.before, f.after, f.suggestion)
            for f in rule.findings
        ]
    findings.sort(key=lambda f: (f.line, f.column, f.code))
    return SourceResult((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"), findings)


def process_file(path: Path, rel: str, options: Options, bootstrap: Union[None, str, "LazyBootstrap"]) -> FileResult:
    """Migrate one file, then account for its CUDA touchpoints (porter.ledger)."""
    result = _process_file(path, rel, options, bootstrap)
    if rel.endswith(".py") and result.status != "error":
        add_ledger(result, path, options.for_path(rel))
    return result


def add_ledger(result: FileResult, path: Path, options: Options) -> None:
    """Fill ``result.ledger``; with the catch-all rule selected, one finding per
    touchpoint nothing accounts for."""
    context = options.ledger if options.ledger is not None else ledger.TreeContext()
    try:
        data = result.old if result.old is not None else path.read_bytes()
        result.ledger = ledger.account(data, result.path, result.findings, context, _ignore_comments(data), result.new)
    except Exception as exc:  # a bug in porter: say so for this file, go on
        result.findings = result.findings + [ledger.scan_failure(result.path, exc)]
        return
    if any(r.code == ledger.CODE for r in options.rules):
        extra = ledger.catch_all(result.path, data, result.ledger)
        if extra:
            result.findings = sorted(result.findings + extra, key=lambda f: (f.line, f.column, f.code))


def ledger_source(data: bytes, path: str = "<string>") -> SourceResult:
    """The catch-all's findings for one file's bytes, no other rule run (its examples)."""
    touchpoints = ledger.account(data, path, (), ledger.TreeContext(), _ignore_comments(data))
    return SourceResult(data, ledger.catch_all(path, data, touchpoints))


def _process_file(path: Path, rel: str, options: Options, bootstrap: Union[None, str, "LazyBootstrap"]) -> FileResult:
    """Migrate one file; every failure becomes a per-file error, never an exception."""
    options = options.for_path(rel)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return FileResult(rel, "error", error=f"cannot read: {exc.strerror or exc}")
    if rel.endswith(".ipynb"):  # code cells one by one (porter.notebook)
        from porter.notebook import process_notebook

        return process_notebook(path, data, rel, options, bootstrap)
    if not rel.endswith(".py"):
        return _process_text(data, rel, options)
    # Undecodable bytes are reported for every file: a binary or mis-encoded file
    # is worth knowing about. A syntax error only where the file is parsed, i.e.
    # where something could need porting.
    problem = decode_error(data)
    if problem:
        return FileResult(rel, "error", error=problem)
    existing = _RUNTIME_IMPORT.search(data)
    uses_runtime = existing is not None
    runtime_from = (existing.group(1) or b"").decode("ascii", "replace") if existing else ""
    if len(data) > MAX_PARSE_BYTES:  # before any parse: a 50 MB file costs nothing
        if not byte_candidates(data, options.source_rules):
            return FileResult(rel, "unchanged", uses_runtime=uses_runtime, runtime_from=runtime_from)
        return FileResult(rel, "error", error=(
            f"{len(data) / 1e6:.1f} MB: larger than the {MAX_PARSE_BYTES / 1e6:.0f} MB porter parses "
            "(a generated file?); port it by hand or split it"))
    rules, facts = candidate_rules(data, options.source_rules)
    if not rules:
        return FileResult(rel, "unchanged", uses_runtime=uses_runtime, runtime_from=runtime_from)
    if facts is None:  # LibCST accepts some code this Python rejects: never rewrite that
        problem = python_syntax_error(data)
        if problem:
            return FileResult(rel, "error", error=problem)
    try:
        result = migrate_source(data, options, path=rel, runtime_bootstrap=bootstrap, candidates=(rules, facts))
    except cst.ParserSyntaxError as exc:
        return FileResult(rel, "error", error=describe_syntax_error(exc, data))
    except RecursionError:
        return FileResult(rel, "error", error="too deeply nested for the parser; left untouched")
    except Exception as exc:  # a bug in porter: report it for this file, go on
        return FileResult(rel, "error", error=f"internal error: {type(exc).__name__}: {exc}")
    if data.endswith(b"\r") and not result.new.endswith((b"\r", b"\n")):
        result.new += b"\r"  # LibCST drops the last newline of a CR-only file
    if result.new == data:
        return FileResult(rel, "unchanged", findings=result.findings, uses_runtime=uses_runtime,
                          runtime_from=runtime_from)
    if result.needs_runtime:
        line = binds_runtime_name(data)
        if line:  # its own porter_runtime would shadow the import: report, don't rewrite
            return FileResult(rel, "unchanged", findings=_not_rewritten(result.findings, line),
                              uses_runtime=uses_runtime, runtime_from=runtime_from)
    problem = compile_error(result.new, data, rel)
    if problem:
        return FileResult(rel, "error", error=problem)
    folder, package, note = _runtime_home(bootstrap, rel)
    return FileResult(rel, "changed", findings=result.findings, old=data, new=result.new,
                      uses_runtime=uses_runtime or result.needs_runtime, runtime_from=runtime_from,
                      runtime_folder=folder, runtime_package=package, runtime_note=note)


def binds_runtime_name(data: bytes) -> int:
    """The line where the module binds ``porter_runtime`` itself (a variable, an import
    under that name, a parameter, a ``global``, a def), or 0."""
    if b"porter_runtime" not in data:
        return 0
    import ast

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return 0
    name = "porter_runtime"
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            return node.lineno
        if isinstance(node, ast.arg) and node.arg == name:
            return node.lineno
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return node.lineno
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node.lineno
        if isinstance(node, ast.ExceptHandler) and node.name == name:
            return node.lineno
        if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name == name:
            return node.lineno
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.asname == name or (alias.asname is None and alias.name.split(".")[0] == name
                                            and isinstance(node, ast.ImportFrom) and node.module is None):
                    return node.lineno
    return 0


def _not_rewritten(findings: list[Finding], line: int) -> list[Finding]:
    import dataclasses

    why = (f"not rewritten: this file binds the name porter_runtime itself (line {line}), which would shadow "
           "the runtime import; rename it and run porter again")
    return [dataclasses.replace(f, action="review", message=f"{why}. {f.message}",
                                suggestion=f.suggestion or (f"{f.before} -> {f.after}" if f.after else ""))
            if f.action == "rewrite" else f for f in findings]


def compile_error(new: bytes, old: bytes, rel: str) -> str:
    """Why the ported bytes don't compile (porter never writes such a file), or ""."""
    import warnings

    def error(data: bytes) -> str:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(data, rel, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return f"{exc.msg} (line {exc.lineno})"
        except (ValueError, RecursionError, MemoryError) as exc:
            return str(exc) or type(exc).__name__
        return ""

    problem = error(new)
    if not problem:
        return ""
    original = error(old)
    if original:
        return f"does not compile: {original}; left untouched"
    return f"internal error: the ported file would not compile ({problem}); left untouched"


#: ``import porter_runtime``, ``from porter_runtime import x`` or ``from pkg import porter_runtime``
_RUNTIME_IMPORT = re.compile(
    rb"^[ \t]*(?:import[ \t]+porter_runtime\b|from[ \t]+porter_runtime\b|from[ \t]+([\w.]+)[ \t]+import[ \t]*"
    rb"(?:\([^)]*|[^#\n]*)\bporter_runtime\b)", re.M)


def _process_text(data: bytes, rel: str, options: Options) -> FileResult:
    try:
        result = migrate_text(data, options, path=rel)
    except UnicodeDecodeError as exc:
        return FileResult(rel, "error", error=f"cannot decode as utf-8: byte 0x{data[exc.start]:02x}")
    except Exception as exc:  # a bug in porter: report it for this file, go on
        return FileResult(rel, "error", error=f"internal error: {type(exc).__name__}: {exc}")
    if result.new == data:
        return FileResult(rel, "unchanged", findings=result.findings)
    return FileResult(rel, "changed", findings=result.findings, old=data, new=result.new)


class LazyBootstrap:
    """How one file imports the runtime (porter.runtime_home), worked out only if the
    file needs the import (a few files of a large tree). No ``sys.path`` code: the name
    is kept for the engine's callers."""

    def __init__(self, file: Path, layout: "Layout") -> None:
        self.file = file
        self.layout = layout
        self.home: Optional["Home"] = None
        self.note = ""

    @property
    def first_party(self) -> frozenset:
        """isort's first-party names, once the copy this file imports exists."""
        return self.layout.first_party_for(self.home) if self.home is not None else self.layout.first_party

    def __call__(self, imported: Iterable[str] = ()) -> "Home":
        self.home, self.note = self.layout.home_for(self.file, imported)
        return self.home


def _runtime_home(bootstrap: Union[None, str, LazyBootstrap], rel: str) -> tuple[str, str, str]:
    """(home folder relative to the root, its package, note) of the copy a file now imports."""
    if not isinstance(bootstrap, LazyBootstrap) or bootstrap.home is None:
        return "", "", ""
    home = bootstrap.home
    folder = os.path.relpath(home.folder, bootstrap.layout.root).replace(os.sep, "/")
    return folder, home.package, bootstrap.note
