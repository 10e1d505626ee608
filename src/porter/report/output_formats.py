"""How ``porter migrate`` speaks on the terminal: one line per file it would change
(black's "would reformat") and one per finding (ruff's concise ``path:line:col CODE
message``), or the same facts as GitHub annotations, JSON or SARIF.

Everything here reads the report (porter.report.summary.build) and returns text; the CLI
decides where it goes. The lines are what ``-q`` keeps; the summary is what it drops.
"""

from __future__ import annotations

from typing import Any, Iterator

#: The choices of ``--output-format``.
FORMATS = ("concise", "full", "json", "github", "sarif")
#: The formats that are a document for a program: they own stdout and print no summary.
MACHINE = ("json", "github", "sarif")
#: Modes in which nothing is written: a changed file is one that "would" change.
PENDING_MODES = ("dry-run", "check", "diff")


def severity(item: dict[str, Any], action: str) -> str:
    """A finding's level: "info" (a note, never counted as needing a human), "warning"
    (a human must look) or, for a rewrite, "fix". A report item may carry its own
    ``severity`` (the ledger's info-level kinds); otherwise the action decides."""
    if action == "rewrite":
        return "fix"
    return item.get("severity") or "warning"


#: A severity's level, in SARIF's words; ``--output-format github`` spells "note" "notice".
#: A rewrite is a warning: it is pending work that ``--check`` fails on.
_LEVELS = {"fix": "warning", "warning": "warning", "info": "note", "error": "error"}


def level(item: dict[str, Any], action: str) -> str:
    """The level of a rewrite or finding ("note", "warning" or "error"): one mapping for
    the SARIF report and the GitHub annotations, so both say the same."""
    return _LEVELS.get(severity(item, action), "warning")


def file_lines(report: dict[str, Any]) -> Iterator[str]:
    """One line per file the run changed or would change, and per file that failed."""
    verb = "Would port" if report["mode"] in PENDING_MODES else "Ported"
    for entry in report["files"]:
        if entry["status"] == "changed":
            yield f"{verb} {entry['path']}"
        elif entry["status"] == "error":
            yield f"{entry['path']}: error: {entry['error']}"


def concise(report: dict[str, Any]) -> Iterator[str]:
    """The file lines, then one line per finding for a human: ``path:line:col CODE message``.
    Notes (severity "info") are not findings: they are in ``full`` and the report's notes,
    so every line here is one that ``--check`` fails on."""
    yield from file_lines(report)
    for entry in report["files"]:
        for item in entry["findings"]:
            if severity(item, "review") != "info":
                yield f"{entry['path']}:{item['line']}:{item['column']} {item['code']} {item['message']}"


def full(report: dict[str, Any]) -> Iterator[str]:
    """Each file that changes with its rewrites (``[*]``: porter fixes it), each finding
    with the code it is on and the suggestion, and each note (``note:``, nothing to do)."""
    yield from file_lines(report)
    for entry in report["files"]:
        where = entry["path"]
        for item in entry["rewrites"]:
            yield f"{where}:{item['line']}:{item['column']} {item['code']} [*] {item['message']}"
            if item["before"] or item["after"]:
                yield f"    - {item['before']}"
                yield f"    + {item['after']}"
        for item in entry["findings"]:
            note = "note: " if severity(item, "review") == "info" else ""
            yield f"{where}:{item['line']}:{item['column']} {item['code']} {note}{item['message']}"
            if item["before"]:
                yield f"    | {item['before']}"
            if item["suggestion"]:
                yield f"    = suggestion: {item['suggestion']}"


def github(report: dict[str, Any]) -> Iterator[str]:
    """GitHub Actions workflow commands: one annotation per rewrite, finding and failure."""
    for entry in report["files"]:
        path = entry["path"]
        if entry["status"] == "error":
            yield f"::error file={_prop(path)},title=porter::{_data(entry['error'])}"
        for action, key in (("rewrite", "rewrites"), ("review", "findings")):
            for item in entry[key]:
                kind = {"note": "notice"}.get(level(item, action), level(item, action))
                text = item["message"]
                if action == "rewrite" and item["after"]:
                    text += f" (porter rewrites it: {item['before']} -> {item['after']})"
                yield (f"::{kind} file={_prop(path)},line={item['line']},col={item['column']},"
                       f"title={_prop(item['code'])}::{_data(text)}")


def _data(text: str) -> str:
    """A workflow command's message, escaped as the runner reads it."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    """A workflow command's property value: its separators escaped too."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def lines(report: dict[str, Any], output_format: str) -> Iterator[str]:
    """The per-file and per-finding lines of a text format."""
    if output_format == "full":
        return full(report)
    if output_format == "github":
        return github(report)
    return concise(report)


#: The ledger's states as the terminal and the Markdown name them: "reported" counts
#: touchpoints a finding or a note covers, not findings, so it must not read as the
#: summary's "needs a human" (the JSON keeps the state's own name).
STATE_LABELS = {"reported": "under a finding or note"}


def state_label(state: str) -> str:
    return STATE_LABELS.get(state, state)
