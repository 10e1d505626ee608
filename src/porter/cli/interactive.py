"""``porter migrate --interactive``: review each change like ``git add -p``.

Each rewritten region of a Python file is one hunk, shown with its rule codes and
messages; the answer is y (apply), n (skip), a (apply this and every later hunk of the
same rules) or q (stop: skip this and everything after). Only then is anything written.

How the accepted hunks become a file: the diff is taken between the original and the
migrated text with the runtime import taken out; accepted hunks take the new lines,
skipped ones keep the old. The runtime import is put back (where the engine puts it)
when an accepted line uses ``porter_runtime``. Imports the migration dropped as unused
are dropped only when every hunk of the file was accepted, since a skipped hunk may
still use them. A combination that Python can't parse is not written, and said so.
Notebooks and non-Python files are one hunk per file.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import click
import libcst as cst

from porter.cli.terminal_text import paint
from porter.edits.runtime_import import add_runtime_import
from porter.files.apply import Change, unified_diff
from porter.files.sources import python_syntax_error, source_encoding
from porter.project.vendoring.runtime_home import LazyBootstrap
from porter.rulebase.rule import Finding

_IMPORT = re.compile(r"^\s*(?:from\s+[\w.]+\s+)?import\s")
_IMPORT_TAIL = re.compile(r"^\s*[\w, ]+\)?\s*$")  # the lines of a parenthesised from-import
_RUNTIME = re.compile(r"^\s*(?:import porter_runtime\b|from\s+[\w.]+\s+import\s*(?:\([^)]*|[^#\n]*)\bporter_runtime\b)", re.M)


@dataclass
class Hunk:
    path: str
    display: str
    findings: list[Finding] = field(default_factory=list)
    ops: list[int] = field(default_factory=list)  # indexes into the file's opcodes

    @property
    def codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})


@dataclass
class FilePlan:
    """One changed file split into hunks, and what it takes to put accepted ones together."""

    change: Change
    hunks: list[Hunk]
    encoding: str = "utf-8"
    old_lines: list[str] = field(default_factory=list)
    new_lines: list[str] = field(default_factory=list)
    opcodes: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    glue: list[int] = field(default_factory=list)  # import clean-ups: all-or-nothing
    stripped_import: bool = False


# -- splitting ---------------------------------------------------------------------

def plan(change: Change, findings: list[Finding], display_whole: Callable[[Change], str]) -> FilePlan:
    """The hunks of one change (a whole-file hunk for notebooks and non-Python files)."""
    rewrites = [f for f in findings if f.action == "rewrite"]
    if not change.path.endswith(".py") or change.old is None:
        return FilePlan(change, [Hunk(change.path, display_whole(change), rewrites)])
    encoding = source_encoding(change.old)
    old = change.old.decode(encoding, errors="surrogateescape")
    new, stripped = _without_runtime_import(change.new, old)
    new_text = new.decode(encoding, errors="surrogateescape")
    file = FilePlan(change, [], encoding, old.splitlines(keepends=True), new_text.splitlines(keepends=True),
                    stripped_import=stripped)
    matcher = difflib.SequenceMatcher(None, file.old_lines, file.new_lines, autojunk=False)
    file.opcodes = matcher.get_opcodes()
    for i, (tag, i1, i2, j1, j2) in enumerate(file.opcodes):
        if tag == "equal":
            continue
        if _is_import_cleanup(file.old_lines[i1:i2], file.new_lines[j1:j2]):
            file.glue.append(i)
            continue
        file.hunks.append(Hunk(change.path, _show(file, i), _owners(rewrites, i1, i2), [i]))
    _adopt_orphans(file, rewrites)
    return file


def _is_import_cleanup(old: list[str], new: list[str]) -> bool:
    lines = old + new
    return any(_IMPORT.match(line) for line in old) and all(
        _IMPORT.match(line) or _IMPORT_TAIL.match(line) for line in lines)


def _owners(rewrites: list[Finding], i1: int, i2: int) -> list[Finding]:
    return [f for f in rewrites if i1 < f.line <= max(i2, i1 + 1)]


def _adopt_orphans(file: FilePlan, rewrites: list[Finding]) -> None:
    """A hunk with no finding on its lines (the tail of a multi-line rewrite) is shown
    with the findings of the nearest rewrite above it."""
    for hunk in file.hunks:
        if hunk.findings:
            continue
        start = file.opcodes[hunk.ops[0]][1] + 1
        above = [f for f in rewrites if f.line <= start]
        if above:
            last = max(f.line for f in above)
            hunk.findings = [f for f in above if f.line == last]


def _show(file: FilePlan, index: int, context: int = 3) -> str:
    _, i1, i2, j1, j2 = file.opcodes[index]
    lines = [f"@@ {file.change.path}:{i1 + 1} @@\n"]
    lines += [" " + line for line in file.old_lines[max(0, i1 - context):i1]]
    lines += ["-" + line for line in file.old_lines[i1:i2]]
    lines += ["+" + line for line in file.new_lines[j1:j2]]
    lines += [" " + line for line in file.old_lines[i2:i2 + context]]
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _without_runtime_import(new: bytes, old: str) -> tuple[bytes, bool]:
    """The migrated file without the runtime import the engine added, if it added one."""
    if _RUNTIME.search(old) or b"porter_runtime" not in new:
        return new, False
    module = cst.parse_module(new)
    body = list(module.body)
    for i, stmt in enumerate(body):
        if _is_runtime_import(module.code_for_node(stmt)):
            removed = body.pop(i)
            if i < len(body):  # the next statement gets back the blank lines it had
                original = _original_body(old)
                if original is not None and len(original) == len(body):
                    body[i] = body[i].with_changes(leading_lines=original[i].leading_lines)
                elif not body[i].leading_lines:
                    body[i] = body[i].with_changes(leading_lines=removed.leading_lines)
            return module.with_changes(body=body).bytes, True
        original = _without_runtime_name(stmt)
        if original is not None:  # ``from mypkg import a, porter_runtime``: the name alone goes
            body[i] = original
            return module.with_changes(body=body).bytes, True
    return new, False


def _without_runtime_name(stmt) -> Optional["cst.SimpleStatementLine"]:
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.ImportFrom) and isinstance(stmt.body[0].names, (list, tuple))):
        return None
    names = list(stmt.body[0].names)
    at = next((n for n, a in enumerate(names) if isinstance(a.name, cst.Name) and a.name.value == "porter_runtime"
               and a.asname is None), None)
    if at is None or len(names) < 2:
        return None
    removed = names.pop(at)
    if at == len(names):  # it was last: the new last name takes its (trailing) comma
        names[-1] = names[-1].with_changes(comma=removed.comma)
    return stmt.with_changes(body=[stmt.body[0].with_changes(names=names)])


def _original_body(old: str):
    try:
        return list(cst.parse_module(old).body)
    except cst.ParserSyntaxError:
        return None


def _is_runtime_import(code: str) -> bool:
    first = code.strip().splitlines()[0] if code.strip() else ""
    return first == "import porter_runtime" or (first.startswith("from ") and first.endswith(" import porter_runtime"))


# -- putting together ----------------------------------------------------------------

def assemble(file: FilePlan, accepted: set[int], bootstrap=None) -> tuple[Optional[bytes], str]:
    """The file's bytes with the accepted hunks only (None: leave the file), and a note."""
    if not file.opcodes:  # a whole-file hunk
        return (file.change.new if accepted else None), ""
    if not accepted:
        return None, ""
    taken = {op for i in accepted for op in file.hunks[i].ops}
    if len(accepted) == len(file.hunks):
        taken |= set(file.glue)
    out: list[str] = []
    for index, (tag, i1, i2, j1, j2) in enumerate(file.opcodes):
        out += file.new_lines[j1:j2] if tag != "equal" and index in taken else file.old_lines[i1:i2]
    data = "".join(out).encode(file.encoding, errors="surrogateescape")
    if file.stripped_import and b"porter_runtime" in data:
        data = add_runtime_import(cst.parse_module(data), bootstrap).bytes
    problem = python_syntax_error(data)
    if problem:
        return None, f"{file.change.path}: the accepted hunks don't make valid Python ({problem}); left unchanged"
    return (None if data == file.change.old else data), ""


# -- the conversation ------------------------------------------------------------------

_HELP = """y - apply this change
n - skip this change
a - apply this change and every later change of the same rule(s)
q - quit: skip this change and all the rest (what was accepted is still written)
"""


def review(plans: list[FilePlan], echo=click.echo, ask=None) -> list[set[int]]:
    """Ask about every hunk; the accepted hunk indexes, per file."""
    ask = ask or (lambda text: click.prompt(text, default="", show_default=False, prompt_suffix=" "))
    always: set[str] = set()
    answers: list[set[int]] = [set() for _ in plans]
    total = sum(len(p.hunks) for p in plans)
    seen = 0
    for n, file in enumerate(plans):
        for i, hunk in enumerate(file.hunks):
            seen += 1
            if hunk.codes and set(hunk.codes) <= always:
                answers[n].add(i)
                continue
            _display(hunk, echo)
            answer = _ask(ask, f"({seen}/{total}) Apply this change [y,n,a,q,?]?", echo)
            if answer == "q":
                return answers
            if answer in ("y", "a"):
                answers[n].add(i)
            if answer == "a":
                always.update(hunk.codes)
    return answers


def _ask(ask, text: str, echo) -> str:
    while True:
        try:
            answer = ask(paint(text, fg="blue", bold=True)).strip().lower()[:1]
        except (click.Abort, EOFError):  # input ran out: stop like q
            echo("")
            return "q"
        if answer in ("y", "n", "a", "q"):
            return answer
        echo(paint(_HELP, fg="red", bold=True))


def _display(hunk: Hunk, echo) -> None:
    for finding in hunk.findings:
        echo(paint(f"{finding.code} ", bold=True) + paint(finding.rule, fg="yellow")
             + f": {finding.message}")
    colours = {"+": "green", "-": "red", "@": "cyan"}
    for line in hunk.display.splitlines():
        echo(paint(line, fg=colours.get(line[:1])) if line[:1] in colours else line)


def written(result, sources: list[Change], accepted: list[Change], answers: list[set[int]],
            plans: list[FilePlan], failed: set[str]) -> str:
    """Mark in ``result`` what was written (a file not written is unchanged, as the
    report must tell), and say it in one line: files and changes written, of those proposed."""
    wrote = {c.path for c in accepted if c.path not in failed}
    for item in result.files:
        if item.status == "changed" and item.path not in wrote:
            item.status = "unchanged"
    files = sum(1 for c in sources if c.path in wrote)
    hunks = sum(len(chosen) for plan, chosen in zip(plans, answers) if plan.change.path in wrote)
    proposed = sum(len(plan.hunks) for plan in plans)
    return (f"wrote {files} file{'s' if files != 1 else ''} ({hunks} of {proposed} "
            f"change{'s' if proposed != 1 else ''} accepted and written; {len(sources)} files had changes)")


def whole_file_display(change: Change) -> str:
    if change.path.endswith(".ipynb") and change.old is not None:
        from porter.engine.stages.notebook import cell_diff

        return cell_diff(change.path, change.old, change.new)
    return unified_diff(change).decode("utf-8", errors="replace")


def bootstrap_for(root: Path, rel: str, layout):
    """How the file imports the runtime (porter.project.vendoring.runtime_home), for the accepted hunks."""
    return LazyBootstrap(root / rel, layout)
