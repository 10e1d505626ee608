"""How ``porter migrate`` runs: each file's changes streamed to stdout (``--diff``) and
to disk (``--write``) as they come, or gathered for the interactive review
(``--interactive``) and written once accepted; a progress bar on a terminal.

In the diff, the user's own files come first, the runtime's last, then the notebooks
(whole-file JSON diffs under one split line, their cells one by one on stderr).
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

import click

from porter.cli.migrate_output import print_notebook_views
from porter.cli.terminal_text import colour_wanted, is_terminal
from porter.engine.run import RunConfig, run
from porter.files.apply import Change, apply_changes, colourise, unified_diff


def stream_changes(config: RunConfig, console, show_diff: bool, write: bool, show: bool, views: bool = True,
                   edits: Optional[dict] = None):
    """Run, each file's changes shown as a diff on stdout and written as they come; the
    result and the runtime writes that failed."""
    write_failed: list[tuple[str, str]] = []
    colour = show_diff and colour_wanted(sys.stdout)  # NO_COLOR / FORCE_COLOR, else a terminal

    runtime_diffs: list[bytes] = []  # the user's own files first, the runtime's last
    notebooks: list[bytes] = []  # then the notebooks, whole-file JSON diffs under one split line
    cell_views: list[str] = []  # and their cells one by one on stderr, for reading

    def sink(changes: Sequence[Change]) -> Optional[str]:
        for change in changes:
            if edits is not None and change.old is not None and not change.runtime:
                from porter.report.sarif_fixes import replacements

                edits[change.path] = replacements(change.old, change.new)
            if not show_diff:
                continue
            out = unified_diff(change)
            out = colourise(out) if colour else out
            if change.runtime:
                runtime_diffs.append(out)
            elif change.path.endswith(".ipynb"):
                notebooks.append(out)
                cell_views.append(_cells(change))
            else:
                sys.stdout.buffer.write(out)
        if write:
            failed = apply_changes(config.root, changes)
            if failed:
                write_failed.extend(failed)
                return failed[0][1]  # the run reports the file as failed
        return None

    result = run_with_progress(config, console, sink, show=show)
    for out in runtime_diffs:
        sys.stdout.buffer.write(out)
    if notebooks:  # git apply passes over a line outside a patch; people see where notebooks start
        sys.stdout.buffer.write(NOTEBOOK_SPLIT + b"".join(notebooks))
    sys.stdout.flush()
    if views:
        print_notebook_views([v for v in cell_views if v], console)
    # Failed source writes are file errors in the result; only the runtime's are left.
    reported = {f.path for f in result.errors}
    return result, [(path, error) for path, error in write_failed if path not in reported]


NOTEBOOK_SPLIT = b"# porter: notebooks (.ipynb) below, as whole-file JSON diffs; their cells one by one are on stderr\n"


def _cells(change: Change) -> str:
    """A notebook's code cells one by one (porter.engine.stages.notebook), for people."""
    from porter.engine.stages.notebook import cell_diff

    return cell_diff(change.path, change.old, change.new) if change.old is not None else ""


def review_and_write(config: RunConfig, console, show: bool):
    """Run, ask about each hunk, then write the accepted hunks (and the runtime they need)."""
    from porter.cli import interactive

    changes: list[Change] = []
    result = run_with_progress(config, console, changes.extend, show=show)
    findings = {f.path: f.findings for f in result.files}
    sources = [c for c in changes if c.path in findings]
    plans = [interactive.plan(c, findings[c.path], interactive.whole_file_display) for c in sources]
    answers = interactive.review(plans)
    accepted: list[Change] = []
    layout = config.layout()
    for file, chosen in zip(plans, answers):
        data, note = interactive.assemble(file, chosen, interactive.bootstrap_for(config.root, file.change.path,
                                                                              layout))
        if note:
            console.print(f"porter: {note}", markup=False, soft_wrap=True)
        if data is not None:
            accepted.append(Change(file.change.path, file.change.old, data))
    if any(b"porter_runtime" in c.new for c in accepted):
        accepted += [c for c in changes if c.path not in findings]
    if not any(c.path not in findings for c in accepted):
        result.runtime_changes, result.notes = [], []
    failed = apply_changes(config.root, accepted)
    summary = interactive.written(result, sources, accepted, answers, plans, {path for path, _ in failed})
    click.echo(summary, err=True)
    return result, failed


def run_with_progress(config: RunConfig, console, sink, show: bool):
    """The run, with a progress bar when ``show`` and stderr is a terminal (FORCE_COLOR
    colours a pipe, it does not make one a terminal). The bar appears once the number
    of files is known: never a bare ``0/?``."""
    if not (show and is_terminal(sys.stderr)):
        return run(config, sink)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn("porter"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        tasks: list = []

        def tick(done: int, total: int) -> None:
            if not tasks:  # the first tick brings the count: the bar starts there
                tasks.append(bar.add_task("files", total=total))
            bar.update(tasks[0], completed=done, total=total)

        return run(config, sink, progress=tick)
