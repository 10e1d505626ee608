"""The one way porter opens, checks, reads and writes a path of the user's tree.

Every path is taken relative to the root and walked one folder at a time with
``O_NOFOLLOW``, holding each folder open: a symbolic link anywhere on the way (or one
swapped in for a folder after a check) is refused, never followed, and nothing lands
outside the root. Reads are bounded and refuse what is not a regular file (a FIFO would
block, ``/dev/zero`` never ends) before reading a byte; the size is checked on the open
file, before the read. A write goes to a temporary file in the same (held) folder and
is renamed over the target only after the target is checked once more, just before the
rename: a file its owner saved while porter worked is left as it is and reported.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Callable, Iterable, Optional

#: Refuse to read a configuration or manifest file larger than this (they are a few KB).
MANIFEST_LIMIT = 4 << 20

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class Refused(OSError):
    """A path porter will not read or write; ``str()`` is the reason for the user."""

    def __init__(self, reason: str) -> None:
        super().__init__(errno.EPERM, reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class TooLarge(Refused):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size / 1e6:.1f} MB: larger than the {limit / 1e6:.1f} MB porter reads")
        self.size = size


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _read_fd(fd: int, limit: int) -> bytes:
    """The whole regular file open at ``fd``, refused before the read when over ``limit``."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"{_kind(info.st_mode)}, not a regular file; not read")
    if info.st_size > limit:
        raise TooLarge(info.st_size, limit)
    chunks, total = [], 0
    while True:  # bounded even if the file grows while it is read
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise TooLarge(total, limit)


def read_bounded(path: Path, limit: int = MANIFEST_LIMIT, follow: bool = True) -> bytes:
    """A regular file's bytes, at most ``limit`` of them (TooLarge beyond), for files
    porter only reads (settings, manifests, ``.gitignore``): a FIFO, a device or a
    folder is refused (OSError) without blocking. A link to a regular file is read
    unless ``follow`` is False."""
    flags = _READ_FLAGS if not follow else _READ_FLAGS & ~os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        return _read_fd(fd, limit)
    finally:
        os.close(fd)


def text_bounded(path: Path, limit: int = MANIFEST_LIMIT) -> str:
    return read_bounded(path, limit).decode("utf-8", errors="replace")


# -- paths inside the root ----------------------------------------------------------

def parts_of(rel: str) -> list[str]:
    """The components of a path relative to the root; Refused for one that could leave it."""
    parts = [p for p in rel.replace(os.sep, "/").split("/") if p not in ("", ".")]
    if rel.startswith("/") or ".." in parts or not parts:
        raise Refused(f"{rel}: not a path inside the root; porter writes only inside it")
    return parts


def open_folder(root: Path, parts: Iterable[str], create: bool = False) -> int:
    """A descriptor of the folder ``root/parts...``, reached without following a link."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    walked: list[str] = []
    try:
        for part in parts:
            walked.append(part)
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, part):
                    raise Refused(f"not written: {'/'.join(walked)} is a symbolic link "
                                  "(porter never writes through links)") from None
                raise
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


# -- writing ------------------------------------------------------------------------

#: Called with the file's path between the temporary file's write and the last check
#: (tests inject an owner's edit there).
before_replace: Callable[[str], None] = lambda label: None


def write_in_root(root: Path, rel: str, data: bytes, expected: Optional[bytes]) -> None:
    """Replace ``root/rel`` with ``data`` atomically, only if it still holds ``expected``
    (None: only if it does not exist). Refused (an OSError) otherwise; the file and
    folder are then left exactly as they were."""
    parts = parts_of(rel)
    folder = open_folder(root, parts[:-1], create=expected is None)
    try:
        write_at(folder, parts[-1], data, expected, "/".join(parts))
    finally:
        os.close(folder)


def write_at(folder: int, name: str, data: bytes, expected: Optional[bytes], label: str) -> None:
    """Write ``name`` in the open ``folder`` (see write_in_root); ``label`` names it in errors."""
    current = _lstat(folder, name)
    if expected is not None:
        _check_current(folder, name, current, expected, label)
    if expected is not None and current is not None and current.st_nlink > 1:
        return _write_in_place(folder, name, data, expected, current, label)
    tmp = temp_name(name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
            os.fchmod(fd, stat.S_IMODE(current.st_mode) if current else 0o666 & ~_umask())
            if current is not None:
                _keep_owner(fd, current)
                _keep_xattrs(folder, name, fd)
        finally:
            os.close(fd)
        before_replace(label)
        # The last look, just before the rename: what porter read must still be there.
        now = _lstat(folder, name)
        if expected is None and now is not None:
            raise Refused("not written: a file of that name appeared during the run")
        if expected is not None:
            _check_current(folder, name, now, expected, label)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=folder)
        except FileNotFoundError:
            pass
        raise


#: The longest file name most file systems take, in bytes (NAME_MAX).
NAME_MAX = 255


def temp_name(name: str) -> str:
    """``.NAME.<random>.porter-tmp``, with NAME shortened (whole characters) where the
    whole would pass NAME_MAX: a file whose own name is 250 bytes long is written too."""
    suffix = f".{secrets.token_hex(4)}.porter-tmp"
    room = NAME_MAX - len(suffix) - 1
    encoded = os.fsencode(name)
    if len(encoded) > room:
        name = os.fsdecode(encoded[:room].decode("utf-8", "ignore").encode("utf-8"))
    return f".{name}{suffix}"


def _write_in_place(folder: int, name: str, data: bytes, expected: Optional[bytes], current: os.stat_result,
                    label: str) -> None:
    """A file with several hard links is rewritten in place, as black does: a rename
    would give this name a new file and leave the other names holding the old bytes.
    Not atomic; the last check comes just before the write."""
    fd = os.open(name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    try:
        info = os.fstat(fd)
        before_replace(label)
        if (info.st_dev, info.st_ino) != (current.st_dev, current.st_ino):
            raise Refused("not written: the file changed on disk during the run")
        if expected is not None:
            _check_current(folder, name, _lstat(folder, name), expected, label)
        os.ftruncate(fd, 0)
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep_xattrs(folder: int, name: str, target: int) -> None:
    """Copy the replaced file's extended attributes (user.*, a Mac's quarantine and tags)
    to the new file, where the system has them and lets porter set them."""
    if not hasattr(os, "listxattr"):
        return
    try:
        source = os.open(name, _READ_FLAGS, dir_fd=folder)
    except OSError:
        return
    try:
        for attr in os.listxattr(source):
            try:
                os.setxattr(target, attr, os.getxattr(source, attr))
            except OSError:
                pass  # security.* and the like: not porter's to set
    except OSError:
        pass  # no extended attributes on this file system
    finally:
        os.close(source)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _lstat(folder: int, name: str) -> Optional[os.stat_result]:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _check_current(folder: int, name: str, info: Optional[os.stat_result], expected: bytes, label: str) -> None:
    """Refused unless ``name`` is a writable regular file holding ``expected``."""
    if info is None:
        raise Refused("not written: the file vanished during the run")
    if stat.S_ISLNK(info.st_mode):
        raise Refused(f"not written: {label} is a symbolic link (porter never writes through links)")
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"not written: {label} is {_kind(info.st_mode)}")
    changed = Refused("not written: the file changed on disk during the run")
    if info.st_size != len(expected):  # cheap first: most edits change the size
        raise changed
    fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    try:
        if _read_fd(fd, len(expected)) != expected:
            raise changed
    except TooLarge:
        raise changed from None
    finally:
        os.close(fd)
    if not info.st_mode & 0o222 or not os.access(name, os.W_OK, dir_fd=folder):
        raise Refused("not written: the file is read-only")


def _keep_owner(fd: int, current: os.stat_result) -> None:
    """Keep the replaced file's owner and group (porter run as root, or with a group
    write bit): a rename otherwise gives the file to whoever ran porter."""
    if (current.st_uid, current.st_gid) == (os.geteuid(), os.getegid()):
        return
    try:
        os.fchown(fd, current.st_uid, current.st_gid)
    except OSError:
        pass  # not root: the file is the caller's, as any editor's save would leave it


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
