"""Turning results into changes on disk or on stdout: atomic writes, diffs, vendoring."""

from __future__ import annotations

import json
import importlib.util
import os
import re
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional

from porter.files.linediff import unified_lines
from porter.files.runtime_layout import FLAT, is_flat, stale
from porter.files.runtime_shake import held, shake
from porter.files.safe_io import Refused, read_bounded, write_in_root
from porter.files.vendor_write import is_partial, older_partial, vendor_folder

_VERSION = re.compile(r'^__version__\s*=\s*["\']([^"\']+)["\']', re.M)


@dataclass
class Change:
    """A whole-file change: ``old`` None means a new file."""

    path: str  # relative to the root, "/" separators
    old: Optional[bytes]
    new: bytes
    #: a file of the vendored runtime (or the manifest line that ships it), not the user's code
    runtime: bool = False
    #: the vendored copy's folder (relative to the root) for a file of the runtime: the
    #: copy's files are written together (porter.files.vendor_write)
    folder: str = ""


# -- interrupts -----------------------------------------------------------------

#: The signals that stop a run, held while a write is in progress (SIGTERM and SIGHUP
#: raise in porter's main thread: porter.cli.entry).
_STOPPING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold Ctrl-C, SIGTERM and SIGHUP until the block ends, then act on the first as the
    handler before would (only the main thread may set a handler; elsewhere the block runs
    as is). A signal during a write takes effect once it is done: one between creating the
    temporary file and the ``try`` that removes it would leave it in the user's tree."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list = []
    previous = {signum: signal.signal(signum, lambda n, frame: caught.append((n, frame))) for signum in _STOPPING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            signum, frame = caught[0]
            handler = previous[signum]
            if callable(handler):
                handler(signum, frame)  # Python's default for SIGINT raises KeyboardInterrupt
            elif handler == signal.SIG_DFL and signum == signal.SIGINT:
                raise KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                signal.raise_signal(signum)


# -- vendoring -----------------------------------------------------------------

def runtime_source() -> Path:
    """The installed runtime's folder, found without importing it (and so torch)."""
    spec = importlib.util.find_spec("porter_runtime")
    if spec is None or spec.origin is None:  # pragma: no cover - broken install
        raise RuntimeError("porter_runtime is not installed next to porter")
    return Path(spec.origin).parent


def runtime_version() -> str:
    version = vendored_version(runtime_source())
    if version is None:  # pragma: no cover - broken install
        raise RuntimeError("porter_runtime has no __version__")
    return version


def _version_tuple(text: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+-]", text))


def vendored_version(folder: Path) -> Optional[str]:
    try:
        match = _VERSION.search((folder / "__init__.py").read_text(encoding="utf-8"))
    except OSError:
        return None
    return match.group(1) if match else None


def vendor_changes(target: Path, root: Path, write: bool = True,
                   parts: Optional[frozenset[str]] = None) -> tuple[list[Change], str]:
    """The file changes that bring ``target`` to porter's runtime, and a note (in the
    future tense, "would vendor", when the run writes nothing).

    ``parts`` are what the port needs of the runtime (porter.project.vendoring.runtime_modules,
    porter.files.runtime_shake; None: all of it); what a copy already holds stays, so a
    copy only grows. Nothing changes when the vendored copy is as new as porter's or
    newer; a copy of the same version that differs from what porter writes for what it
    holds (edited by hand) is left alone and the note says so.
    """
    ours = runtime_version()
    # a stopped run's half copy: rewritten whole
    partial = is_partial(target) or (target.is_dir() and older_partial(target, runtime_files()))
    theirs = None if partial else vendored_version(target)
    flat = theirs is not None and is_flat(target)  # an older porter's layout: moved, never "edited"
    holds = held(target, runtime_source(), FLAT if flat else None) if theirs is not None else frozenset()
    wanted, whole = runtime_files(None if parts is None else parts | holds), runtime_files()
    rel = Path(os.path.relpath(target, root)).as_posix()
    if theirs is not None:
        if _version_tuple(theirs) > _version_tuple(ours):
            return [], f"vendored runtime {theirs} at {rel}/ is newer than porter's {ours}; left as is"
        if theirs == ours and not flat:
            mine = runtime_files(holds)  # a copy sized to the port, or held whole
            edited = any(read_or_none(target / n) not in (None, d, whole.get(n)) for n, d in mine.items())
            note = f"vendored runtime at {rel}/ was edited by hand; left as is" if edited else ""
            if edited or all(read_or_none(target / n) in (d, whole.get(n)) for n, d in wanted.items()):
                return [], note
    changes = []
    for name, data in wanted.items():
        old = None if partial else read_or_none(target / name)
        if old != data and old != whole.get(name):  # a module held whole (--full-runtime) holds all of it
            changes.append(Change(f"{rel}/{name}", old, data, runtime=True, folder=rel))
    if theirs and theirs != ours:
        note = (f"porter_runtime updated from {theirs} to {ours} at {rel}/" if write
                else f"would update porter_runtime from {theirs} to {ours} at {rel}/")
    elif theirs:
        what = gained(changes)
        note = "" if not what else f"porter_runtime at {rel}/: added {what}" if write else \
            f"would add {what} to porter_runtime at {rel}/"
    else:
        note = f"porter_runtime {ours} vendored at {rel}/" if write else f"would vendor porter_runtime {ours} at {rel}/"
    if flat:
        removed = ", ".join(stale(target))
        note = (f"porter_runtime at {rel}/ moved from an older porter's flat layout into sub-packages"
                f"{f', replacing {removed}' if removed else ''}" if write else
                f"would move porter_runtime at {rel}/ from an older porter's flat layout into sub-packages"
                f"{f' (--write also removes {removed})' if removed else ''}")
    return changes, note


def gained(changes: Iterable[Change], known: Optional[Iterable[str]] = None) -> str:
    """What a copy gains, in words: modules it lacked, and more of held modules.
    ``known``: the copy's files so far (default: those on disk)."""
    known = None if known is None else set(known)
    names = [(_inside(c), c.old is None if known is None else c.path not in known) for c in changes]
    added = ", ".join(n for n, new in names if new)
    grown = ", ".join(n for n, new in names if not new)
    return " and ".join(filter(None, [added, f"more of {grown}" if grown else ""]))


def _inside(change: Change) -> str:
    """A runtime file's path inside its copy (``twins/memory.py``)."""
    return change.path[len(change.folder) + 1:] if change.folder else change.path.rsplit("/", 1)[-1]


def runtime_files(parts: Optional[frozenset[str]] = None) -> dict[str, bytes]:
    """The runtime's files, by path inside the package, plus the version stamp: every
    module whole, or the modules ``parts`` needs, shaken (porter.files.runtime_shake)."""
    source = runtime_source()
    files = {
        p.relative_to(source).as_posix(): p.read_bytes()
        for p in sorted(source.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
        and ((p.suffix == ".py" and parts is None) or p.name == "README.md")
    }
    if parts is not None:
        files.update({f"{stem}.py": data for stem, data in shake(source, parts).items()})
        files = dict(sorted(files.items()))
    version = runtime_version()
    files["VENDORED.txt"] = (
        f"porter_runtime {version}, vendored by porter.\n"
        "Do not edit: `porter migrate --write` refreshes this folder when porter's copy is newer.\n"
        "It needs nothing but torch.\n"
    ).encode()
    packages = ["porter_runtime"] + [f"porter_runtime.{rel[:-len('/__init__.py')].replace('/', '.')}"
                                     for rel in files if rel.endswith("/__init__.py")]
    files["pyproject.toml"] = _PYPROJECT.format(version=version, packages=json.dumps(packages)).encode()
    return files


#: Makes a vendored copy installable on its own (``pip install ./porter_runtime``: the
#: folder is the package) and keeps the repository's ruff off porter's code.
_PYPROJECT = """\
# porter_runtime, vendored by porter. `pip install ./porter_runtime` installs this folder
# as the porter_runtime package, for scripts that run from outside the repository root.
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "porter-runtime"
version = "{version}"
description = "The device shim that code ported by porter calls"
requires-python = ">=3.9"
dependencies = ["torch"]

[tool.setuptools]
package-dir = {{"porter_runtime" = "."}}
packages = {packages}

[tool.ruff]
exclude = ["*"]  # porter's own code, checked where porter is developed
"""


def read_or_none(path: Path, limit: int = 64 << 20) -> Optional[bytes]:
    """A regular file's bytes (bounded, never blocking on a FIFO), or None."""
    try:
        return read_bounded(path, limit)
    except OSError:
        return None


# -- diffs -----------------------------------------------------------------------

_GIT_ESCAPES = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r",
                0x22: '\\"', 0x5C: "\\\\"}


def git_quote(name: str) -> str:
    """A path as git writes it in a diff header: as is, or in double quotes with C escapes
    and octal bytes when it holds a control character, a quote, a backslash or a byte
    outside ASCII (``core.quotePath``); ``git apply`` reads both."""
    data = os.fsencode(name)
    if not any(b < 0x20 or b >= 0x7F or b in (0x22, 0x5C) for b in data):
        return name
    return '"' + "".join(_GIT_ESCAPES.get(b) or (chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}") for b in data) + '"'


def unified_diff(change: Change) -> bytes:
    """A ``git apply``-able diff of one file, byte for byte in the file's own encoding.

    Lines are split where git splits them, at b"\\n" only: a form feed, U+2028, a lone
    CR or a BOM stays inside its line (``str.splitlines`` cut lines there, and a BOM
    decoded away came back at the top of the diff body), so the diff applies to the
    file as it is on disk. Bytes map one to one to latin-1 characters for the line matcher.
    """
    old_text = change.old.decode("latin-1") if change.old is not None else ""
    new_text = change.new.decode("latin-1")
    a, b = git_quote(f"a/{change.path}"), git_quote(f"b/{change.path}")
    old_name = a if change.old is not None else "/dev/null"
    header = f"diff --git {a} {b}\n"
    if change.old is None:
        header += "new file mode 100644\n"
    header += f"--- {old_name}\n+++ {b}\n"
    body = []
    for line in unified_lines(_lines(old_text), _lines(new_text), n=3):  # linear in practice (porter.files.linediff)
        if line.startswith("@@"):
            body.append(line + "\n")
        elif line.endswith("\n"):
            body.append(line)
        else:
            body.append(line + "\n\\ No newline at end of file\n")
    return header.encode("utf-8") + "".join(body).encode("latin-1")


def _lines(text: str) -> list[str]:
    """Lines as git sees them: ended by "\\n" alone, the end kept."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return lines + [parts[-1]] if parts[-1] else lines


_COLOURS = {b"+": b"\x1b[32m", b"-": b"\x1b[31m", b"@": b"\x1b[36m"}


def colourise(diff: bytes) -> bytes:
    out = []
    for line in diff.splitlines(keepends=True):
        if line.startswith((b"+++", b"---", b"diff --git", b"new file")):
            out.append(b"\x1b[1m" + line.rstrip(b"\n") + b"\x1b[0m\n")
        elif line[:1] in _COLOURS:
            out.append(_COLOURS[line[:1]] + line.rstrip(b"\n") + b"\x1b[0m\n")
        else:
            out.append(line)
    return b"".join(out)


def apply_changes(root: Path, changes: Iterable[Change]) -> list[tuple[str, str]]:
    """Write every change atomically; returns (path, error) for the ones that failed.

    A change is written only onto the bytes it was computed from, checked again just
    before the rename: a file that vanished, was edited during the run, is read-only,
    or lies behind a symbolic link is left exactly as it is and reported. The files of
    one vendored copy are written together, as one folder (porter.files.vendor_write).
    """
    failed = []
    copies: dict[str, list[Change]] = {}
    for change in changes:
        if change.folder:
            copies.setdefault(change.folder, []).append(change)
            continue
        try:
            with _interrupts_deferred():
                write_in_root(root, change.path, change.new, change.old)
        except OSError as exc:
            failed.append((change.path, _reason(exc)))
    for folder, files in copies.items():
        inside = [(c.path[len(folder) + 1:], c.old, c.new) for c in files]
        try:
            with _interrupts_deferred():
                vendor_folder(root, folder, inside)
        except OSError as exc:
            failed += [(c.path, _reason(exc)) for c in files]
    return failed


def _reason(exc: OSError) -> str:
    if isinstance(exc, Refused):
        return str(exc)
    return f"cannot write: {exc.strerror or exc}"
