"""Writing a vendored ``porter_runtime/`` as a whole: never half a runtime.

The new copy is built in a hidden sibling folder (``.porter_runtime.<token>.porter-partial``)
holding a marker file, then renamed into place, then the marker is removed. A run
stopped at any point (Ctrl-C, SIGTERM, SIGKILL, a full disk) leaves either the old copy
or the new one at the name; a sibling it leaves behind, or a copy that still holds the
marker, is recognised as porter's own by the marker and replaced by the next run, never
taken for the user's code.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence

from porter.files.runtime_layout import is_flat, stale
from porter.files.safe_io import Refused, open_folder, parts_of, write_at

#: Inside a copy being built; a folder holding it is an interrupted vendoring.
PARTIAL_MARKER = "PORTER-PARTIAL.txt"
#: Inside an old copy moved aside to be removed: only a folder holding it is porter's to
#: delete (a user's folder that merely has the name is never removed).
OLD_MARKER = "PORTER-OLD.txt"
_PARTIAL = ".porter-partial"
_OLD = ".porter-old"


def is_partial(folder: Path) -> bool:
    """Whether ``folder`` is a copy a stopped run left half-built (porter's own)."""
    try:
        return stat.S_ISREG(os.stat(folder / PARTIAL_MARKER, follow_symlinks=False).st_mode)
    except OSError:
        return False


def older_partial(folder: Path, ours: dict) -> bool:
    """A copy an older porter (one file at a time, no marker) was stopped writing: only
    files of porter's runtime (``ours``), each byte-identical to porter's, or its
    temporary files; no VENDORED.txt, which it wrote after the modules (with it, the
    copy is porter's and a run adds what it lacks)."""
    if os.path.lexists(folder / "VENDORED.txt"):
        return False
    try:
        names = [p for p in folder.rglob("*") if "__pycache__" not in p.parts]
        files = [p for p in names if p.is_file() and not p.is_symlink()]
        if not files or len(files) + sum(p.is_dir() and not p.is_symlink() for p in names) != len(names):
            return False
        for path in files:
            if path.name.startswith(".") and path.name.endswith(".porter-tmp"):
                continue
            if ours.get(path.relative_to(folder).as_posix()) != path.read_bytes():
                return False
    except OSError:
        return False
    return True


def is_leftover_name(name: str) -> bool:
    """A hidden sibling folder of a vendoring that was stopped."""
    return name.startswith(".") and name.endswith((_PARTIAL, _OLD))


def vendor_folder(root: Path, folder_rel: str, files: Sequence[tuple[str, Optional[bytes], bytes]]) -> None:
    """Bring the copy at ``root/folder_rel`` to hold ``files`` ((path inside it, bytes
    porter read there or None, new bytes)), all at once. Files of an existing copy that
    are not named stay. Refused (an OSError) when a file changed since porter read it."""
    parts = parts_of(folder_rel)
    parent = open_folder(root, parts[:-1], create=True)
    name = parts[-1]
    try:
        _remove_leftovers(parent, name)
        existing = _existing_copy(parent, name)
        build = f".{name}.{secrets.token_hex(4)}{_PARTIAL}"
        os.mkdir(build, 0o777, dir_fd=parent)
        try:
            _fill(parent, build, name if existing else None, files)
            _give_to_owner(parent, build)
            _swap(parent, build, name, existing)
        except BaseException:
            _rmtree(parent, build)
            raise
        _unmark(parent, name)
    finally:
        os.close(parent)


def unvendor(root: Path, folder_rel: str) -> None:
    """Remove the copy at ``root/folder_rel`` that this run vendored (porter's: it holds
    VENDORED.txt), moved aside and marked first, so that a stop half-way leaves a
    sibling the next run removes, never half a copy at the name."""
    parts = parts_of(folder_rel)
    parent = open_folder(root, parts[:-1])
    try:
        name = parts[-1]
        if not _is_file(_path_of(parent) / name / "VENDORED.txt"):
            raise Refused(f"not removed: {folder_rel} holds no VENDORED.txt")
        old = f".{name}.{secrets.token_hex(4)}{_OLD}"
        os.rename(name, old, src_dir_fd=parent, dst_dir_fd=parent)
        _mark(parent, old, OLD_MARKER, b"an unneeded porter_runtime moved aside; a later run removes it\n")
        _rmtree(parent, old)
    finally:
        os.close(parent)


def _existing_copy(parent: int, name: str) -> bool:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        raise Refused(f"not written: {name} exists and is not a folder")
    return True


def _fill(parent: int, build: str, existing: Optional[str], files) -> None:
    """The marker first, then the existing copy's files, then the new ones."""
    folder = os.open(build, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    try:
        write_at(folder, PARTIAL_MARKER, b"porter is writing this folder; a later run replaces it\n", None,
                 PARTIAL_MARKER)
    finally:
        os.close(folder)
    base = _path_of(parent)
    if existing is not None and _is_file(base / existing / "VENDORED.txt") and not is_partial(base / existing):
        ours = frozenset(rel for rel, _, _ in files)
        _copy_regular(base / existing, base / build, ours)  # a whole copy: its other modules and links stay
        if is_flat(base / existing) and any(rel == "__init__.py" for rel, _, _ in files):
            for name in stale(base / build):  # an older porter's flat layout, replaced (porter.files.runtime_layout)
                os.unlink(base / build / name)
    for rel, old, new in files:
        if existing is not None and old is not None:
            _check_unchanged(base / existing, rel, old)
        sub = parts_of(rel)
        target = open_folder(base / build, sub[:-1], create=True)
        try:
            current = _read_or_none(target, sub[-1])
            write_at(target, sub[-1], new, current, rel)
        finally:
            os.close(target)


def _is_file(path: Path) -> bool:
    return os.path.isfile(path) and not os.path.islink(path)


def _check_unchanged(folder: Path, rel: str, old: bytes) -> None:
    try:
        now = (folder / rel).read_bytes()
    except OSError:
        now = None
    if now != old:
        raise Refused(f"not written: {rel} changed on disk during the run")


def _read_or_none(folder: int, name: str) -> Optional[bytes]:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=folder)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read()


def _copy_regular(source: Path, target: Path, ours: frozenset = frozenset()) -> None:
    """The regular files, folders and symbolic links (as links, never followed) of an
    existing copy; a link where porter writes one of its files (``ours``) gives way."""
    for dirpath, dirnames, filenames in os.walk(source):
        here = Path(dirpath)
        rel = here.relative_to(source)
        links = [d for d in dirnames if (here / d).is_symlink()]
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and d not in links]
        (target / rel).mkdir(exist_ok=True)
        for filename in [*filenames, *links]:
            path = here / filename
            mode = os.lstat(path).st_mode
            if filename in (PARTIAL_MARKER, OLD_MARKER):
                continue
            if stat.S_ISREG(mode):
                shutil.copy2(path, target / rel / filename, follow_symlinks=False)
            elif stat.S_ISLNK(mode) and (rel / filename).as_posix() not in ours:
                os.symlink(os.readlink(path), target / rel / filename)


def _swap(parent: int, build: str, name: str, existing: bool) -> None:
    """Rename the built copy into place; the old one goes aside first and is removed."""
    if not existing:
        os.rename(build, name, src_dir_fd=parent, dst_dir_fd=parent)
        return
    old = f".{name}.{secrets.token_hex(4)}{_OLD}"
    os.rename(name, old, src_dir_fd=parent, dst_dir_fd=parent)
    try:
        os.rename(build, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        os.rename(old, name, src_dir_fd=parent, dst_dir_fd=parent)
        raise
    _mark(parent, old, OLD_MARKER, b"an old porter_runtime moved aside; a later run removes it\n")
    _rmtree(parent, old)


def _mark(parent: int, name: str, marker: str, text: bytes) -> None:
    folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    try:
        write_at(folder, marker, text, None, marker)
    finally:
        os.close(folder)


def _unmark(parent: int, name: str) -> None:
    folder = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    try:
        os.unlink(PARTIAL_MARKER, dir_fd=folder)
    finally:
        os.close(folder)


#: A run's sweep leaves a sibling younger than this: another run may be building it.
STALE_AFTER = 300.0


def remove_leftovers(root: Path, folder_rel: str) -> None:
    """Remove what a stopped vendoring of ``root/folder_rel`` left beside it (porter's
    own, by name and marker, untouched for STALE_AFTER seconds), even when this run
    vendors nothing there; nothing when the folder's parent is not there."""
    parts = parts_of(folder_rel)
    try:
        parent = open_folder(root, parts[:-1])
    except OSError:
        return
    try:
        _remove_leftovers(parent, parts[-1], min_age=STALE_AFTER)
    finally:
        os.close(parent)


def _remove_leftovers(parent: int, name: str, min_age: float = 0.0) -> None:
    """Hidden siblings a stopped run left: porter's by name and by the marker inside
    (a copy being built, or an old one moved aside), and not tracked by git."""
    base = _path_of(parent)
    for entry in os.listdir(parent):
        if not (entry.startswith(f".{name}.") and is_leftover_name(entry)):
            continue
        marker = base / entry / (OLD_MARKER if entry.endswith(_OLD) else PARTIAL_MARKER)
        try:
            info = os.stat(marker, follow_symlinks=False)
        except OSError:
            continue  # no marker: not porter's, whatever its name
        if stat.S_ISREG(info.st_mode) and time.time() - info.st_mtime >= min_age and not _tracked(base / entry):
            _rmtree(parent, entry)


def _tracked(folder: Path) -> bool:
    """Whether git tracks a file under ``folder`` (then it is the user's, whatever its
    name and content); False where git is not there to ask."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "."], cwd=folder, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and bool(listed.stdout)


def _give_to_owner(parent: int, build: str) -> None:
    """Run as root in a user's repository, the copy goes to the owner of the folder that
    holds it, as the user's own files are (else ``porter_runtime/`` is root's, and the
    user can't change or remove it)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    owner = os.fstat(parent)
    if (owner.st_uid, owner.st_gid) == (0, 0):
        return
    top = _path_of(parent) / build
    for dirpath, dirnames, filenames in os.walk(top):
        for entry in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(entry, owner.st_uid, owner.st_gid)


def _rmtree(parent: int, name: str) -> None:
    try:
        shutil.rmtree(name, dir_fd=parent)
    except FileNotFoundError:
        pass


def _path_of(fd: int) -> Path:
    """The path of an open folder (Linux and macOS), for the copy's plain reads."""
    if os.path.isdir("/proc/self/fd"):
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    import fcntl

    return Path(fcntl.fcntl(fd, getattr(fcntl, "F_GETPATH", 50), b"\0" * 1024).rstrip(b"\0").decode())
