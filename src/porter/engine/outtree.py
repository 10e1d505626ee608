"""``porter migrate PATH --out DIR``: port a copy of the tree, leave the original alone.

The copy holds what porter itself would look at: the same skips as a run (``.git``,
virtual environments, build and cache folders, whatever ``.gitignore`` ignores), with
files' bytes and permission bits kept and symbolic links copied as links (never
followed). The migration then runs on the copy, in place.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

from porter.engine.discover import discover


class OutError(Exception):
    pass


def check_target(root: Path, out: Path) -> None:
    """Refuse a target that would overwrite work or contain the original."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutError(f"{out}: exists and is not an empty folder; porter --out writes only into a new or empty one")
    if out.resolve() == root.resolve() or out.resolve() in root.resolve().parents:
        raise OutError(f"{out}: holds the tree being ported; name a folder outside it")


def copy_tree(root: Path, out: Path) -> list[str]:
    """Copy the files of ``root`` that a run would see into ``out``; returns what was copied."""
    found = discover([root], root, skip=[out], patterns=["*"])
    copied = []
    for file in found.files:
        rel = file.relative_to(root)
        target = out / rel
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_whole(file, target)
        except OSError as exc:  # a full disk, a file cut while copied: never a copy said to be whole
            raise OutError(f"{out}: cannot copy {rel.as_posix()}: {exc.strerror or exc}; the copy is incomplete") from None
        copied.append(rel.as_posix())
    for skipped in found.skipped:  # links are reported by the walk; copy them as links
        source = root / skipped.path
        if source.is_symlink():
            target = out / skipped.path
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), target)
    return copied


def _copy_whole(source: Path, target: Path) -> None:
    """Copy a file with its times and mode; OSError unless the copy has every byte the
    file had when the copy began and still has at its end."""
    before = os.stat(source, follow_symlinks=False)
    shutil.copy2(source, target, follow_symlinks=False)
    after, copy = os.stat(source, follow_symlinks=False), os.stat(target, follow_symlinks=False)
    if not (before.st_size == after.st_size == copy.st_size and before.st_mtime_ns == after.st_mtime_ns):
        raise OSError(f"it changed while it was copied ({before.st_size} bytes, then {after.st_size}; "
                      f"{copy.st_size} copied)")


def map_paths(paths: Sequence[Path], root: Path, out: Path) -> list[Path]:
    """The named paths, as the same paths inside the copy."""
    mapped = []
    for path in paths:
        try:
            mapped.append(out / path.absolute().relative_to(root.absolute()))
        except ValueError:
            raise OutError(f"{path}: is outside the root {root}; --out copies the root's tree") from None
    return mapped
