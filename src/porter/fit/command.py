"""``porter fit``: the largest batch size whose run fits this machine's memory.

It runs the user's short training command (``python train.py --max_iters=3``) once
per candidate value and reads the peak memory that the vendored porter_runtime
records inside each run; see fit_search for the search and fit_params for how a
value reaches the command. Unlike ``migrate``, this command runs the target's code.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Optional

import click

from porter.fit.params import (
    STYLES,
    Param,
    ParamError,
    apply,
    command_line,
    locate,
    processes,
)
from porter.fit.search import (
    DEFAULT_FRACTION,
    ERROR,
    Budget,
    Outcome,
    Runner,
    Space,
    Trial,
    human,
    search,
)

EXIT_CODES = """\b
Exit codes:
  0  a value fits: its command line is printed on stdout
  1  nothing fits, not even the smallest value
  2  bad input, or a run failed for a reason other than memory
     (its error is shown and the search stops there)"""


class FitError(click.ClickException):
    exit_code = 2


@click.command(epilog=EXIT_CODES, options_metavar="[OPTIONS] --", context_settings={"ignore_unknown_options": True,
                                                    "allow_interspersed_args": False})
@click.option("--param", "param_name", metavar="NAME", default="batch_size", show_default=True,
              help="The batch-size parameter: a flag (batch_size matches --batch_size and --batch-size), "
                   "a key=value override (data.batch_size) or an environment variable.")
@click.option("--via", type=click.Choice(STYLES), default="auto", show_default=True,
              help="How the command takes it; auto: a flag, else key=value, else the environment.")
@click.option("--accum", "accum_name", metavar="NAME",
              help="The gradient-accumulation parameter (passed the same ways): keep the original "
                   "global batch, micro-batch x accumulation x processes.")
@click.option("--budget", "budget_text", metavar="SIZE", default=f"{DEFAULT_FRACTION:.0%}", show_default=True,
              help="Peak memory a run may use: a size (6GiB, 6G, 6000MB) or a percentage of what the "
                   "device can use (CUDA: total memory; MPS: recommended maximum working set; CPU: "
                   "RAM available when the first run starts).")
@click.option("--timeout", metavar="SECONDS", type=click.FloatRange(min=1), default=600, show_default=True,
              help="Seconds a run may take; a run past it counts as not fitting.")
@click.option("--multiple-of", metavar="K", type=click.IntRange(min=1), default=1, show_default=True,
              help="The upward binary search tries only multiples of this (8: tensor-friendly sizes).")
@click.option("--max-trials", metavar="N", type=click.IntRange(min=1), default=16, show_default=True,
              help="Stop after this many runs and recommend the best so far.")
@click.option("--processes", "processes_n", metavar="N", type=click.IntRange(min=1), default=None,
              help="Processes the command starts, for the global batch "
                   "(default: torchrun's --nproc_per_node or accelerate's --num_processes, else 1).")
@click.option("--output-format", "output_format", type=click.Choice(["text", "json"]), default=None,
              help="text (default); json: print one object on stdout for scripts.")
@click.option("--format", "old_format", type=click.Choice(["text", "json"]), default=None, hidden=True,
              help="The old spelling of --output-format.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def fit(param_name, via, accum_name, budget_text, timeout, multiple_of, max_trials, processes_n,
        output_format, old_format, command) -> None:
    """Find the largest batch size whose run of COMMAND fits in memory.

    This runs COMMAND, your code, several times (porter migrate never runs it): give
    a short run, e.g. `porter fit --accum grad_accum -- python train.py
    --batch_size=768 --grad_accum=1 --max_iters=3`. The command must import
    porter_runtime (a ported repository does); the runtime measures each run's
    peak memory on the device it resolves: CUDA max_memory_allocated, MPS
    driver-allocated memory, CPU peak resident memory.

    From the original value the search halves until a run fits, then binary-searches
    upward. With --accum, every candidate divides the global batch and the
    accumulation makes up the rest. A run that runs out of memory does not fit; a
    run that fails otherwise stops the search and shows its error.
    """
    from rich.console import Console

    console = Console(stderr=True, highlight=False, emoji=False)  # a command line's `:100:` stays as written
    argv = list(command)
    try:
        budget = Budget.parse(budget_text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--budget") from None
    try:
        param = locate(argv, param_name, via, os.environ)
        accum = locate(argv, accum_name, via, os.environ) if accum_name else None
    except ParamError as exc:
        raise FitError(str(exc)) from None
    if accum is not None and accum.slots == param.slots:
        raise FitError("--param and --accum name the same setting")
    nproc = processes_n or processes(argv)
    space = Space(param.original, param.original * accum.original if accum else None, multiple_of)

    allocator = _allocator_env(os.environ, sys.platform)

    def make_command(value: int, accum_value: Optional[int]):
        values = {param: value, **({accum: accum_value} if accum else {})}
        return apply(argv, allocator, values)

    runner = Runner(make_command, budget, timeout)
    json_out = (output_format or old_format) == "json"
    if not json_out:
        _announce(console, argv, param, accum, nproc)
    outcome = _search(console, space, runner, max_trials, param, quiet=json_out)
    data = _result(param, accum, nproc, space, runner, outcome, budget, make_command)
    if json_out:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        _render(console, data, param, accum, outcome)
    sys.stdout.flush()
    if outcome.failed is not None or data["error"]:
        sys.exit(2)
    if data["recommended"] is None:
        sys.exit(1)


#: glibc's default raises its mmap threshold as large blocks are freed and then keeps
#: freed memory in the heap, so a CPU run's peak RSS stops following the batch size
#: (measured on fixtures/fit: batch 12 -> 762 MiB, batch 24 -> 616 MiB). A fixed
#: threshold returns large blocks at once; trials run with it, and so should the run.
GLIBC_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def _allocator_env(environ, platform: str) -> dict:
    if platform.startswith("linux") and not any(k in environ for k in GLIBC_ALLOCATOR):
        return dict(GLIBC_ALLOCATOR)
    return {}


def _announce(console, argv, param: Param, accum: Optional[Param], nproc: int) -> None:
    what = f"{param.name} (original {param.original}, from {param.spelling})"
    if accum is not None:
        what += f" and {accum.name} (original {accum.original}, from {accum.spelling})"
    console.print(f"porter fit: runs your command to measure {what}:", markup=False, soft_wrap=True)
    console.print(f"  {command_line(argv, {})}", markup=False, soft_wrap=True)


def _search(console, space: Space, runner: Runner, max_trials: int, param: Param, quiet: bool) -> Outcome:
    label = param.name

    def describe(value: int) -> str:
        accum = space.accum_for(value)
        return f"{label}={value}" + (f" (accumulation {accum})" if accum is not None else "")

    def run_one(value: int, accum: Optional[int]) -> Trial:
        if quiet or not console.is_terminal:
            if not quiet:
                console.print(f"  trying {describe(value)}", markup=False)
            return runner(value, accum)
        with console.status(f"running {describe(value)}", spinner="dots"):
            return runner(value, accum)

    try:
        return search(space, run_one, max_trials=max_trials)
    except KeyboardInterrupt:
        console.print("porter fit: interrupted", markup=False)
        sys.exit(130)


def _result(param: Param, accum: Optional[Param], nproc: int, space: Space, runner: Runner,
            outcome: Outcome, budget: Budget, make_command) -> dict:
    best = outcome.best if outcome.failed is None else None
    command, env = (None, {})
    if best is not None:
        command, env = make_command(best.value, best.accum)
        if runner.device != "cpu":  # the host allocator matters only for a CPU measure
            env = {k: v for k, v in env.items() if k not in GLIBC_ALLOCATOR}
    original_global = param.original * (accum.original if accum else 1) * nproc
    error = None
    if outcome.failed is not None:
        failed = outcome.failed
        error = (f"the run with {param.name}={failed.value} failed"
                 + (f" (exit status {failed.returncode})" if failed.returncode else "")
                 + ", not for lack of memory; the search stops here")
    capacity, what = runner.capacity
    return {
        "param": param.name, "style": param.style, "original": param.original,
        "accum_param": accum.name if accum else None, "original_accum": accum.original if accum else None,
        "processes": nproc, "original_global_batch": original_global,
        "device": runner.device, "measure": runner.measure,
        "budget_bytes": runner.budget_bytes if runner.budget_bytes is not None else budget.bytes,
        "budget": budget.describe(capacity, what or "the device's memory"),
        "capacity_bytes": capacity or None,
        "recommended": best.value if best else None,
        "recommended_accum": best.accum if best else None,
        "global_batch": (best.value * (best.accum or 1) * nproc) if best else None,
        "keeps_global_batch": (best.value * (best.accum or 1) * nproc == original_global) if best else None,
        "command": command, "env": env, "command_line": command_line(command, env) if command else None,
        "stopped": outcome.stopped or None,
        "error": error,
        "trials": [t.to_json() for t in outcome.trials],
    }


def _render(console, data: dict, param: Param, accum: Optional[Param], outcome: Outcome) -> None:
    from rich.table import Table

    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column(param.name, justify="right")
    if accum is not None:
        table.add_column(accum.name, justify="right")
    for column in ("peak memory", "fits", "s/step"):
        table.add_column(column, justify="right" if column != "fits" else "left")
    for t in outcome.trials:
        verdict = "yes" if t.fits else f"no: {t.status}" if t.status != ERROR else "error"
        row = [str(t.value)] + ([str(t.accum)] if accum is not None else [])
        row += [human(t.peak_bytes), verdict, f"{t.seconds:.3f}" if t.seconds is not None else "-"]
        table.add_row(*row)
    console.print(table)
    console.print(f"budget {data['budget']} on {data['device'] or 'an unknown device'}"
                  + (f", measured as {data['measure']}" if data["measure"] else ""), markup=False, soft_wrap=True)
    if outcome.failed is not None:
        console.print(f"porter fit: error: {data['error']}:", markup=False, soft_wrap=True)
        console.print(outcome.failed.output_tail, markup=False, soft_wrap=True)
        return
    if outcome.stopped:
        console.print(f"porter fit: {outcome.stopped}", markup=False)
    if data["recommended"] is None:
        last = outcome.trials[-1]
        if outcome.stopped:
            console.print(f"no run fit before the search stopped (the last, {param.name}={last.value}: "
                          f"{last.status})", markup=False, soft_wrap=True)
        else:
            console.print(f"nothing fits: even {param.name}={last.value} does not ({last.status})",
                          markup=False, soft_wrap=True)
        return
    console.print(_verdict(data, param, accum), markup=False, soft_wrap=True)
    if any(k in data["env"] for k in GLIBC_ALLOCATOR):
        console.print("(measured with glibc's MALLOC_MMAP_THRESHOLD_ fixed, so that peak memory follows the "
                      "batch size; the command keeps it)", markup=False, soft_wrap=True)
    print(data["command_line"])


def _verdict(data: dict, param: Param, accum: Optional[Param]) -> str:
    value, nproc = data["recommended"], data["processes"]
    if value == param.original and (accum is None or data["recommended_accum"] == accum.original):
        return f"the original {param.name}={value} fits; nothing to change"
    head = f"largest {param.name} that fits: {value}"
    if accum is not None:
        procs = f" x {nproc} processes" if nproc > 1 else ""
        return (f"{head} with {accum.name}={data['recommended_accum']}: global batch "
                f"{data['global_batch']} = {value} x {data['recommended_accum']}{procs}, as the original")
    return (f"{head}; the global batch changes from {data['original_global_batch']} to {data['global_batch']}"
            f" (pass --accum NAME, the gradient-accumulation setting, to keep it)")
