"""``porter migrate -``: one file's source from stdin, the result on stdout, as ruff and
black take ``-``.

The name the source goes by (``--stdin-filename``, else ``-``, taken as Python) picks
the settings file, the rules and the stage, and is the name in every message. stdout
gets the ported source (the source as it came when nothing changes, or when it could
not be ported), or the diff with ``--diff``, nothing with ``--check``, the report with a
machine ``--output-format``. The lines for people go to stderr as for files. Nothing is
written and the runtime is never vendored: the tree's own run does that.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from porter.cli import migrate_inputs as inputs
from porter.cli.command_inputs import InputError, check_layout, load_settings, make_run_config, or_input_error
from porter.cli.migrate_output import emit, write_reports
from porter.cli.terminal_text import colour_wanted, shown
from porter.report import output_formats
from porter.report import summary as reporting

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
    from porter.engine.run import run_source
    from porter.files.apply import Change, colourise, unified_diff

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

