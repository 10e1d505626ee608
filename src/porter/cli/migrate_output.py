"""Where ``porter migrate``'s words go, per ``--output-format``.

stdout carries one document or nothing else: the diff (``--diff``), the JSON or SARIF
report, or GitHub annotations (the runner reads workflow commands from stdout).
stderr carries what is for people: the per-file and per-finding lines (kept by
``-q``), then the summary (dropped by ``-q``). Errors always reach stderr.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from porter.cli.terminal_text import for_terminal, shown
from porter.report import output_formats, sarif
from porter.report.summary import render_summary, to_json, to_markdown


def emit(data: dict[str, Any], output_format: str, quiet: bool, console, edits=None) -> None:
    safe = for_terminal(data)
    if output_format in ("json", "sarif"):  # valid UTF-8 whatever the file names: \\udcxx escapes
        text = sarif.dumps(data, edits) if output_format == "sarif" else to_json(data)
        sys.stdout.buffer.write(text.encode("utf-8", errors="backslashreplace"))
        sys.stdout.flush()
        print_errors(safe, console)
        return
    if output_format == "github":
        for line in output_formats.github(safe):
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        print_errors(safe, console)
        return
    for line in output_formats.lines(safe, output_format):
        console.print(line, markup=False, soft_wrap=True, highlight=False)
    if not quiet:
        render_summary(safe, console)


def print_errors(safe: dict[str, Any], console) -> None:
    """What must reach a person even when stdout is for a program: files that failed."""
    for f in safe["files"]:
        if f["status"] == "error":
            console.print(f"porter: error: {f['path']}: {f['error']}", markup=False, soft_wrap=True)


def print_notebook_views(views: list[str], console) -> None:
    """A notebook's code cells one by one, for reading: the patch on stdout carries the
    notebook as a whole-file diff of its JSON, which ``git apply`` takes."""
    if not views:
        return
    console.print("notebook changes, cell by cell (for reading; the diff on stdout changes the .ipynb "
                  "files as JSON, which git apply takes):", markup=False, soft_wrap=True)
    for view in views:
        text = "\n".join(shown(line) for line in view.splitlines())
        console.print(text, markup=False, soft_wrap=True, highlight=False)


def write_reports(data: dict, reports, edits: Optional[dict] = None) -> None:
    """Each ``--report`` file, in the format its suffix names."""
    for report_path in reports:
        if report_path.suffix == ".sarif":
            text = sarif.dumps(data, edits)
        elif report_path.suffix == ".json":
            text = to_json(data)
        else:
            text = to_markdown(data)
        report_path.write_bytes(text.encode("utf-8", errors="backslashreplace"))
