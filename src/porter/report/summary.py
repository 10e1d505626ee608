"""The migration report: one data model, rendered as JSON, Markdown and a terminal table."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import porter
from porter.engine.registry import by_code
from porter.engine.run import RunResult
from porter.project.touchpoints import ledger
from porter.report.output_formats import state_label

SCHEMA_VERSION = 1


def build(result: RunResult, mode: str) -> dict[str, Any]:
    """The report as plain data; the JSON schema (``schema_version`` 1) is this dict."""
    rewrites: Counter[str] = Counter()
    reviews: Counter[str] = Counter()
    notes: Counter[str] = Counter()  # info-level findings: listed, not counted as needing a human
    files = []
    for item in result.files:
        for finding in item.findings:
            kind = rewrites if finding.action == "rewrite" else reviews if finding.needs_human else notes
            kind[finding.code] += 1
        if item.status == "unchanged" and not item.findings:
            continue
        files.append({
            "path": item.path,
            "status": item.status,
            "error": item.error or None,
            "rewrites": [_finding(f) for f in item.rewrites],
            "findings": [_finding(f) for f in item.reviews],
        })
    by_rule = []
    for code in sorted(set(rewrites) | set(reviews) | set(notes)):
        rule = by_code(code)
        by_rule.append({
            "code": code,
            "name": rule.name if rule else "",
            "safety": rule.safety.value if rule else "",
            "rewrites": rewrites[code],
            "findings": reviews[code],
            **({"notes": notes[code]} if notes[code] else {}),
        })
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "porter", "version": porter.__version__},
        "mode": mode,
        "root": str(result.root),
        "summary": {
            "files_scanned": len(result.files),
            "files_changed": len(result.changed),
            "files_failed": len(result.errors),
            "files_skipped": len(result.skipped),
            "rewrites": sum(rewrites.values()),
            "findings": sum(reviews.values()),
            "notes": sum(notes.values()),
        },
        "rules": by_rule,
        "files": files,
        "skipped": [{"path": s.path, "reason": s.reason, "error": s.error} for s in result.skipped],
        "runtime": {"changes": [c.path for c in result.runtime_changes], "notes": result.notes},
        "ledger": _ledger(result),
    }


def _ledger(result: RunResult) -> dict[str, Any]:
    """Every CUDA touchpoint and its state (porter.project.touchpoints.ledger): counts for the run and per
    file, and each file's touchpoints. Added to schema 1 without changing a field:
    readers of the first schema-1 reports see one key more."""
    files = [{"path": item.path, "counts": ledger.counts(item.ledger), "touchpoints": [t.to_dict() for t in item.ledger]}
             for item in result.files if item.ledger]
    return {"states": list(ledger.STATES), "counts": ledger.counts(t for item in result.files for t in item.ledger),
            "files": files}


def _finding(finding) -> dict[str, Any]:
    data = finding.to_dict()
    data.pop("path")
    return data


def to_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"



def to_markdown(report: dict[str, Any]) -> str:
    """A report for people: a pull-request description (porter.report.markdown)."""
    from porter.report.markdown import to_markdown as markdown

    return markdown(report)


def ledger_line(report: dict[str, Any]) -> str:
    """The ledger in one line, for the terminal."""
    data = report.get("ledger") or {}
    counts = data.get("counts") or {}
    total = sum(counts.values())
    parts = ", ".join(f"{counts[s]} {state_label(s)}" for s in data.get("states", ()))
    return (f"ledger: {total} CUDA touchpoint{'s' if total != 1 else ''} in the code"
            + (f": {parts}" if total else ""))


def render_summary(report: dict[str, Any], console) -> None:
    """The terminal summary (rich, on stderr): what ``-q`` drops. The by-rule table adds
    up to the totals above it (PT999 included); notes, when there are any, have their
    own column in both, never counted as needing a human."""
    from rich.table import Table

    s = report["summary"]
    notes = bool(s.get("notes"))
    table = Table(title="porter migrate", show_header=True, header_style="bold")
    columns = ["files scanned", "would change" if report["mode"] in ("dry-run", "check", "diff") else "changed",
               "rewrites", "needs a human"] + (["notes"] if notes else []) + ["failed"]
    for column in columns:
        table.add_column(column, justify="right")
    table.add_row(str(s["files_scanned"]), str(s["files_changed"]), str(s["rewrites"]), str(s["findings"]),
                  *([str(s["notes"])] if notes else []), str(s["files_failed"]))
    console.print(table)
    if report["rules"]:
        rules = Table(show_header=True, header_style="bold", title="by rule")
        for column in ["code", "rule", "safety", "rewrites", "needs a human"] + (["notes"] if notes else []):
            rules.add_column(column)
        for r in report["rules"]:
            rules.add_row(r["code"], r["name"], r["safety"], str(r["rewrites"]), str(r["findings"]),
                          *([str(r.get("notes", 0))] if notes else []))
        console.print(rules)
    from rich.text import Text

    def line(*parts) -> None:
        console.print(Text.assemble(*parts), soft_wrap=True)

    # The lines per file and per finding come before it (porter.report.output_formats).
    for x in report["skipped"]:
        line((f"{x['path']}: skipped: {x['reason']}", "dim"))
    for note in report["runtime"]["notes"]:
        line((note, "green"))
    unaccounted = (report.get("ledger") or {}).get("counts", {}).get("unaccounted", 0)
    line((ledger_line(report), "yellow" if unaccounted else "dim"))
