"""``porter migrate``: its flags, the checks on them, and the run they ask for.

stdout carries only a diff or a report; everything for people (summary, findings,
progress) goes to stderr, so ``porter migrate . --diff | git apply`` just works.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

import click

from porter.cli import migrate_inputs as inputs
from porter.cli.command_inputs import InputError, check_layout, load_settings, make_run_config, or_input_error
from porter.cli.migrate_output import emit, write_reports
from porter.cli.migrate_run import STDIN, migrate_stdin, review_and_write, stream_changes
from porter.cli.terminal_text import shown, stderr_console
from porter.engine.run import RunConfig
from porter.engine.stops import STOPS, exit_code, output_failed, stop_output
from porter.report import output_formats
from porter.report import summary as reporting

EXIT_CODES = """\b
Exit codes:
  0  clean, or changes applied / shown (and always with --exit-zero, but 2)
  1  with --check: files would change or findings need a human
  2  bad input or a failure: a flag or setting porter can't use, a file it
     could not read, decode or parse, a write that failed, an internal error
130  interrupted (Ctrl-C); every file is untouched or fully written"""


@dataclass(frozen=True)
class MigrateFlags:
    """The command line of one ``porter migrate``, as click parsed it (None: not given,
    the settings decide)."""

    paths: tuple[Path, ...]
    show_diff: bool
    write: bool
    check: bool
    fail_on: str
    interactive: bool
    out_dir: Optional[Path]
    reports: tuple[Path, ...]
    output_format: Optional[str]
    old_format: Optional[str]
    exit_zero: bool
    select: tuple[str, ...]
    extend_select: tuple[str, ...]
    ignore: tuple[str, ...]
    exclude: tuple[str, ...]
    extend_exclude: tuple[str, ...]
    force_exclude: Optional[bool]
    runtime_dir: Optional[Path]
    root: Optional[Path]
    config_file: Optional[Path]
    unsafe_fixes: Optional[bool]
    full_runtime: Optional[bool]
    jobs: Optional[int]
    stdin_filename: Optional[str]
    no_progress: bool
    quiet: bool

    @property
    def format(self) -> str:
        """The ``--output-format``, the old ``--format json`` included."""
        return self.output_format or ("json" if self.old_format == "json" else "concise")

    def rule_and_path_flags(self) -> dict:
        """The flags that choose rules and paths, as ``make_run_config`` takes them."""
        return dict(select=self.select, ignore=self.ignore, exclude=self.exclude, extend_select=self.extend_select,
                    extend_exclude=self.extend_exclude)


@click.command(epilog=EXIT_CODES)
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff (git apply-able) on stdout.")
@click.option("--write", is_flag=True, help="Apply the changes in place and vendor the runtime.")
@click.option("--check", is_flag=True, help="Exit 1 when any file would change or needs review.")
@click.option("--fail-on", type=click.Choice(["any", "changes"]), default="any", show_default=True,
              help="What --check fails on: any change or finding, or only code porter would rewrite.")
@click.option("-i", "--interactive", is_flag=True,
              help="Review each change (y/n/a/q, like git add -p), then write what was accepted.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Write a ported copy of the tree (with the runtime) into DIR; the original stays as is.")
@click.option("--report", "reports", multiple=True, type=click.Path(path_type=Path),
              help="Write the migration report: FILE.md (Markdown), FILE.json or FILE.sarif (SARIF 2.1.0).")
@click.option("--output-format", "output_format", type=click.Choice(output_formats.FORMATS), default=None,
              help="concise (default): a line per file that changes and per finding; full: with the code and "
                   "suggestions; json / sarif: the report on stdout; github: workflow annotations on stdout.")
@click.option("--format", "old_format", type=click.Choice(["text", "json"]), default=None, hidden=True,
              help="The old spelling: text is --output-format concise, json is --output-format json.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when --check finds something (2 still means a failure).")
@click.option("--select", multiple=True, help="Only rules whose code starts with these (comma-separated).")
@click.option("--extend-select", multiple=True, help="Rules to run on top of the selected ones (comma-separated).")
@click.option("--ignore", multiple=True, help="Skip rules whose code starts with these (comma-separated).")
@click.option("--exclude", multiple=True, help="Skip paths matching this glob (repeatable); replaces the settings' list.")
@click.option("--extend-exclude", multiple=True, help="Skip paths matching this glob too (repeatable).")
@click.option("--force-exclude/--no-force-exclude", default=None,
              help="Apply the excludes to files named on the command line too (for pre-commit).")
@click.option("--runtime-dir", type=click.Path(path_type=Path),
              help="One folder for the vendored porter_runtime, inside the root (default: per file: the copy "
                   "Python finds from where the file runs, see the README's \"How the ported code finds the "
                   "runtime\").")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project root: diff paths are relative to it and the runtime goes in it "
                   "(default: the nearest folder with pyproject.toml, setup.py, setup.cfg, "
                   "requirements.txt or .git; in a tree with none, the outermost with porter.toml; a named folder "
                   "holding a README is its own root).")
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Settings file (default: porter.toml, else pyproject.toml's [tool.porter], at the root).")
@click.option("--unsafe-fixes", is_flag=True, default=None, help="Also apply fixes that may change behaviour on CUDA.")
@click.option("--full-runtime", is_flag=True, default=None,
              help="Vendor every module of porter_runtime, not only those the ported code uses.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: all cores). Output is the same for any number.")
@click.option("--stdin-filename", metavar="NAME",
              help="With '-': the name of the source on stdin, for messages, settings and rules.")
@click.option("--no-progress", is_flag=True, help="Never show a progress bar.")
@click.option("-q", "--quiet", is_flag=True,
              help="Only the lines per file and per finding, no summary (errors still go to stderr).")
def migrate(**given) -> None:
    """Migrate PATHS (files or folders; default: the current folder). Without
    --diff/--write/--check: a dry run. '-' reads one file's source from stdin and
    prints the result on stdout (the diff with --diff, nothing with --check).

    Settings come from the nearest porter.toml or [tool.porter] in pyproject.toml
    (a nested one governs the files below it); flags win over them."""
    flags = MigrateFlags(**given)
    if not flags.paths:  # as ruff: the current folder, or stdin when a name for it is given
        flags = replace(flags, paths=(STDIN,) if flags.stdin_filename else (Path("."),))
    console = stderr_console()
    try:
        code = _migrate(console, flags)
    except STOPS as exc:  # Ctrl-C, SIGTERM, SIGHUP (porter.cli.entry)
        # Writes are atomic: every file is as it was or fully ported, no temporary file left.
        console.print("porter: interrupted; every file is either untouched or fully written", markup=False)
        sys.exit(exit_code(exc))
    except OSError as exc:
        if not output_failed(exc):
            raise
        stop_output()  # the workers are shut down; what was written is whole
        console.print(f"porter: error: can't write the output: {exc.strerror or exc}", markup=False)
        sys.exit(2)
    sys.exit(0 if code == 1 and flags.exit_zero else code)


def _migrate(console, flags: MigrateFlags) -> int:
    """The run; its exit code (0 clean, 1 --check found something, 2 a failure)."""
    # Every input is checked before anything is written: a bad one stops the run whole.
    output_format = flags.format
    if STDIN in flags.paths:
        _check_combinations(flags, output_format)
        return migrate_stdin(console, flags)
    if flags.stdin_filename:
        raise click.UsageError("--stdin-filename names the source read from '-' (stdin); "
                               "pass '-' instead of the paths")
    if not _paths_exist(console, flags.paths):
        return 2
    _check_combinations(flags, output_format)
    config, write = _configure(flags)
    machine = output_format in output_formats.MACHINE
    show = not flags.no_progress and not flags.quiet and not machine
    # each changed file's replacements, for SARIF's fixes (the sink drops the bytes)
    edits: Optional[dict] = (
        {} if output_format == "sarif" or any(r.suffix == ".sarif" for r in flags.reports) else None)
    if flags.interactive:
        result, write_failed = review_and_write(config, console, show=show)
        mode = "interactive"
    else:
        result, write_failed = stream_changes(config, console, flags.show_diff, write, show=show,
                                              views=not flags.quiet and not machine, edits=edits)
        mode = "write" if write else "check" if flags.check else "diff" if flags.show_diff else "dry-run"
    data = reporting.build(result, mode)
    write_reports(data, flags.reports, edits)
    emit(data, output_format, flags.quiet, console, edits)
    for path, error in write_failed:
        console.print(f"porter: error: {shown(path)}: {shown(error)}", markup=False, soft_wrap=True)
    if flags.out_dir is not None and not flags.quiet and not machine:
        console.print(f"ported copy written to {shown(str(flags.out_dir))}", markup=False, soft_wrap=True)

    if result.errors or write_failed or any(s.error for s in result.skipped):
        return 2
    if flags.check and (result.changed or (flags.fail_on == "any" and result.reviews)):
        return 1
    return 0


def _paths_exist(console, paths) -> bool:
    """Whether every path names a file or folder (never a link), each bad one said."""
    bad = False
    for p in paths:
        try:
            p.lstat()
        except OSError as exc:  # no such file, a name too long (a part over 255 bytes), no permission
            reason = "no such file or folder" if isinstance(exc, FileNotFoundError) else exc.strerror or str(exc)
            console.print(f"porter: error: {shown(str(p))}: {reason}", markup=False, soft_wrap=True)
            bad = True
            continue
        if p.is_symlink():
            console.print(f"porter: error: {shown(str(p))}: a symbolic link; porter never follows links: name the "
                          f"folder or file it points to ({shown(str(p.resolve()))})", markup=False, soft_wrap=True)
            bad = True
        elif not p.exists():
            console.print(f"porter: error: {shown(str(p))}: no such file or folder", markup=False, soft_wrap=True)
            bad = True
    return not bad


def _configure(flags: MigrateFlags) -> tuple[RunConfig, bool]:
    """The run's settings (the root, the paths inside it, the settings files, the flags on
    top; with ``--out``, all of it moved to the copy), and whether it writes."""
    root = or_input_error(inputs.project_root, flags.paths, flags.root)
    paths = _inside_root(flags.paths, root)
    settings = load_settings(root, flags.config_file, paths)
    if flags.force_exclude if flags.force_exclude is not None else settings.force_exclude:
        paths = inputs.force_excluded(paths, root, inputs.exclude_globs(settings, flags.exclude,
                                                                       flags.extend_exclude, root))
    selection = flags.rule_and_path_flags()
    config = make_run_config(paths, root, settings, runtime_dir=flags.runtime_dir, unsafe_fixes=flags.unsafe_fixes,
                             jobs=flags.jobs, **selection)
    check_layout(config)
    write = flags.write
    if flags.out_dir is not None:
        paths, root, runtime_dir = _prepare_copy(paths, root, flags.out_dir, flags.runtime_dir or settings.runtime_dir)
        write = True
        config = make_run_config(paths, root, settings, runtime_dir=runtime_dir, unsafe_fixes=flags.unsafe_fixes,
                                 jobs=flags.jobs, **selection)
    config.write = write or flags.interactive
    config.full_runtime = bool(flags.full_runtime if flags.full_runtime is not None else settings.full_runtime)
    return config, write


def _inside_root(paths, root: Path) -> list[Path]:
    """Each path as the path inside the root it names, links and ``..`` resolved: a path
    that leads out of the root (``repo/link/../x.py`` where ``link`` points elsewhere, a
    file named beside ``--root``) is refused before anything is read, and ``d/../d/x.py``
    is the same file as ``d/x.py``."""
    real_root = root.resolve()
    inside = []
    for path in paths:
        try:
            rel = path.resolve().relative_to(real_root)
        except ValueError:
            raise InputError(f"{shown(str(path))}: is outside the root {shown(str(root))} (links and '..' "
                             "resolved); porter reads and writes only inside the root: pass --root") from None
        if root / rel not in inside:
            inside.append(root / rel)
    return inside


def _check_combinations(flags: MigrateFlags, output_format: str) -> None:
    """Refuse a report porter could not write and flags that can't go together."""
    for report_path in flags.reports:
        if report_path.suffix not in (".md", ".json", ".sarif"):
            raise click.BadParameter(f"{report_path}: use a .md, .json or .sarif file", param_hint="--report")
        folder = report_path.absolute().parent
        if not folder.is_dir():
            raise InputError(f"--report {shown(str(report_path))}: the folder {shown(str(folder))} does not exist")
        if report_path.is_dir() or report_path.is_symlink():
            raise InputError(f"--report {shown(str(report_path))}: is a folder or a symbolic link, not a file")
        if not os.access(folder, os.W_OK):
            raise InputError(f"--report {shown(str(report_path))}: cannot write into {shown(str(folder))}")
    if output_format in output_formats.MACHINE and (flags.show_diff or flags.interactive):
        raise click.UsageError(f"--output-format {output_format} prints on stdout; it can't be combined with "
                               + ("--diff" if flags.show_diff else "--interactive"))
    if flags.interactive and (flags.check or flags.out_dir is not None):
        raise click.UsageError("--interactive can't be combined with " + ("--check" if flags.check else "--out"))


def _prepare_copy(paths, root: Path, out_dir: Path, runtime_dir: Optional[Path]):
    """Copy the tree to ``out_dir``; the run then works on the copy."""
    from porter.engine.outtree import OutError, check_target, copy_tree, map_paths

    out = out_dir.absolute()
    try:
        check_target(root, out)
        mapped = map_paths(paths, root, out)
        if runtime_dir is not None:
            runtime_dir = map_paths([runtime_dir], root, out)[0]
    except OutError as exc:
        raise InputError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    try:
        copy_tree(root, out)
    except OutError as exc:
        raise InputError(str(exc)) from None
    return mapped, out, runtime_dir

