"""The child processes of ``porter verify``: reading their output, ending them (and what
they started), and finding the frames of a failure that lie inside the tree."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import threading
from pathlib import Path
from typing import Optional, Sequence

from porter.project.vendoring.runtime_copy import is_vendored

#: Seconds a worker gets past the module's limit to dump where it is stuck and exit.
GRACE = 5.0

_FAULT_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in ')


def _size(file) -> int:
    try:
        return os.fstat(file.fileno()).st_size
    except OSError:
        return 0


def _read(file, start: int) -> str:
    """The file's bytes from ``start`` (at most the last 20 kB). ``os.pread`` leaves the
    offset alone: the child writes through the same open file."""
    try:
        size = _size(file)
        start = max(start, size - 20000)
        if hasattr(os, "pread"):
            data = os.pread(file.fileno(), size - start, start)
        else:  # pragma: no cover - Windows
            file.seek(start)
            data = file.read()
        return data.decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def _kill(proc: subprocess.Popen, killed: threading.Event) -> None:
    if proc.poll() is None:
        killed.set()
        try:
            proc.kill()
        except OSError:
            pass
    _kill_group(proc)  # even after the worker died: a child it forked may hold its pipe open


def _reap(proc: subprocess.Popen) -> None:
    """Once the worker exits, end what it started: a process a module forked keeps the
    worker's output pipe open, and the read of it would wait for that process's end."""
    proc.wait()
    _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    if os.name == "posix":
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def lines_of(proc: subprocess.Popen, poll: float = 0.5):
    """The worker's output, line by line, until it closes its end of the pipe, or until
    the worker has exited and the pipe is drained: a process it started in a session of
    its own (``setsid()`` after a double fork) may hold the pipe open for ever."""
    fd = proc.stdout.fileno()
    pending = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if selector.select(poll):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                yield from lines
            elif proc.poll() is not None:
                break
    if pending:
        yield pending


#: The variable that marks every process a verify run started, whatever session it moved to.
RUN_MARK = "PORTER_VERIFY_RUN"


def sweep(token: str) -> int:
    """Kill every process that carries this run's mark in its environment: those that left
    their worker's process group (a daemon a module double-forked). Linux reads the mark
    in /proc; elsewhere the process groups are all there is. Returns how many it killed."""
    mark = f"{RUN_MARK}={token}".encode()
    killed = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if mark not in handle.read().split(b"\0"):
                    continue
            os.kill(int(entry), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError):
            continue
    return killed


def _in_tree(filename: str, root: Path) -> Optional[str]:
    if not filename or filename.startswith("<"):
        return None
    try:
        rel = Path(os.path.realpath(filename)).relative_to(Path(os.path.realpath(root)))
    except ValueError:
        return None
    return rel.as_posix()


def _tree_frames(frames: Sequence, root: Path) -> list[tuple[str, int]]:
    """The frames inside the tree, innermost first (input: outermost first), less those
    of the vendored runtime: a failure it raises (the emulation's checks, a refused
    launch) is the line of the code that called it."""
    out = []
    for item in reversed(list(frames)):
        rel = _in_tree(item[0], root)
        if rel is not None and item[1] and not _vendored_runtime(root / rel):
            out.append((rel, int(item[1])))
    return out


def _vendored_runtime(path: Path) -> bool:
    return path.parent.name == "porter_runtime" and is_vendored(path.parent)


def _fault_frames(output: str, root: Path) -> list[tuple[str, int]]:
    """The frames of faulthandler's last dump (innermost first already)."""
    start = output.rfind("Timeout (")
    if start < 0:
        return []
    frames = []
    for line in output[start:].splitlines():
        match = _FAULT_FRAME.match(line)
        if match:
            rel = _in_tree(match["file"], root)
            if rel is not None:
                frames.append((rel, int(match["line"])))
        elif frames and not line.startswith(" "):
            break  # the main thread's stack ended (threads come after)
    return frames
