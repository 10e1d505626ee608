"""The Python-source stage: one ``.py`` file's bytes through the rules and back.

``migrate_source`` turns one file's bytes into new bytes plus findings; it is pure (no
I/O), so it is what the rule-example tests call. ``process_python`` wraps it with the
checks a run needs (size, syntax, a file that binds ``porter_runtime`` itself, ported
code that must compile) and the ledger of the file's CUDA touchpoints, and returns a
picklable :class:`FileResult`. Notebooks use ``migrate_source`` cell by cell.

Cost control: ``porter.engine.prefilter`` decides from the bytes, then from the stdlib ``ast``,
which rules can match a file (most files stop there); ``porter.engine.stages.segments`` then hands
LibCST only the definitions some rule wants, the others as one-line stubs.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
import warnings
from typing import Callable, Optional, Sequence, Union

import libcst as cst

from porter.edits import probes
from porter.edits.roundtrip import restore_untouched
from porter.edits.runtime_import import add_runtime_import
from porter.edits.unused_imports import remove_unused
from porter.engine.stages.context import ignore_comments
from porter.engine.stages.notes import cuda_only_notes, module_notes, opt_in_notes, restated_touchpoints
from porter.engine.options import Options
from porter.engine.prefilter import SyntaxFacts, byte_candidates, candidate_rules
from porter.engine.results import FileResult, SourceResult
from porter.engine.stages.rule_pass import run_rules
from porter.engine.stages.segments import Reduced, reduce
from porter.files.sources import (
    codec_error,
    decode_error,
    describe_syntax_error,
    python_syntax_error,
)
from porter.project.touchpoints import ledger
from porter.project.vendoring.runtime_home import LazyBootstrap, runtime_home_fields
from porter.rulebase.cuda_packages import is_cuda_only_module
from porter.rulebase.rule import RUNTIME, Finding, Rule, WholeFile

#: Set to "0" to parse every file whole (porter.engine.stages.segments); the output is the same.
SEGMENTS_ENV = "PORTER_SEGMENTS"


def migrate_source(
    data: bytes,
    options: Options,
    *,
    path: str = "<string>",
    runtime_bootstrap: Union[None, str, LazyBootstrap] = None,
    candidates: Optional[tuple[list[type[Rule]], Optional[SyntaxFacts]]] = None,
    segments: Optional[bool] = None,
) -> SourceResult:
    """Apply the rules to one file's bytes (:func:`_migrate_source`); findings in code
    that only runs where CUDA is become notes (porter.engine.stages.notes)."""
    result = _migrate_source(data, options, path=path, runtime_bootstrap=runtime_bootstrap,
                             candidates=candidates, segments=segments)
    keep = {r.code for r in options.source_rules if r.device_split}
    project = options.project
    restating = {r.code for r in options.source_rules if r.restates_requirement}
    result.findings = cuda_only_notes(result.findings, data, keep, restating=restating,
                                      never_runs=project.never_runs_here(path) if project is not None else "",
                                      cuda_module=cuda_only_outside(project), ported=result.new)
    if project is not None:
        result.findings = opt_in_notes(result.findings, data, project.opt_in_options)
    return result


def _migrate_source(
    data: bytes,
    options: Options,
    *,
    path: str = "<string>",
    runtime_bootstrap: Union[None, str, LazyBootstrap] = None,
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
    rules, facts = candidates if candidates is not None else project_candidates(data, options, path)
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
    facts: Optional[SyntaxFacts], runtime_bootstrap: Union[None, str, LazyBootstrap], reduced: Optional[Reduced],
) -> SourceResult:
    """The rule pass over ``code`` (``data`` itself, or its reduction), then the
    import changes its rewrites call for."""
    module = cst.parse_module(code)
    new_module, ctx = run_rules(module, data, path, options, rules, facts, reduced)
    if not ctx.rewrites():
        return SourceResult(code, ctx.findings())  # rules change code only through rewrite()
    # the rewrites call ``porter_runtime.X``: the name itself must be bound (an
    # ``import porter_runtime as pr`` of the file's own binds only ``pr``)
    # ``needs_runtime`` is set when a rule builds a runtime call, even one it then reports
    # instead of applying: the import comes only for a call the new code holds (based's
    # slide_attention.py got an unused one once another rule's rewrite made the file change)
    if ctx.needs_runtime and not ctx.resolver.binds_name_to(RUNTIME, RUNTIME) and ctx.rewrites_name(RUNTIME):
        new_module = add_runtime_import(new_module, runtime_bootstrap)
    new_module = remove_unused(new_module, ctx)
    new_module = probes.remove_dead(new_module, ctx, options.ledger)
    new = restore_untouched(code, module.bytes, new_module.bytes)
    # findings last: removing a dead probe is reported too
    return SourceResult(new, ctx.findings(), ctx.needs_runtime)


def project_candidates(data: bytes, options: Options, path: str) -> tuple[list[type[Rule]], Optional[SyntaxFacts]]:
    """``candidate_rules``, except that with a project model (porter.project) the rules
    that declare ``needs.project`` are in or out as the model says of ``path``."""
    if options.project is None:
        return candidate_rules(data, options.source_rules)
    rules, facts = candidate_rules(data, [r for r in options.source_rules if r.needs.project is None])
    extra = _project_rules(options, path)
    if not extra:
        return rules, facts
    return [r for r in options.source_rules if r in rules or r in extra], facts


def _project_rules(options: Options, path: str) -> list[type[Rule]]:
    if options.project is None:
        return []
    return [r for r in options.source_rules if r.needs.project is not None and r.needs.project(options.project, path)]


#: LibCST parses at roughly 100 KB/s on a slow machine: a multi-megabyte generated file
#: would take minutes. Larger files that need porting are reported instead.
MAX_PARSE_BYTES = 1_000_000


def process_python(data: bytes, rel: str, options: Options, bootstrap: Union[None, str, LazyBootstrap]) -> FileResult:
    """Migrate one Python file, then account for its CUDA touchpoints (porter.project.touchpoints.ledger)."""
    result = _port(data, rel, options, bootstrap)
    if result.status != "error":
        add_ledger(result, data, options)
    return result


def _port(data: bytes, rel: str, options: Options, bootstrap: Union[None, str, LazyBootstrap]) -> FileResult:
    """Migrate one Python file; every failure becomes a per-file error, never an exception."""
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
        if not byte_candidates(data, options.source_rules) and not _project_rules(options, rel):
            return FileResult(rel, "unchanged", uses_runtime=uses_runtime, runtime_from=runtime_from)
        return FileResult(rel, "error", error=(
            f"{len(data) / 1e6:.1f} MB: larger than the {MAX_PARSE_BYTES / 1e6:.0f} MB porter parses "
            "(a generated file?); port it by hand or split it"))
    rules, facts = project_candidates(data, options, rel)
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
            return FileResult(rel, "unchanged", findings=not_rewritten(result.findings, line),
                              uses_runtime=uses_runtime, runtime_from=runtime_from)
    problem = codec_error(data) or compile_error(result.new, data, rel)
    if problem:
        return FileResult(rel, "error", error=problem)
    folder, package, note = runtime_home_fields(bootstrap, rel)
    return FileResult(rel, "changed", findings=result.findings, old=data, new=result.new,
                      uses_runtime=uses_runtime or result.needs_runtime, runtime_from=runtime_from,
                      runtime_folder=folder, runtime_package=package, runtime_note=note)


def add_ledger(result: FileResult, data: bytes, options: Options) -> None:
    """Fill ``result.ledger`` (``data``: the file's bytes before migration); with the
    catch-all rule selected, one finding per touchpoint nothing accounts for."""
    context = options.ledger if options.ledger is not None else ledger.TreeContext()
    try:
        result.ledger = ledger.account(data, result.path, result.findings, context, ignore_comments(data), result.new)
    except Exception as exc:  # a bug in porter: say so for this file, go on
        result.findings = result.findings + [ledger.scan_failure(result.path, exc)]
        return
    if any(r.code == ledger.CODE for r in options.rules):
        extra = ledger.catch_all(result.path, data, result.ledger)
        project = options.project
        extra = restated_touchpoints(extra, data, {f.line for f in result.findings if f.action == "rewrite"},
                                     cuda_only_outside(project), result.new)
        if extra and project is not None:  # a module that never runs off CUDA, as in migrate_source
            extra = opt_in_notes(module_notes(extra, project.never_runs_here(result.path)), data,
                                 project.opt_in_options)
        if extra:
            result.findings = sorted(result.findings + extra, key=lambda f: (f.line, f.column, f.code))


def cuda_only_outside(project) -> Callable[[str], bool]:
    """Whether an import of a dotted name is of a CUDA-only package the tree does not itself
    provide (ProjectModel.provides: Liger-Kernel's own ``liger_kernel``)."""
    if project is None:
        return is_cuda_only_module
    return lambda module: is_cuda_only_module(module) and not project.provides(module)


def ledger_source(data: bytes, path: str = "<string>") -> SourceResult:
    """The catch-all's findings for one file's bytes, no other rule run (its examples)."""
    touchpoints = ledger.account(data, path, (), ledger.TreeContext(), ignore_comments(data))
    return SourceResult(data, ledger.catch_all(path, data, touchpoints))


def binds_runtime_name(data: bytes) -> int:
    """The line where the module binds ``porter_runtime`` itself (a variable, an import
    under that name, a parameter, a ``global``, a def), or 0."""
    if b"porter_runtime" not in data:
        return 0
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


def not_rewritten(findings: list[Finding], line: int, why: str = "") -> list[Finding]:
    """The findings with every rewrite turned into one for a human, saying ``why`` (by
    default: the file binds porter_runtime itself at ``line``)."""
    why = why or (f"not rewritten: this file binds the name porter_runtime itself (line {line}), which would "
                  "shadow the runtime import; rename it and run porter again")
    return [dataclasses.replace(f, action="review", message=f"{why}. {f.message}",
                                suggestion=f.suggestion or (f"{f.before} -> {f.after}" if f.after else ""))
            if f.action == "rewrite" else f for f in findings]


def compile_error(new: bytes, old: bytes, rel: str) -> str:
    """Why the ported bytes don't compile (porter never writes such a file), or ""."""
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
