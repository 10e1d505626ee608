"""How ``porter migrate`` runs: each file's changes streamed to stdout (``--diff``) and
to disk (``--write``) as they come, or gathered for the interactive review
(``--interactive``) and written once accepted; a progress bar on a terminal; or one
file's source from stdin (``-``), the result on stdout.

In the diff, the user's own files come first, the runtime's last, then the notebooks
(whole-file JSON diffs under one split line, their cells one by one on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

import click

from porter.cli import migrate_inputs as inputs
from porter.cli.command_inputs import InputError, check_layout, load_settings, make_run_config, or_input_error
from porter.cli.migrate_output import emit, print_notebook_views, write_reports
from porter.cli.terminal_text import colour_wanted, is_terminal, shown
from porter.engine.run import RunConfig, run, run_source
from porter.files.apply import Change, apply_changes, colourise, unified_diff
from porter.report import output_formats
from porter.report import summary as reporting


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


# -- porter migrate -: one file's source from stdin ----------------------------------
#
# As ruff and black take ``-``. The name the source goes by (``--stdin-filename``, else
# ``-``, taken as Python) picks the settings file, the rules and the stage, and is the
# name in every message. stdout gets the ported source (the source as it came when
# nothing changes, or when it could not be ported), or the diff with ``--diff``, nothing
# with ``--check``, the report with a machine ``--output-format``. The lines for people
# go to stderr as for files. Nothing is written and the runtime is never vendored: the
# tree's own run does that.

STDIN = Path("-")


def check_flags(flags) -> None:
    """Refuse what ``-`` can't go with: other paths, a review, a copy of the tree."""
    if len(flags.paths) > 1:
        raise click.UsageError("'-' (the source on stdin) can't be combined with other paths")
    for given, flag in ((flags.interactive, "--interactive"), (flags.out_dir is not None, "--out")):
        if given:
            raise click.UsageError(f"'-' (the source on stdin) can't be combined with {flag}")


def migrate_stdin(console, flags) -> int:
    """The run on stdin's source; its exit code (0, 1 as --check decides, 2 a failure)."""
    check_flags(flags)
    data = sys.stdin.buffer.read()
    path = _path(flags)
    root = or_input_error(inputs.project_root, [path if flags.stdin_filename else Path(".")], flags.root)
    path = path.absolute() if flags.stdin_filename else root / "-"
    if not path.resolve().is_relative_to(root.resolve()):
        raise InputError(f"--stdin-filename {shown(str(flags.stdin_filename))}: is outside the root "
                         f"{shown(str(root))}: pass --root")
    settings = load_settings(root, flags.config_file, [path])
    config = make_run_config([path], root, settings, runtime_dir=flags.runtime_dir, unsafe_fixes=flags.unsafe_fixes,
                             jobs=1, **flags.rule_and_path_flags())
    check_layout(config)
    if _excluded(flags, settings, path, root):
        sys.stdout.buffer.write(data)  # as ruff: an excluded name passes through unchanged
        return 0
    result = run_source(config, path, data)
    item = result.files[0]
    new = item.new if item.status == "changed" and item.new is not None else data
    if item.status == "changed" and b"porter_runtime" in new:
        result.notes.append("the ported source imports porter_runtime, which a run on stdin never vendors: "
                            "`porter migrate --write` on the tree does")
    mode = "check" if flags.check else "diff" if flags.show_diff else "dry-run"
    report = reporting.build(result, mode)
    write_reports(report, flags.reports)
    machine = flags.format in output_formats.MACHINE
    if not machine:
        if flags.show_diff:
            if new != data:
                out = unified_diff(Change(item.path, data, new))
                sys.stdout.buffer.write(colourise(out) if colour_wanted(sys.stdout) else out)
        elif not flags.check:
            sys.stdout.buffer.write(new)
        sys.stdout.flush()
    emit(report, flags.format, flags.quiet, console)
    if item.status == "error":
        return 2
    if flags.check and (item.status == "changed" or (flags.fail_on == "any" and result.reviews)):
        return 1
    return 0


def _path(flags) -> Path:
    return Path(flags.stdin_filename) if flags.stdin_filename else STDIN


def _excluded(flags, settings, path: Path, root: Path) -> bool:
    """Whether ``--force-exclude`` (or the setting) drops the name, as for a file named."""
    if not flags.stdin_filename:
        return False
    if not (flags.force_exclude if flags.force_exclude is not None else settings.force_exclude):
        return False
    globs = inputs.exclude_globs(settings, flags.exclude, flags.extend_exclude, root)
    return not inputs.force_excluded([path], root, globs)

