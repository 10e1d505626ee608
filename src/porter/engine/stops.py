"""How a run stops: SIGTERM and SIGHUP raised as :class:`Terminated`, the exit status a
shell gives each stop, and porter's own output failing (``--diff > /dev/full``).

Porter owns its processes. SIGTERM and SIGHUP (``timeout 60 porter migrate ...``, a
closed terminal) are raised as :class:`Terminated`, and the commands stop on it as on
Ctrl-C: worker processes are shut down (a worker also exits on its own when its parent
dies: porter.engine.run), ``verify``'s children and their groups are killed, temporary
folders are removed, writes in progress finish first (porter.files.apply), and porter
exits with ``128 + signal`` as a shell does. Installed by the console script
(porter.cli.entry) before anything heavy is imported.
"""

from __future__ import annotations

import errno
import os
import signal
import sys


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the main thread is. Not a ``KeyboardInterrupt``
    (click would print "Aborted!" and exit 1), nor an ``Exception`` (no handler of one
    may take it for a failure of its own): every ``finally`` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_code(exc: BaseException) -> int:
    """A shell's exit status for a run stopped by ``exc``: 143 for SIGTERM, 129 for SIGHUP, 130 for Ctrl-C."""
    return 128 + exc.signum if isinstance(exc, Terminated) else 130


#: What the commands stop on.
STOPS = (KeyboardInterrupt, Terminated)

#: What a write to a full disk, a closed pipe or a dead terminal raises: for porter's own
#: output (a file it writes reports its failure per file, with the file's name).
_OUTPUT_ERRORS = {errno.ENOSPC, errno.EIO, errno.EFBIG, errno.EPIPE, getattr(errno, "EDQUOT", errno.ENOSPC)}


def output_failed(exc: OSError) -> bool:
    """Whether ``exc`` is a failed write of porter's output (``--diff > /dev/full``)."""
    return exc.filename is None and exc.errno in _OUTPUT_ERRORS


def stop_output() -> None:
    """Point stdout at /dev/null, so that the flush at exit does not fail a second time."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError):
        pass


def _raise(signum, frame) -> None:
    raise Terminated(signum)


def install() -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread."""
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _raise)
