"""Reading a ``--run`` command's output: which traceback is the failure, and where it is.

A launcher's output holds more than one traceback. ``torchrun`` (``python -m
torch.distributed.run``) prints each failing rank's with a ``[rankN]:`` prefix, then its
own (``ChildFailedError``, all of it inside torch) and a summary table whose *Root Cause*
names the rank, its ``exitcode`` and, with ``@record``, an ``error_file`` and the
traceback. ``accelerate launch`` prints the child's traceback and then its own
``CalledProcessError`` (or torchrun's table). ``mpiexec`` interleaves its ranks' lines,
tagged ``[1,0]<stderr>:`` by Open MPI's ``--tag-output`` or ``[0]`` by MPICH's
``-prepend-rank``. The last traceback is the launcher's, never the cause.

So the lines are split by their rank prefix into one stream per process, each stream's
tracebacks are read, and the failure is the traceback of the root-cause rank (when the
table names one) that reaches into the tree, else the last traceback that does, else the
last one. Its deepest frame inside the tree is where the failure is.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from typing import Optional

#: A launcher's prefix on a child's line: torchrun ([rank1]:, [default1]: with --tee),
#: Open MPI --tag-output ([1,0]<stderr>:), MPICH -prepend-rank ([1] ).
_PREFIX = re.compile(r"^(?:\[(?:rank|default)(?P<rank>\d+)\]:|\[\d+,(?P<mpi>\d+)\]<std(?:out|err)>:"
                     r"|\[(?P<mpich>\d+)\] )")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_MISSING = re.compile(r"ModuleNotFoundError: No module named '(?P<name>[^']+)'")
#: A launcher's own error, saying only that a child failed: the cause is elsewhere.
_LAUNCHER_ERROR = re.compile(r"^(?:[\w.]*\.)?(?:CalledProcessError|ChildFailedError)\b")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*(?P<code>-?\d+)")
_ERROR_FILE = re.compile(r"^\s*error_file\s*:\s*(?P<file>\S+)")
_TABLE_TRACE = re.compile(r"^\s*traceback\s*:\s?(?P<rest>.*)$")


@dataclass
class Traceback:
    """One traceback printed by one process (``rank`` None: not a launcher's child)."""

    rank: Optional[int]
    frames: list[tuple[str, int]]  # outermost first, as printed
    exception: str = ""  # the last line: "RuntimeError: ..."


@dataclass
class RootCause:
    """What torchrun's ChildFailedError table says about the first failure."""

    rank: Optional[int] = None
    exitcode: Optional[int] = None
    error_file: Optional[str] = None


@dataclass
class Failure:
    traceback: Optional[Traceback]
    root: Optional[RootCause] = None
    missing: list[str] = field(default_factory=list)


def streams(text: str) -> dict[tuple[Optional[int], str], list[str]]:
    """The output's lines split into one stream per process, keyed by (rank, channel):
    rank None for lines with no prefix, channel ``"stdout"`` for Open MPI's
    ``<stdout>`` lines and ``""`` otherwise. Open MPI forwards a rank's stdout and
    stderr apart, so a line it printed before its traceback may arrive inside it."""
    out: dict[tuple[Optional[int], str], list[str]] = {}
    for line in text.splitlines():
        match = _PREFIX.match(line)
        rank, channel = None, ""
        if match:
            rank = int(match["rank"] or match["mpi"] or match["mpich"])
            if match.group(0).endswith("<stdout>:"):
                channel = "stdout"
            line = line[match.end():]
            if match["mpich"] is None and line.startswith(" "):
                line = line[1:]  # "[rank1]: Traceback ...": torchrun puts one space after the colon
        out.setdefault((rank, channel), []).append(line)
    return out


def tracebacks(lines: list[str], rank: Optional[int]) -> list[Traceback]:
    """Each ``Traceback (most recent call last):`` block of one stream."""
    found: list[Traceback] = []
    current: Optional[Traceback] = None
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("Traceback (most recent call last):"):
            current = Traceback(rank, [])
            found.append(current)
            continue
        if current is None or current.exception:
            continue
        match = _FRAME.match(line)
        if match:
            current.frames.append((match["file"], int(match["line"])))
        elif stripped and not line.startswith((" ", "\t")):
            current.exception = stripped
    return found


def root_cause(lines: list[str]) -> Optional[RootCause]:
    """torchrun's table: the rank, exit code and error file under "Root Cause"; and the
    traceback it carries (with ``@record``) as extra lines of a stream of that rank."""
    start = next((i for i, line in enumerate(lines) if line.startswith("Root Cause (first observed failure)")), None)
    if start is None:
        return None
    cause = RootCause()
    for line in lines[start + 1:]:
        if line.startswith("====="):
            break
        for pattern, attr, kind in ((_ROOT_RANK, "rank", int), (_EXITCODE, "exitcode", int)):
            match = pattern.match(line)
            if match and getattr(cause, attr) is None:
                setattr(cause, attr, kind(match.group(1)))
        match = _ERROR_FILE.match(line)
        if match and cause.error_file is None and match["file"] != "<N/A>":
            cause.error_file = match["file"]
    return cause


def _table_traceback(lines: list[str], rank: Optional[int]) -> list[Traceback]:
    """The traceback in the root cause's ``traceback :`` field (``@record``)."""
    for i, line in enumerate(lines):
        match = _TABLE_TRACE.match(line)
        if match and match["rest"].startswith("Traceback"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("=====")), len(lines))
            body = textwrap.dedent("\n".join(lines[i + 1:end])).splitlines()  # the table indents it
            return tracebacks([match["rest"], *body], rank)
    return []


def find_failure(text: str, in_tree) -> Failure:
    """The failure in a command's output. ``in_tree(frames)`` gives a traceback's frames
    inside the tree (innermost first): a traceback with some is one of the code's."""
    by_stream = streams(text)
    plain = by_stream.get((None, ""), [])
    root = root_cause(plain)
    every = [tb for (rank, _), lines in by_stream.items() for tb in tracebacks(lines, rank)]
    every += _table_traceback(plain, root.rank if root else None)
    if root is not None and root.rank is not None:
        preferred = [tb for tb in every if tb.rank == root.rank and in_tree(tb.frames)]
    else:
        preferred = []
    own = [tb for tb in every if not _LAUNCHER_ERROR.search(tb.exception)]
    every = own or every
    reaching = [tb for tb in preferred if tb in own] or [tb for tb in every if in_tree(tb.frames)]
    chosen = reaching[-1] if reaching else (every[-1] if every else None)
    missing = []
    if chosen is not None:
        missing = [m["name"] for m in _MISSING.finditer(chosen.exception)]
    return Failure(chosen, root, missing)


def last_line(text: str) -> str:
    """The last line that says something (not a rule of ``=`` or ``-``), prefix removed."""
    for line in reversed(text.strip().splitlines()):
        match = _PREFIX.match(line)
        line = (line[match.end():] if match else line).strip()
        if line and line.strip("=-*") and not line.startswith("To enable traceback"):
            return line
    return "(no output)"
