"""``porter verify``'s output: terminal lines (rich) and JSON data."""

from __future__ import annotations

from typing import Any, Optional

from porter.verify.command import VerifyReport
from porter.verify.mapping import Mapping

SCHEMA_VERSION = 1
#: What the emulation is, wherever it is reported (porter_runtime's info line says the same).
EMULATION_LABEL = "emulating MPS on the CPU: checks MPS's rules, not its numerics or speed"
CUDA_EMULATION_LABEL = ("on an emulated CUDA machine (tensors on the CPU): shows which paths the code takes on "
                        "CUDA and what it computes there, not CUDA's kernels, numerics or speed")


def to_data(report: VerifyReport) -> dict[str, Any]:
    def where(loc):
        return {"path": loc[0], "line": loc[1]} if loc else None

    def mapping(m: Optional[Mapping]):
        if m is None:
            return None
        return {"cause": m.cause, "named": m.named, "text": m.text(), "findings": m.findings,
                "silenced_at": where(m.silenced), "missing_dependency": m.dependency}

    modules = []
    for m in report.modules:
        item: dict[str, Any] = {"module": m.module, "path": m.path, "status": m.status, "seconds": m.seconds,
                                "imports_only": m.script}
        if m.status != "ok":
            item.update({"error": m.error, "error_type": m.error_type, "location": where(m.location),
                         "frames": [where(f) for f in m.frames], "missing_modules": m.missing,
                         "hidden_packages": m.hidden, "mapping": mapping(m.mapping),
                         "traceback": m.traceback, "output": m.output})
        modules.append(item)
    run = None
    if report.run is not None:
        r = report.run
        run = {"command": r.command, "status": r.status, "returncode": r.returncode, "seconds": r.seconds,
               "error": r.error, "location": where(r.location), "rank": r.rank,
               "frames": [where(f) for f in r.frames], "missing_modules": r.missing,
               "mapping": mapping(r.mapping), "output": r.output}
    return {
        "schema_version": SCHEMA_VERSION,
        "root": str(report.root),
        "python": report.python,
        "ok": report.ok,
        "summary": {**report.counts(), "seconds": report.seconds},
        "workers": report.workers,
        "pending_rewrites": report.pending_rewrites,
        "cuda_available_in_children": report.cuda_available,
        "analysis_error": report.analysis_error or None,
        "modules": modules,
        "skipped": [{"path": s.rel, "reason": s.reason} for s in report.skipped],
        "run": run,
        "emulate": _emulation_data(report),
        "against": _differential_data(report.differential),
    }


def _emulation_data(report: VerifyReport) -> Optional[dict[str, Any]]:
    if not report.emulate:
        return None
    if report.emulate == "cuda":
        return {"device": "cuda", "label": CUDA_EMULATION_LABEL}
    return {"device": report.emulate, "label": EMULATION_LABEL, "started": report.emulation_started,
            "fallbacks": report.fallbacks}


_STYLE = {"ok": "green", "failed": "bold red", "timeout": "bold yellow", "crashed": "bold red"}
_LABEL = {"ok": "ok", "failed": "FAILED", "timeout": "TIMEOUT", "crashed": "CRASHED"}


def render(report: VerifyReport, console, quiet: bool = False) -> None:
    from rich.markup import escape

    mode = CUDA_EMULATION_LABEL if report.emulate == "cuda" else \
        f"CUDA hidden; {EMULATION_LABEL}" if report.emulate else \
        "on this machine's CUDA" if report.differential is not None else "CUDA hidden"
    console.print(f"porter verify: {escape(str(report.root))}  ({mode}; python: {escape(report.python)})",
                  soft_wrap=True)
    width = max([len(m.path) for m in report.modules] + [len(s.rel) for s in report.skipped] + [4])
    for m in report.modules:
        if quiet and m.status == "ok":
            continue
        label = f"[{_STYLE[m.status]}]{_LABEL[m.status]:<8}[/]"
        if m.status == "ok":
            script = "  (a script: its imports only)" if m.script else ""
            console.print(f"  {label} {escape(m.path):<{width}}  {m.seconds:.1f} s{script}", soft_wrap=True)
            continue
        loc = f"{m.location[0]}:{m.location[1]}" if m.location else m.path
        console.print(f"  {label} {escape(m.path):<{width}}  {escape(loc)}: {escape(m.error)}", soft_wrap=True)
        if m.mapping is not None and (m.mapping.named or m.status != "timeout"):
            console.print("  " + " " * 9 + _mapping_line(m.mapping), soft_wrap=True)
    if not quiet:
        for skipped in report.skipped:
            console.print(f"  [dim]{'skipped':<8} {escape(skipped.rel):<{width}}  {escape(skipped.reason)}[/]",
                          soft_wrap=True)
    if report.run is not None:
        r = report.run
        if r.status == "ok":
            console.print(f"  [green]{'ok':<8}[/] --run {escape(r.command)}  ({r.seconds:.1f} s)", soft_wrap=True)
        else:
            label = "TIMEOUT" if r.status == "timeout" else "FAILED"
            console.print(f"  [bold red]{label:<8}[/] --run {escape(r.command)}: {escape(r.error)}", soft_wrap=True)
            if r.location:
                console.print(f"  {' ' * 9}at {escape(r.location[0])}:{r.location[1]}", soft_wrap=True)
            if r.mapping is not None:
                console.print("  " + " " * 9 + _mapping_line(r.mapping), soft_wrap=True)
            tail = "\n".join(r.output.rstrip().splitlines()[-15:])
            if tail and quiet:  # otherwise it was shown as it came
                console.print(escape(tail), soft_wrap=True, style="dim")
    _render_emulation(report, console)
    c = report.counts()
    parts = [f"{c['ok']} ok", f"{c['failed']} failed", f"{c['timeout']} timed out"]
    if c["crashed"]:
        parts.append(f"{c['crashed']} crashed")
    line = f"{c['modules']} module{'' if c['modules'] == 1 else 's'}: " + ", ".join(parts)
    if report.failures:
        line += f"; CUDA: {c['named']} named by porter's report, {c['not_named']} NOT NAMED"
        if c["missing_dependency"]:
            line += f"; {c['missing_dependency']} missing a dependency"
        if c["other"]:
            line += f"; {c['other']} other"
    if report.skipped:
        line += f"; {c['skipped']} files skipped"
    console.print(line + f"  ({report.seconds:.1f} s)", soft_wrap=True)
    if any("torch" in m.missing for m in report.failures):
        console.print(f"hint: {escape(report.python)} can't import torch: pass --python with the project's "
                      "interpreter (or run porter from its environment)", soft_wrap=True)
    if report.cuda_available and report.emulate != "cuda" and report.differential is None:
        console.print("[bold red]warning:[/] torch.cuda.is_available() was True in the children: "
                      "CUDA was not hidden", soft_wrap=True)
    if report.pending_rewrites:
        console.print(f"note: this tree is not (fully) ported: porter would still make {report.pending_rewrites} "
                      "rewrites here (porter migrate --write makes them)", soft_wrap=True)
    if report.analysis_error:
        console.print(f"warning: porter's analysis failed ({escape(report.analysis_error)}): "
                      "failures are not mapped", soft_wrap=True)


def _render_emulation(report: VerifyReport, console) -> None:
    from rich.markup import escape

    _render_differential(report.differential, console)
    if report.emulate != "mps":
        return
    if report.fallbacks:
        console.print(f"MPS fallbacks ({EMULATION_LABEL}): these operators have no MPS kernel in this torch "
                      "and run on the CPU on a Mac, copying their tensors there and back:", soft_wrap=True)
        width = max(len(r["op"]) for r in report.fallbacks)
        for r in report.fallbacks:
            note = " (MPS always runs it on the CPU)" if r.get("always") else ""
            console.print(f"  {escape(r['op']):<{width}}  {r['calls']:>6} call{'s' if r['calls'] != 1 else ' '}  "
                          f"first at {escape(r['first_at'])}{note}", soft_wrap=True)
    if not report.emulation_started:
        console.print("[bold yellow]warning:[/] the MPS emulation never started: no child imported the tree's "
                      "porter_runtime (it starts when the ported code imports it)", soft_wrap=True)


def _differential_data(d: Any) -> Optional[dict[str, Any]]:
    if d is None:
        return None
    return {"original": str(d.original), "command": d.command, "emulated_cuda": d.emulated, "verdict": d.verdict,
            "same": d.same, "original_status": d.original_status, "port_status": d.port_status,
            "spread": d.spread, "error": d.error or None,
            "compared": [{"what": what, "difference": diff, "why": why} for what, diff, why in d.rows]}


def _render_differential(d: Any, console) -> None:
    from rich.markup import escape

    if d is None:
        return
    where = "an emulated CUDA machine" if d.emulated else "this machine's CUDA"
    style = "green" if d.same else "bold red"
    console.print(f"CUDA unchanged? [{style}]{d.verdict}[/]: {escape(d.command)} on the original "
                  f"({escape(str(d.original))}) and on the port, on {where}", soft_wrap=True)
    if d.error:
        console.print(f"  {escape(d.error)}", soft_wrap=True)
    if d.original_status != d.port_status:
        console.print(f"  the original's run: {d.original_status}; the port's: {d.port_status}", soft_wrap=True)
    for what, diff, why in d.rows[:12]:
        if diff == 0.0 and d.same:
            continue
        size = "incomparable" if diff is None else f"{diff:.2e}" if diff else "identical"
        console.print(f"  {escape(what)}: {size}{'  (' + escape(why) + ')' if why else ''}", soft_wrap=True)
    if d.spread is not None:
        console.print(f"  the original against itself: {d.spread:.2e}", soft_wrap=True)


def _mapping_line(mapping: Mapping) -> str:
    from rich.markup import escape

    if mapping.named:
        return f"[cyan]→ CUDA: {escape(mapping.text())}[/]"
    if mapping.dependency:
        return f"[yellow]→ {escape(mapping.text())}[/]: install it (or declare it) and run verify again"
    if mapping.silenced:
        return (f"[magenta]→ {escape(mapping.text())}[/]: silenced by `# porter: ignore` at "
                f"{escape(mapping.silenced[0])}:{mapping.silenced[1]}")
    if mapping.cause == "other":
        return f"[dim]→ {escape(mapping.text())}[/] (a porter bug only if the cause is CUDA)"
    return f"[bold magenta]→ {escape(mapping.text())}[/] (a porter bug: please report it)"
