"""The ``porter`` command line. Only this module talks to the terminal.

stdout carries only a diff or JSON; everything for people (summary, findings,
progress) goes to stderr, so ``porter migrate . --diff | git apply`` just works.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import click

import porter
from porter import report as reporting
from porter.apply import Change, apply_changes, colourise, unified_diff
from porter.discover import find_root
from porter.engine import Options
from porter.registry import all_rules, by_code, select_rules
from porter.run import RunConfig, default_jobs, run

EXIT_CODES = """\b
Exit codes:
  0  clean, or changes applied / shown
  1  with --check: files would change or findings need a human
  2  porter could not process something (a file it could not read,
     decode or parse, a write that failed, an internal error)"""


def _stderr_console(no_color: bool = False):
    from rich.console import Console

    return Console(stderr=True, no_color=no_color, highlight=False)


def _split(values: tuple[str, ...]) -> list[str]:
    return [part for value in values for part in value.split(",") if part.strip()]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(porter.__version__, prog_name="porter")
def cli() -> None:
    """Port CUDA-only PyTorch code to Apple Silicon (MPS) and CPU, unchanged on CUDA."""


@cli.command(epilog=EXIT_CODES)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff (git apply-able) on stdout.")
@click.option("--write", is_flag=True, help="Apply the changes in place and vendor the runtime.")
@click.option("--check", is_flag=True, help="Exit 1 when any file would change or needs review.")
@click.option("--report", "reports", multiple=True, type=click.Path(path_type=Path),
              help="Write the migration report: FILE.md (Markdown) or FILE.json.")
@click.option("--select", multiple=True, help="Only rules whose code starts with these (comma-separated).")
@click.option("--ignore", multiple=True, help="Skip rules whose code starts with these (comma-separated).")
@click.option("--exclude", multiple=True, help="Skip paths matching this glob (repeatable).")
@click.option("--runtime-dir", type=click.Path(path_type=Path),
              help="Where --write vendors porter_runtime (default: <root>/porter_runtime).")
@click.option("--root", type=click.Path(path_type=Path, file_okay=False),
              help="Repository root for diff paths (default: the git work tree, else the path given).")
@click.option("--unsafe-fixes", is_flag=True, help="Also apply fixes that may change behaviour on CUDA.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Worker processes (default: all cores). Output is the same for any number.")
@click.option("--no-progress", is_flag=True, help="Never show a progress bar.")
@click.option("-q", "--quiet", is_flag=True, help="Print no summary (errors still go to stderr).")
def migrate(paths, show_diff, write, check, reports, select, ignore, exclude, runtime_dir, root,
            unsafe_fixes, jobs, no_progress, quiet) -> None:
    """Migrate PATHS (files or folders). Without --diff/--write/--check: a dry run."""
    console = _stderr_console()
    missing = [p for p in paths if not p.exists() and not p.is_symlink()]
    for p in missing:
        console.print(f"porter: error: {p}: no such file or folder", markup=False, soft_wrap=True)
    paths = [p for p in paths if p not in missing]
    if not paths:
        sys.exit(2)
    for report_path in reports:
        if report_path.suffix not in (".md", ".json"):
            raise click.BadParameter(f"{report_path}: use a .md or .json file", param_hint="--report")
    rules = select_rules(_split(select), _split(ignore))
    root = (root or find_root(paths)).absolute()
    config = RunConfig(
        paths=[p.absolute() for p in paths],
        root=root,
        options=Options(rules=rules, unsafe_fixes=unsafe_fixes),
        excludes=_split(exclude),
        runtime_dir=runtime_dir.absolute() if runtime_dir else None,
        jobs=jobs or default_jobs(),
    )
    write_failed: list[tuple[str, str]] = []
    colour = show_diff and sys.stdout.isatty()

    def sink(change: Change) -> None:
        if show_diff:
            out = unified_diff(change)
            sys.stdout.buffer.write(colourise(out) if colour else out)
        if write:
            write_failed.extend(apply_changes(root, [change]))

    result = _run_with_progress(config, console, sink, show=not no_progress and not quiet)
    sys.stdout.flush()
    mode = "write" if write else "check" if check else "diff" if show_diff else "dry-run"

    data = reporting.build(result, mode)
    for report_path in reports:
        text = reporting.to_json(data) if report_path.suffix == ".json" else reporting.to_markdown(data)
        report_path.write_text(text, encoding="utf-8")
    if not quiet:
        reporting.render_summary(data, console)
    for path, error in write_failed:
        console.print(f"porter: error: {path}: {error}", markup=False, soft_wrap=True)

    if result.errors or write_failed or missing:
        sys.exit(2)
    if check and (result.changed or result.reviews):
        sys.exit(1)


def _run_with_progress(config: RunConfig, console, sink, show: bool):
    if not (show and console.is_terminal):
        return run(config, sink)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("porter"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task = bar.add_task("files", total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return run(config, sink, progress=tick)


@cli.command("rules")
@click.option("--json", "as_json", is_flag=True, help="Print the rules as JSON on stdout.")
def list_rules(as_json: bool) -> None:
    """List every rule: code, name, safety and summary."""
    rules = all_rules()
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
    """Print a rule's documentation and its examples."""
    from porter.explain import render

    rule = by_code(code)
    if rule is None:
        raise click.ClickException(f"no rule {code!r}; `porter rules` lists them")
    click.echo(render(rule))


def _register_optional_commands() -> None:
    try:
        from porter.doctor import doctor
    except ImportError:  # pragma: no cover - doctor ships with the runtime work
        return
    cli.add_command(doctor)


_register_optional_commands()


def main(argv: Optional[list[str]] = None) -> None:
    cli.main(args=argv, prog_name="porter")


if __name__ == "__main__":  # pragma: no cover
    main()
