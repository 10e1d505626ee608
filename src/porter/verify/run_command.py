"""``porter verify --run``: run a command in the tree with the children's environment and
find where it failed."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from porter.verify.processes import GRACE, _kill, _kill_group, _read, _tree_frames
from porter.verify.records import RunCommandResult, VerifyOptions
from porter.verify.tracebacks import find_failure, last_line


def run_command(command: str, options: VerifyOptions, env) -> RunCommandResult:
    """Run ``command`` in the tree's root with the children's environment. Its output is
    kept (the tail goes in the result) and, with ``options.echo``, shown as it comes."""
    began = time.monotonic()
    status = "ok"
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(command, shell=True, cwd=options.root, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=os.name == "posix")
        if options.echo is not None:
            options.echo.write(f"porter verify: running {command}\n".encode())
        pump = threading.Thread(target=_pump, args=(proc.stdout, out, options.echo), daemon=True)
        pump.start()
        try:
            proc.wait(timeout=options.run_timeout)
        except subprocess.TimeoutExpired:
            _kill(proc, threading.Event())
            proc.wait()
            status = "timeout"
        finally:
            _kill_group(proc)  # what the command left running (and all of it on Ctrl-C)
            pump.join(timeout=GRACE)
        text = _read(out, 0)
    code = proc.returncode
    if status == "ok" and code != 0:
        status = "failed"
    result = RunCommandResult(command, code, round(time.monotonic() - began, 3), status, text[-6000:],
                              full_output=text)
    if status != "ok":
        _locate(result, text, options.root, status == "timeout" and f"timed out after {options.run_timeout:g} s")
    return result


def _locate(result: RunCommandResult, text: str, root: Path, timed_out) -> None:
    """Where the command failed: the failing process's traceback (a launcher's child's,
    not the launcher's own; see porter.verify.tracebacks), at its deepest frame in the tree."""
    failure = find_failure(text, lambda frames: _tree_frames(frames, root))
    tb = failure.traceback
    if tb is not None:
        result.frames = _tree_frames(tb.frames, root)
        result.location = result.frames[0] if result.frames else None
        result.missing = failure.missing
    rank = tb.rank if tb is not None and tb.rank is not None else (failure.root.rank if failure.root else None)
    result.rank = rank
    said = tb.exception if tb is not None and tb.exception and result.frames else last_line(text)
    if timed_out:
        result.error = timed_out
    else:
        result.error = f"exit {result.returncode}: {f'rank {rank}: ' if rank is not None else ''}{said}"


def _pump(source, sink, echo) -> None:
    """Copy a pipe into ``sink`` (and to ``echo``, a binary stream) until it closes."""
    for chunk in iter(lambda: source.read1(65536), b""):
        sink.write(chunk)
        if echo is not None:
            try:
                echo.write(chunk)
                echo.flush()
            except (OSError, ValueError):
                echo = None
    sink.flush()
