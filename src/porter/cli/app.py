"""The ``porter`` command line. Only this module talks to the terminal.

stdout carries only a diff or JSON; everything for people (summary, findings,
progress) goes to stderr, so ``porter migrate . --diff | git apply`` just works.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Optional, Sequence

import click

import porter
from porter.cli import migrate_inputs as inputs
from porter.cli.doctor import doctor
from porter.cli.migrate_output import emit, print_notebook_views
from porter.cli.terminal_text import for_terminal as _for_terminal  # noqa: F401 (shown: a public name)
from porter.cli.terminal_text import shown
from porter.engine.config import Config, ConfigError, load_config
from porter.engine.discover import find_root
from porter.engine.registry import all_rules, by_code
from porter.engine.run import RunConfig, default_jobs, run
from porter.files.apply import Change, apply_changes, colourise, unified_diff
from porter.report import output_formats
from porter.report import summary as reporting

EXIT_CODES = """\b
Exit codes:
  0  clean, or changes applied / shown (and always with --exit-zero, but 2)
  1  with --check: files would change or findings need a human
  2  bad input or a failure: a flag or setting porter can't use, a file it
     could not read, decode or parse, a write that failed, an internal error
130  interrupted (Ctrl-C); every file is untouched or fully written"""


def _stderr_console(no_color: bool = False):
    from rich.console import Console

    return Console(stderr=True, no_color=no_color, highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(porter.__version__, prog_name="porter")
def cli() -> None:
    """Port CUDA-only PyTorch code to Apple Silicon (MPS) and CPU, unchanged on CUDA."""


@cli.command(epilog=EXIT_CODES)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
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
@click.option("--format", "old_format", type=click.Choice(["text", "json"]), default=None,
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
              help="Where --write vendors porter_runtime (default: <root>/porter_runtime).")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project root: diff paths are relative to it and the runtime goes in it "
                   "(default: the nearest folder with pyproject.toml, setup.py, setup.cfg, "
                   "requirements.txt or .git).")
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Settings file (default: porter.toml, else pyproject.toml's [tool.porter], at the root).")
@click.option("--unsafe-fixes", is_flag=True, default=None, help="Also apply fixes that may change behaviour on CUDA.")
@click.option("--full-runtime", is_flag=True, default=None,
              help="Vendor every module of porter_runtime, not only those the ported code uses.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: all cores). Output is the same for any number.")
@click.option("--no-progress", is_flag=True, help="Never show a progress bar.")
@click.option("-q", "--quiet", is_flag=True,
              help="Only the lines per file and per finding, no summary (errors still go to stderr).")
def migrate(paths, show_diff, write, check, fail_on, interactive, out_dir, reports, output_format, old_format,
            exit_zero, select, extend_select, ignore, exclude, extend_exclude, force_exclude, runtime_dir, root,
            config_file, unsafe_fixes, full_runtime, jobs, no_progress, quiet) -> None:
    """Migrate PATHS (files or folders). Without --diff/--write/--check: a dry run.

    Settings come from the nearest porter.toml or [tool.porter] in pyproject.toml
    (a nested one governs the files below it); flags win over them."""
    console = _stderr_console()
    output_format = output_format or ("json" if old_format == "json" else "concise")
    flags = dict(select=select, ignore=ignore, exclude=exclude, extend_select=extend_select,
                 extend_exclude=extend_exclude)
    try:
        code = _migrate(console, paths, show_diff, write, check, fail_on, interactive, out_dir, reports,
                        output_format, flags, force_exclude, runtime_dir, root, config_file, unsafe_fixes,
                        full_runtime, jobs, no_progress, quiet)
    except KeyboardInterrupt:
        # Writes are atomic: every file is as it was or fully ported, no temporary file left.
        console.print("porter: interrupted; every file is either untouched or fully written", markup=False)
        sys.exit(130)
    sys.exit(0 if code == 1 and exit_zero else code)


def _migrate(console, paths, show_diff, write, check, fail_on, interactive, out_dir, reports, output_format, flags,
             force_exclude, runtime_dir, root, config_file, unsafe_fixes, full_runtime, jobs, no_progress,
             quiet) -> int:
    """The run; its exit code (0 clean, 1 --check found something, 2 a failure)."""
    # Every input is checked before anything is written: a bad one stops the run whole.
    bad = False
    for p in paths:
        if p.is_symlink():
            console.print(f"porter: error: {shown(str(p))}: a symbolic link; porter never follows links: name the "
                          f"folder or file it points to ({shown(str(p.resolve()))})", markup=False, soft_wrap=True)
            bad = True
        elif not p.exists():
            console.print(f"porter: error: {shown(str(p))}: no such file or folder", markup=False, soft_wrap=True)
            bad = True
    if bad:
        return 2
    _check_combinations(reports, output_format, show_diff, interactive, check, out_dir)
    root = _inputs(inputs.project_root, paths, root)
    paths = _inside_root(paths, root)
    settings = _settings(root, config_file, paths)
    if force_exclude if force_exclude is not None else settings.force_exclude:
        paths = inputs.force_excluded(paths, root, inputs.exclude_globs(settings, flags["exclude"],
                                                                       flags["extend_exclude"], root))
    config = _run_config(paths, root, settings, runtime_dir=runtime_dir, unsafe_fixes=unsafe_fixes, jobs=jobs,
                         **flags)
    _check_layout(config)
    if out_dir is not None:
        paths, root, runtime_dir = _prepare_copy(paths, root, out_dir, runtime_dir or settings.runtime_dir)
        write = True
        config = _run_config(paths, root, settings, runtime_dir=runtime_dir, unsafe_fixes=unsafe_fixes,
                             jobs=jobs, **flags)
    config.write = write or interactive
    config.full_runtime = bool(full_runtime if full_runtime is not None else settings.full_runtime)
    machine = output_format in output_formats.MACHINE
    show = not no_progress and not quiet and not machine
    # each changed file's replacements, for SARIF's fixes (the sink drops the bytes)
    edits: Optional[dict] = {} if output_format == "sarif" or any(r.suffix == ".sarif" for r in reports) else None
    if interactive:
        result, write_failed = _interactive(config, console, show=show)
        mode = "interactive"
    else:
        result, write_failed = _stream(config, console, show_diff, write, show=show, views=not quiet and not machine,
                                       edits=edits)
        mode = "write" if write else "check" if check else "diff" if show_diff else "dry-run"
    data = reporting.build(result, mode)
    _write_reports(data, reports, edits)
    emit(data, output_format, quiet, console, edits)
    for path, error in write_failed:
        console.print(f"porter: error: {shown(path)}: {shown(error)}", markup=False, soft_wrap=True)
    if out_dir is not None and not quiet and not machine:
        console.print(f"ported copy written to {shown(str(out_dir))}", markup=False, soft_wrap=True)

    if result.errors or write_failed or any(s.error for s in result.skipped):
        return 2
    if check and (result.changed or (fail_on == "any" and result.reviews)):
        return 1
    return 0


def _inputs(function, *args):
    """``function(*args)`` with an input problem as porter's one-line error (exit 2)."""
    try:
        return function(*args)
    except inputs.InputProblem as exc:
        raise InputError(str(exc)) from None


def _not_python3(python: str) -> str:
    """Why ``python`` can't run the modules ("" when it is a Python 3 interpreter)."""
    import subprocess

    try:
        proc = subprocess.run([python, "-c", "import sys; print(sys.version_info[0])"], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run it: {exc}"
    if proc.returncode != 0 or proc.stdout.strip() != b"3":
        return "not a Python 3 interpreter"
    return ""


def _finite(value, param):
    """A number of seconds, not nan or inf (FloatRange lets both through)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds", param=param)
    return value


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


def _check_combinations(reports, output_format, show_diff, interactive, check, out_dir) -> None:
    for report_path in reports:
        if report_path.suffix not in (".md", ".json", ".sarif"):
            raise click.BadParameter(f"{report_path}: use a .md, .json or .sarif file", param_hint="--report")
        folder = report_path.absolute().parent
        if not folder.is_dir():
            raise InputError(f"--report {shown(str(report_path))}: the folder {shown(str(folder))} does not exist")
        if report_path.is_dir() or report_path.is_symlink():
            raise InputError(f"--report {shown(str(report_path))}: is a folder or a symbolic link, not a file")
        if not os.access(folder, os.W_OK):
            raise InputError(f"--report {shown(str(report_path))}: cannot write into {shown(str(folder))}")
    if output_format in output_formats.MACHINE and (show_diff or interactive):
        raise click.UsageError(f"--output-format {output_format} prints on stdout; it can't be combined with "
                               + ("--diff" if show_diff else "--interactive"))
    if interactive and (check or out_dir is not None):
        raise click.UsageError("--interactive can't be combined with " + ("--check" if check else "--out"))


class InputError(click.ClickException):
    """An input porter can't use (flag, settings file, target folder): one line, exit 2."""

    exit_code = 2

    def show(self, file=None) -> None:
        # values from a settings file or a flag, never sent to the terminal raw
        click.echo(f"porter: error: {shown(self.format_message())}", err=True)


SettingsError = InputError


def _check_layout(config: RunConfig) -> None:
    from porter.project.runtime_home import LayoutError

    try:
        config.layout()
    except LayoutError as exc:
        raise InputError(f"runtime folder {exc}") from None


def _settings(root: Path, config_file: Optional[Path], paths=()) -> Config:
    """The explicit file's settings, else the nearest settings file at or above the
    first path (or the root)."""
    from porter.cli.folder_settings import nearest_config

    try:
        return load_config(root, config_file or nearest_config(paths[0] if paths else root))
    except ConfigError as exc:
        raise SettingsError(str(exc)) from None


def _run_config(paths, root, settings: Config, select=(), ignore=(), exclude=(), runtime_dir=None,
                unsafe_fixes=None, jobs=None, extend_select=(), extend_exclude=()) -> RunConfig:
    """The run's settings: each flag given wins over the settings files' values."""
    return _inputs(lambda: inputs.run_config(paths, root, settings, select, ignore, exclude, runtime_dir,
                                             unsafe_fixes, jobs or default_jobs(), extend_select, extend_exclude))


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


def _stream(config: RunConfig, console, show_diff: bool, write: bool, show: bool, views: bool = True,
            edits: Optional[dict] = None):
    write_failed: list[tuple[str, str]] = []
    colour = show_diff and sys.stdout.isatty()

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

    result = _run_with_progress(config, console, sink, show=show)
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
    """A notebook's code cells one by one (porter.engine.notebook), for people."""
    from porter.engine.notebook import cell_diff

    return cell_diff(change.path, change.old, change.new) if change.old is not None else ""


def _interactive(config: RunConfig, console, show: bool):
    """Run, ask about each hunk, then write the accepted hunks (and the runtime they need)."""
    from porter.cli import interactive

    changes: list[Change] = []
    result = _run_with_progress(config, console, changes.extend, show=show)
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


def _run_with_progress(config: RunConfig, console, sink, show: bool):
    if not (show and console.is_terminal):
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
        task = bar.add_task("files", total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return run(config, sink, progress=tick)


@cli.command("rules")
@click.argument("prefixes", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON on stdout.")
def list_rules(prefixes: tuple[str, ...], as_json: bool) -> None:
    """List the rules (those whose code starts with one of PREFIXES): code, name, safety and summary."""
    wanted = tuple(p.strip().upper() for p in inputs.split(prefixes))
    rules = [r for r in all_rules() if not wanted or r.code.startswith(wanted)]
    if not rules:
        raise InputError(f"no rule code starts with {', '.join(wanted)}; `porter rules` lists them")
    if as_json:
        import json

        click.echo(json.dumps([{"code": r.code, "name": r.name, "safety": r.safety.value,
                                "summary": r.summary()} for r in rules], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True, header_style="bold")
    for column in ("code", "name", "safety", "summary"):
        table.add_column(column)
    for rule in rules:
        table.add_row(rule.code, rule.name, rule.safety.value, rule.summary())
    Console(highlight=False).print(table)


@cli.command()
@click.argument("code")
def explain(code: str) -> None:
    """Print a rule's documentation and its examples (Markdown; rendered on a terminal)."""
    from porter.report.explain import render

    rule = by_code(code.strip().upper())
    if rule is None:
        raise InputError(f"no rule {code!r}; `porter rules` lists them")
    text = render(rule)
    if sys.stdout.isatty():  # rendered for a terminal; piped, the Markdown stays as written
        from porter.cli.terminal_markdown import show_markdown

        show_markdown(text)
    else:
        click.echo(text)


def _write_reports(data: dict, reports, edits: Optional[dict] = None) -> None:
    for report_path in reports:
        if report_path.suffix == ".sarif":
            from porter.report import sarif

            text = sarif.dumps(data, edits)
        elif report_path.suffix == ".json":
            text = reporting.to_json(data)
        else:
            text = reporting.to_markdown(data)
        report_path.write_bytes(text.encode("utf-8", errors="backslashreplace"))


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash:  eval "$(porter completion bash)"   (in ~/.bashrc)
    zsh:   eval "$(porter completion zsh)"    (in ~/.zshrc)
    fish:  porter completion fish > ~/.config/fish/completions/porter.fish
    """
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    click.echo(cls(cli, {}, "porter", "_PORTER_COMPLETE").source())


VERIFY_EXIT_CODES = """\b
Exit codes:
  0  every module imports (and the --run command exits 0)
  1  a module failed, timed out or crashed (or the --run command failed)
  2  porter could not run the check (a missing path, an unusable --python)"""


@cli.command(epilog=VERIFY_EXIT_CODES)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--run", "command", metavar="CMD",
              help="Also run CMD (a shell command) in the tree's root with CUDA hidden, e.g. "
                   "\"python train.py --steps 2\".")
@click.option("--timeout", type=click.FloatRange(min=0.1), callback=lambda ctx, param, v: _finite(v, param), default=60.0, show_default=True, metavar="SECONDS",
              help="Seconds each module may take to import.")
@click.option("--run-timeout", type=click.FloatRange(min=0.1), callback=lambda ctx, param, v: _finite(v, param), default=None, metavar="SECONDS",
              help="Seconds the --run command may take (default: no limit).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Worker processes at most (default: all cores; each imports at least 8 modules).")
@click.option("--tests", "include_tests", is_flag=True, help="Also import test modules (test_*.py, tests/, ...).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip paths matching this glob (repeatable).")
@click.option("--allow-package", "allow", multiple=True, metavar="NAME",
              help="Let the code import this installed CUDA-only package (hidden by default).")
@click.option("--python", "python", default=None, metavar="EXE",
              help="The interpreter that runs the code (default: the one running porter).")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False, exists=True),
              help="Project root (default: as for migrate).")
@click.option("--config", "config_file", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help="Settings file used for porter's analysis of the tree (default: as for migrate).")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: print the results as JSON on stdout.")
@click.option("-q", "--quiet", is_flag=True, help="List only the modules that failed.")
@click.option("--emulate", type=click.Choice(["mps"]), default=None,
              help="Run the code on this CPU under MPS's rules (PORTER_EMULATE=mps for porter_runtime): "
                   "float64 on the device, operators MPS lacks, Gloo collectives of device tensors and the "
                   "spawn start method fail as on a Mac. Checks MPS's rules, not its numerics or speed.")
def verify(path, command, timeout, run_timeout, jobs, include_tests, exclude, allow, python, root, config_file,
           output_format, quiet, emulate) -> None:
    """Import every module of PATH (a ported tree) with CUDA hidden; map failures to the report.

    \b
    This EXECUTES the project's code (module bodies, and CMD with --run), in child
    processes: run it only on code you trust. It is the only porter command that
    does; migrate never runs the code it ports.

    \b
    In each child: CUDA_VISIBLE_DEVICES="" (torch.cuda.is_available() is False),
    installed CUDA-only packages (flash_attn, xformers, apex, triton, ...) are hidden,
    and porter_runtime is found only in the tree. Modules are imported under their
    package names (an `if __name__ == "__main__":` block does not run); setup.py,
    __main__.py, tests (unless --tests) and the vendored runtime are skipped.
    Each failure is matched to porter's findings on the tree: "named by finding
    PT110 at model.py:3", or "NOT NAMED by porter".

    \b
    --emulate mps: a Mac in the loop. The vendored porter_runtime resolves to the
    CPU but answers "mps" to every policy (dtypes, autocast, compile, DataLoader,
    distributed) and checks each operator against MPS's contract for the installed
    torch. With PYTORCH_ENABLE_MPS_FALLBACK=1 the operators MPS lacks run and are
    listed at the end (calls, first call site).
    """
    import shutil

    from porter.engine.discover import discover
    from porter.verify.command import VerifyOptions
    from porter.verify.command import verify as run_verify
    from porter.verify.output import render, to_data

    console = _stderr_console()
    if not path.exists():
        console.print(f"porter: error: {path}: no such file or folder", markup=False, soft_wrap=True)
        sys.exit(2)
    root = (root or find_root([path])).absolute()
    python = python or sys.executable
    if shutil.which(python) is None:
        console.print(f"porter: error: --python {python}: not found", markup=False, soft_wrap=True)
        sys.exit(2)
    python = os.path.abspath(shutil.which(python))  # a relative --python names a file from here, not from the tree
    problem = _not_python3(python)
    if problem:
        console.print(f"porter: error: --python {python}: {problem}", markup=False, soft_wrap=True)
        sys.exit(2)
    settings = _settings(root, config_file)
    # the analysis runs in this process, beside the import workers' threads (no fork)
    config = _run_config([path], root, settings, (), (), exclude, None, None, 1)
    found = discover([path.absolute()], root, config.excludes, skip=[config.runtime_target], patterns=["*.py"])
    options = VerifyOptions(path=path.absolute(), root=root, python=python, timeout=timeout,
                            jobs=jobs or default_jobs(), include_tests=include_tests, excludes=config.excludes,
                            allow=allow, run=command, run_timeout=run_timeout,
                            echo=sys.stderr.buffer if output_format == "text" and not quiet else None,
                            emulate=emulate)
    try:
        report = run_verify(options, sorted(found.files), config)
    except OSError as exc:
        console.print(f"porter: error: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:  # the children are stopped with it; nothing was written
        console.print("porter: interrupted", markup=False)
        sys.exit(130)
    if output_format == "json":
        import json

        click.echo(json.dumps(to_data(report), indent=2))
    else:
        from rich.console import Console

        render(report, Console(highlight=False), quiet=quiet)
    sys.exit(0 if report.ok else 1)


cli.add_command(doctor)  # its probing imports torch only when the command runs

from porter.fit.command import fit  # noqa: E402

cli.add_command(fit)  # runs the target's code; migrate never does


def main(argv: Optional[list[str]] = None) -> None:
    if hasattr(signal, "SIGPIPE"):  # `porter migrate --diff | head`: stop quietly, as git does
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        cli.main(args=argv, prog_name="porter")
    except Exception:  # a bug in porter: exit 2, never the 1 that means "changes pending"
        traceback.print_exc()
        print("porter: internal error (the traceback above); files already written are whole",
              file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    main()
