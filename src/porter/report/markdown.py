"""The migration report in Markdown: a pull-request description a reviewer can trust.

What changed and why (per rule: counts and files, not the diff again line by line),
what porter_runtime is, why CUDA behaves as before, how to try it on a Mac (with the
repository's own command: porter.report.entry_point), and what
needs a human, the items that need one first. Every path is relative to the root: the
report never shows where the tree sat on the machine that ported it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from porter.engine.registry import by_code
from porter.report import entry_point
from porter.report.output_formats import PENDING_MODES, severity, state_label

#: A note that a copy of the runtime got one more module: the PR tells the copy once.
_ADDED = re.compile(r"(added|would add) .* to porter_runtime at ")
#: Files named per rule before "and N more".
FILES_SHOWN = 5

RUNTIME = (
    "`porter_runtime` is a small package vendored into this repository (PyTorch and the "
    "standard library only: no new dependency). The rewritten code asks it instead of naming "
    "CUDA: `porter_runtime.device()` is CUDA where CUDA is available, else Apple's MPS, else "
    "the CPU, and each other helper makes the CUDA call's own choice on CUDA and the nearest "
    "honest equivalent elsewhere. It never pretends: `torch.cuda.is_available()` still answers "
    "`False` on a Mac, and where it must change a dtype or do without a CUDA-only feature it "
    "says so once, in a warning that names the reason."
)

CUDA_SAME = (
    "Every rewrite here is a safe fix: on a machine with CUDA it means exactly what the code "
    "meant before (there `porter_runtime.device()` is `torch.device(\"cuda\")`, and each "
    "helper calls the CUDA function it replaces). Nothing that could change behaviour on CUDA "
    "was rewritten{unsafe}; such code is listed under \"Needs a human\" instead. "
    "`porter explain CODE` shows each rule's reasoning and examples."
)

MPS_FALLBACK = """\
`PYTORCH_ENABLE_MPS_FALLBACK=1` lets an operator MPS does not implement run on the CPU
instead of stopping with `NotImplementedError` (slower, and torch warns once per operator).
`porter_runtime` sets it on macOS when it is imported before torch; set it yourself when
torch comes first."""


def to_markdown(report: dict[str, Any]) -> str:
    mac = entry_point.mac_commands(entry_point.find(Path(report["root"])))
    report = _relative(report, report["root"])
    lines = _title(report)
    lines += _changes(report)
    lines += ["## What `porter_runtime` is", "", RUNTIME, ""] if _uses_runtime(report) else []
    lines += ["## How CUDA stays the same", "", CUDA_SAME.format(unsafe=_unsafe(report)), ""]
    lines += ["## How to test on a Mac", "", mac, "", MPS_FALLBACK, ""]
    lines += _needs_a_human(report)
    lines += _not_processed(report)
    lines += _ledger(report.get("ledger"))
    return "\n".join(lines).rstrip("\n") + "\n"


def _title(report: dict[str, Any]) -> list[str]:
    s = report["summary"]
    pending = report["mode"] in PENDING_MODES
    humans = _count(s["findings"], "item")
    lines = ["# Port to Apple Silicon (MPS) and CPU, unchanged on CUDA", "",
             f"{_count(s['files_changed'], 'file')} {'would change' if pending else 'changed'} "
             f"({_count(s['rewrites'], 'rewrite')}) out of {_count(s['files_scanned'], 'file')} scanned; "
             f"{humans} {'needs' if s['findings'] == 1 else 'need'} a human. "
             f"Made by porter {report['tool']['version']}."]
    if pending:
        lines += ["", f"> A preview (`porter migrate` in {report['mode']} mode): nothing was written; "
                      "`porter migrate --write` makes these changes."]
    return lines + [""]


def _changes(report: dict[str, Any]) -> list[str]:
    files: dict[str, list[str]] = defaultdict(list)
    for entry in report["files"]:
        for code in dict.fromkeys(x["code"] for x in entry["rewrites"]):
            files[code].append(entry["path"])
    rules = [r for r in report["rules"] if r["rewrites"]]
    if not rules:
        return ["## What changed and why", "", "No code needed a rewrite.", ""]
    lines = ["## What changed and why", "", "| rule | what it does | rewrites | files |", "|---|---|---:|---|"]
    for r in rules:
        rule = by_code(r["code"])
        summary = rule.summary() if rule else ""
        lines.append(f"| {r['code']} {r['name']} | {_cell(summary)} | {r['rewrites']} | {_files(files[r['code']])} |")
    lines += ["", "Why at all: each rewritten line names CUDA, and without CUDA it stops with "
              "`AssertionError: Torch not compiled with CUDA enabled` or runs on the CPU without saying so."]
    notes = [n for n in report["runtime"]["notes"] if not _ADDED.match(n)]  # one copy, told once
    if notes:
        lines += [""] + [f"- {_cell(note)}" for note in notes]
    return lines + [""]


def _files(paths: list[str]) -> str:
    shown = ", ".join(f"{_code(p)}" for p in paths[:FILES_SHOWN])
    more = len(paths) - FILES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _uses_runtime(report: dict[str, Any]) -> bool:
    return bool(report["runtime"]["changes"]) or any(
        "porter_runtime" in x["after"] for entry in report["files"] for x in entry["rewrites"])


def _unsafe(report: dict[str, Any]) -> str:
    unsafe = [r["code"] for r in report["rules"] if r["safety"] == "unsafe" and r["rewrites"]]
    if not unsafe:
        return ""
    return (f", except the opt-in unsafe fixes of {', '.join(unsafe)} (`--unsafe-fixes`), which need "
            "a reviewer's eye on CUDA too")


def _needs_a_human(report: dict[str, Any]) -> list[str]:
    items = [(entry["path"], x) for entry in report["files"] for x in entry["findings"]]
    if not items:
        return ["## Needs a human", "", "Nothing: every CUDA touchpoint was rewritten or needs no change.", ""]
    real = [i for i in items if severity(i[1], "review") != "info"]
    info = [i for i in items if severity(i[1], "review") == "info"]
    lines = [f"## Needs a human ({len(real)})", ""]
    lines += [line for path, x in real for line in _item(path, x)] or ["Nothing."]
    if info:  # no checkbox: nothing to tick off
        lines += ["", f"For information ({len(info)}; nothing to do unless it matters here):", ""]
        lines += [line for path, x in info for line in _item(path, x, bullet="-")]
    return lines + [""]


def _item(path: str, x: dict[str, Any], bullet: str = "- [ ]") -> list[str]:
    where = _code(f"{path}:{x['line']}")
    lines = [f"{bullet} {where} **{x['code']}** {_cell(x['message'])}"]
    if x["suggestion"]:
        lines.append(f"  - suggestion: `{_cell(x['suggestion'])}`")
    return lines


def _not_processed(report: dict[str, Any]) -> list[str]:
    failed = [f for f in report["files"] if f["status"] == "error"]
    if not failed and not report["skipped"]:
        return []
    lines = ["## Files not processed", "", "| file | reason |", "|---|---|"]
    lines += [f"| {_code(f['path'])} | {_cell(f['error'])} |" for f in failed]
    lines += [f"| {_code(x['path'])} | {_cell(x['reason'])} (skipped) |" for x in report["skipped"]]
    return lines + [""]


def _ledger(data) -> list[str]:
    """The ledger's counts per state and per file (porter.project.touchpoints.ledger), folded away: the
    unaccounted touchpoints are PT999 findings, listed under "Needs a human"."""
    if not data or not data["files"]:
        return []
    states = data["states"]
    lines = ["<details><summary>Every CUDA touchpoint porter found, and how the port accounts for it</summary>",
             "", "| file | " + " | ".join(state_label(s) for s in states) + " |", "|---|" + "---:|" * len(states)]
    lines.append("| **all files** | " + " | ".join(f"**{data['counts'][s]}**" for s in states) + " |")
    lines += [f"| {_code(f['path'])} | " + " | ".join(str(f["counts"][s]) for s in states) + " |"
              for f in data["files"]]
    return lines + ["", "</details>", ""]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _code(name: str) -> str:
    """A file name as a Markdown code span in a table or a list: control characters
    shown escaped, "|" escaped for the table, fenced by more backticks than it holds."""
    shown = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name).replace("|", "\\|")
    fence = "`" * (max((len(m) for m in re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _relative(value, root: str):
    """``value`` with the root's absolute path taken out of every string."""
    if isinstance(value, str):
        return value.replace(root.rstrip("/") + "/", "").replace(root, ".")
    if isinstance(value, dict):
        return {k: _relative(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, root) for v in value]
    return value
