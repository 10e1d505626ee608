"""``porter doctor``: what porter_runtime would do on this machine, and whether it holds.

The probing lives in porter_runtime.tools.doctor (torch + stdlib, so users of a ported
repo can run ``python -m porter_runtime``); this module only presents it. As in
the rest of the CLI, stdout carries only JSON (``--json``); the tables go to stderr.
Exit codes: 0 every check passed, 1 a check failed, 2 the doctor itself failed.
"""
from __future__ import annotations

import json
from typing import Any

import click


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*(cell if not isinstance(cell, (str, int, float)) else str(cell) for cell in row))
    return table


def _mark(ok: bool) -> Any:
    """A check's mark, styled (the console reads no markup: errors print as written)."""
    from rich.text import Text

    return Text("ok", style="green") if ok else Text("FAIL", style="red")


def _compile_line(comp: dict[str, Any]) -> str:
    if comp["will_compile"]:
        return "torch.compile"
    if comp["DISABLE_COMPILE"]:
        return "eager (DISABLE_COMPILE is set)"
    if comp["problem"]:
        return f"eager ({comp['problem']})"
    return "eager (torch.compile is on by default only on CUDA; PORTER_COMPILE=1 opts in)"


def _summary(report: dict[str, Any]) -> list[Any]:
    torch_info, res, comp = report["torch"], report["resolved"], report["compile"]
    rows = [["porter_runtime", report["porter_runtime"]],
            ["torch", f"{torch_info['version']} ({torch_info['build']})"],
            ["platform", f"{report['platform']['system']} {report['platform']['machine']}, "
                         f"Python {report['platform']['python']}"],
            ["resolved device", res["device"] or f"error: {res['error']}"],
            ["why", res["reason"] or "-"],
            ["compile", _compile_line(comp)],
            ["distributed", f"backend {report['distributed']['backend']}; nccl "
                            f"{report['distributed']['nccl']}, gloo {report['distributed']['gloo']}"]]
    rows += [[name, value] for name, value in report["env"].items() if value not in (None, False)]
    devices = [[d["type"], "yes" if d["available"] else "no", d["count"],
                ", ".join(d["names"]) or "-"] for d in report["devices"]]
    return [_table("porter doctor", ["", ""], rows),
            _table("Devices", ["device", "available", "count", "names"], devices)]


def _details(report: dict[str, Any]) -> list[Any]:
    dtypes = [[dev, dt, "yes" if r["ok"] else "no", r["error"] or ""]
              for dev, probes in report["dtypes"].items() for dt, r in probes.items()]
    attention = [[dev, _mark(a["ok"]), f"{a['max_abs_err']:.2e}", "; ".join(a["errors"])]
                 for dev, a in report["attention"].items()]
    bench = [[b["device"], b["op"], f"{b['ms']:.2f}", f"{b['speedup_vs_cpu']:.2f}x"]
             for b in report["benchmark"]]
    checks = [[c["name"], _mark(c["ok"]), c["detail"]] for c in report["checks"]]
    tables = [_table("Dtype probe", ["device", "dtype", "works", "error"], dtypes),
              _table("Attention vs reference (fp32)", ["device", "", "max abs err", "errors"],
                     attention)]
    if bench:
        tables.append(_table("Micro-benchmark (median)", ["device", "op", "ms", "vs CPU"], bench))
    return tables + [_table("Checks", ["check", "", "detail"], checks)]


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--no-bench", is_flag=True, help="Skip the timed micro-benchmark.")
def doctor(as_json: bool, no_bench: bool) -> None:
    """Report torch, devices, the device porter_runtime resolves and why, dtype support,
    an attention check, compile and distributed support, and a micro-benchmark."""
    try:
        from porter_runtime.tools.doctor import collect

        report = collect(bench=not no_bench)
    except Exception as exc:  # the doctor must say why it could not run
        click.echo(f"porter: error: the doctor failed: {type(exc).__name__}: {exc}", err=True)
        raise SystemExit(2) from exc
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        from porter.cli.terminal_text import stderr_console

        console = stderr_console()
        for table in _summary(report) + _details(report):
            console.print(table)
    raise SystemExit(0 if report["ok"] else 1)
