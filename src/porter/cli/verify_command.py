"""``porter verify``: the command-line face of porter.verify (import every module of a
ported tree with CUDA hidden, map the failures to porter's findings)."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import click

from porter.cli.command_inputs import load_settings, make_run_config
from porter.cli.terminal_text import console as make_console, stderr_console
from porter.engine.discover import find_root
from porter.engine.run import default_jobs
from porter.engine.stops import STOPS, exit_code

VERIFY_EXIT_CODES = """\b
Exit codes:
  0  every module imports (and the --run command exits 0)
  1  a module failed, timed out or crashed (or the --run command failed)
  2  porter could not run the check (a missing path, an unusable --python)"""


def _finite(ctx, param, value):
    """A number of seconds, not nan or inf (FloatRange lets both through)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds", param=param)
    return value


@click.command(epilog=VERIFY_EXIT_CODES)
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--run", "command", metavar="CMD",
              help="Also run CMD (a shell command) in the tree's root with CUDA hidden, e.g. "
                   "\"python train.py --steps 2\".")
@click.option("--timeout", type=click.FloatRange(min=0.1), callback=_finite, default=60.0, show_default=True,
              metavar="SECONDS",
              help="Seconds each module may take to import.")
@click.option("--run-timeout", type=click.FloatRange(min=0.1), callback=_finite, default=None, metavar="SECONDS",
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
@click.option("--output-format", "output_format", type=click.Choice(["text", "json"]), default=None,
              help="text (default): a line per module; json: the results as JSON on stdout.")
@click.option("--format", "old_format", type=click.Choice(["text", "json"]), default=None, hidden=True,
              help="The old spelling of --output-format.")
@click.option("-q", "--quiet", is_flag=True, help="List only the modules that failed.")
@click.option("--emulate", type=click.Choice(["mps", "cuda"]), default=None,
              help="mps: run the code on this CPU under MPS's rules (PORTER_EMULATE=mps for porter_runtime): "
                   "float64 on the device, operators MPS lacks, Gloo collectives of device tensors and the "
                   "spawn start method fail as on a Mac. Checks MPS's rules, not its numerics or speed. "
                   "cuda: run it on an emulated CUDA machine (with --against: the check without a GPU).")
@click.option("--against", type=click.Path(path_type=Path, file_okay=False, exists=True), default=None,
              metavar="ORIGINAL",
              help="With --run: run CMD on copies of ORIGINAL (the tree before porting) and of PATH, on CUDA "
                   "(this machine's, or --emulate cuda), and compare what they write and print: the port "
                   "must compute what the original computes.")
def verify(path, command, timeout, run_timeout, jobs, include_tests, exclude, allow, python, root, config_file,
           output_format, old_format, quiet, emulate, against) -> None:
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
    --against ORIGINAL --emulate cuda --run CMD: CUDA unchanged, shown without a
    GPU. CMD runs on copies of both trees on an emulated CUDA machine (tensors
    on "cuda" kept on the CPU, NCCL carried by Gloo, same seeds); checkpoints,
    JSON and printed numbers are compared. Without --emulate it runs on this
    machine's CUDA (the real check, on a GPU).

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

    output_format = output_format or old_format or "text"
    console = stderr_console()
    try:
        path.lstat()
    except OSError as exc:  # no such file, a name too long (a part over 255 bytes), no permission
        reason = "no such file or folder" if isinstance(exc, FileNotFoundError) else exc.strerror or str(exc)
        console.print(f"porter: error: {path}: {reason}", markup=False, soft_wrap=True)
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
    if against is not None and not command:
        console.print("porter: error: --against needs --run CMD (the command whose results are compared)",
                      markup=False, soft_wrap=True)
        sys.exit(2)
    settings = load_settings(root, config_file)
    # the analysis runs in this process, beside the import workers' threads (no fork)
    config = make_run_config([path], root, settings, (), (), exclude, None, None, 1)
    found = discover([path.absolute()], root, config.excludes, skip=[config.runtime_target], patterns=["*.py"])
    options = VerifyOptions(path=path.absolute(), root=root, python=python, timeout=timeout,
                            jobs=jobs or default_jobs(), include_tests=include_tests, excludes=config.excludes,
                            allow=allow, run=command, run_timeout=run_timeout,
                            echo=sys.stderr.buffer if output_format == "text" and not quiet else None,
                            emulate=emulate, against=against)
    try:
        report = run_verify(options, sorted(found.files), config)
    except OSError as exc:
        console.print(f"porter: error: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    except STOPS as exc:  # Ctrl-C, SIGTERM, SIGHUP: the children are stopped with it
        console.print("porter: interrupted", markup=False)
        sys.exit(exit_code(exc))
    if output_format == "json":
        import json

        click.echo(json.dumps(to_data(report), indent=2))
    else:
        render(report, make_console(stderr=False, markup=True), quiet=quiet)  # its markup escapes the tree's text
    sys.exit(0 if report.ok else 1)


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
