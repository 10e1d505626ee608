"""What the repository's files say about where a runtime copy can live: its packages, the
build config that ships them, the imports between them (porter.project.vendoring.runtime_home)."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Optional

from porter.files.safe_io import read_bounded, text_bounded
from porter.project.vendoring.runtime_copy import RUNTIME, _is_file

_BUILD_FILES = ("setup.py", "setup.cfg")


def _entries(base: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(base) if e.is_dir(follow_symlinks=False) or e.name.endswith(".py")]
    except OSError:
        return []


def _installable(root: Path) -> bool:
    if any(_is_file(root / name) for name in _BUILD_FILES):
        return True
    try:
        text = text_bounded(root / "pyproject.toml")
    except OSError:
        return False
    return "[project]" in text or "[build-system]" in text or "[tool.poetry]" in text


_RELATIVE_IMPORT = re.compile(rb"^[ \t]*from[ \t]+\.", re.M)


def root_is_package(root: Path) -> bool:
    """Whether the root folder is itself a package of its code: it has an ``__init__.py``,
    its name is a Python name, and its own modules import each other relatively (``from
    . import b``) or by the root's name (``from mypkg.b import x`` where ``b`` is beside
    them): a tree imported from its parent. An ``__init__.py`` alone is not enough: some
    research repositories have a stray one (NX-AI/xlstm) while their scripts run with the
    root on ``sys.path``, and the folder's name is whatever the clone or the download
    called it (``xlstm``, ``xlstm-main``)."""
    if not _is_file(root / "__init__.py") or not root.name.isidentifier():
        return False
    try:
        stamp = root.stat().st_mtime_ns  # a file added or removed at the root changes it
    except OSError:
        return False
    return _root_imports_itself(root, stamp)


@functools.lru_cache(maxsize=64)
def _root_imports_itself(root: Path, stamp: int) -> bool:
    own = re.compile(rb"^[ \t]*(?:from|import)[ \t]+" + re.escape(root.name.encode()) + rb"\.(\w+)", re.M)
    try:
        files = [p for p in root.iterdir() if p.suffix == ".py" and p.is_file()]
    except OSError:
        return False
    for file in files:
        try:
            text = file.read_bytes()
        except OSError:
            continue
        if _RELATIVE_IMPORT.search(text):
            return True
        for match in own.finditer(text):
            child = match.group(1).decode()
            if _is_file(root / f"{child}.py") or (root / child).is_dir():
                return True
    return False


def _top_package(file: Path, root: Optional[Path] = None) -> Optional[Path]:
    """The topmost package folder holding ``file`` (None for a file outside packages),
    within ``root``: the root folder counts only where it is a package of its own code
    (:func:`root_is_package`)."""
    top = None
    folder = file.parent
    stop = None if root is None or root_is_package(root) else root
    while folder != stop and _is_file(folder / "__init__.py"):
        top = folder
        folder = folder.parent
    return top


def _namespace_name(top: Path, root: Path) -> Optional[str]:
    """The import name of a package that sits in folders without ``__init__.py`` (PEP 420
    namespace packages: ``ldm/models/diffusion/`` is ``ldm.models.diffusion``), reached
    from the root or ``src/``; None for a package at the top, or when a build script maps
    package folders itself (``package_dir``, ``where``), which then decides the name."""
    for base in (root / "src", root):
        try:
            parts = top.relative_to(base).parts
        except ValueError:
            continue
        if len(parts) < 2:
            return None
        dotted = ".".join(parts)
        if not all(part.isidentifier() for part in parts) or _maps_packages(root):
            return None
        return dotted if _imported_as(root, dotted) else None
    return None


def reached_in_full(top: Path, root: Path) -> bool:
    """Whether the tree imports, by its full dotted name from the root, the folder that holds
    the package ``top`` (``from models.ops.modules import MSDeformAttn`` for
    ``models/ops/functions``): its base is then on sys.path, and the package is reached by
    that longer name too (a sibling's ``from ..functions import``)."""
    try:
        parts = top.relative_to(root).parts
    except ValueError:
        return False
    if len(parts) < 2 or not all(part.isidentifier() for part in parts) or _maps_packages(root):
        return False
    return _imported_as(root, ".".join(parts[:-1]))


def _script(file: Path) -> bool:
    """Whether ``file`` runs as a script too (its ``if __name__ == "__main__":``), where a
    relative import fails."""
    try:
        return re.search(rb"""^if\s+__name__\s*==\s*["']__main__["']""", file.read_bytes(), re.M) is not None
    except OSError:
        return True


@functools.lru_cache(maxsize=64)
def _imported_as(root: Path, dotted: str) -> bool:
    """Whether some Python file of the tree imports ``dotted`` (or a module in it) by
    that full name, or names it from its parent (``from feature_networks import clip``), or a
    config builds a class of it by that name (Hydra's ``_target_: train.callbacks.ema.EMA``,
    latent diffusion's ``target: ldm.modules.encoders.modules.FrozenOpenCLIPEmbedder``):
    the repository puts the namespace's base on sys.path. A package only
    ever imported by its own name (``d2/detr`` as ``detr``, from scripts in ``d2/``)
    keeps that name."""
    parent, _, last = dotted.rpartition(".")
    # Hydra builds `_target_: train.callbacks.ema.EMACallback` by importing that full name,
    # and so does latent diffusion's instantiate_from_config, from `target: ldm.modules.x.Y`
    target = re.compile(rb"""(?<![\w-])(?:_target_|target)["']?\s*:\s*["']?""" + re.escape(dotted.encode()) + rb"\.")
    pattern = re.compile(rb"^\s*(?:from|import)\s+" + re.escape(dotted.encode()) + rb"\b|"
                         # ``from feature_networks import clip`` (stylegan-xl): the package by name
                         rb"^\s*from\s+" + re.escape(parent.encode()) + rb"\s+import\s+\(?[\w\s,]*?\b"
                         + re.escape(last.encode()) + rb"\b(?!\s*\.)", re.M)
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", RUNTIME, "node_modules")]
        for name in files:
            found = pattern if name.endswith(".py") else target if name.endswith((".yaml", ".yml", ".json")) else None
            if found is not None:
                try:
                    if found.search(read_bounded(Path(folder, name), 1 << 20, follow=False)):
                        return True
                except OSError:
                    continue
    return False


#: An import at the start of a line: at module level, where a failure stops the import.
_TOP_IMPORT = re.compile(rb"^(?:from|import)[ \t]+([A-Za-z_]\w*)", re.M)


@functools.lru_cache(maxsize=8)
def _package_imports(packages: tuple) -> dict:
    """Each top-level package -> the others its modules import at module level (once per
    process: a worker gets the layout with each file)."""
    names = {name for name, _ in packages}
    return {name: _top_imports(Path(folder)) & names - {name} for name, folder in packages}


def _top_imports(folder: Path) -> set:
    found = set()
    for base, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", RUNTIME) and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                try:
                    found |= {m.decode() for m in _TOP_IMPORT.findall(read_bounded(Path(base, name), 1 << 20,
                                                                                    follow=False))}
                except OSError:
                    continue
    return found


def _reach(graph: dict, start: str) -> set:
    seen, todo = set(), [start]
    while todo:
        for other in graph.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen - {start}


def nested_project(top: Path, root: Path) -> Optional[Path]:
    """The folder between the root and the package ``top`` that builds on its own (a
    setup.py or a pyproject.toml): Grounded-Segment-Anything's ``GroundingDINO/``, which its
    README installs with ``pip install -e GroundingDINO``, shipping ``groundingdino`` under
    that name. None for a package of the repository's own build, or of none."""
    folder = top.parent
    while folder != root and root in folder.parents:
        if _installable(folder):
            return folder
        folder = folder.parent
    return None


@functools.lru_cache(maxsize=64)
def own_name(top: Path) -> Optional[str]:
    """The name the package ``top``'s own modules import it by, where they do: its folder's
    name (``from groundingdino.util import box_ops`` inside ``groundingdino/``), or that
    name under the folders above it (``import annotator.uniformer.mmcv as mmcv`` inside
    LAVIS's ``lavis/common/annotator/uniformer/``, a copy of ControlNet's). That name
    imports wherever the package runs, whatever longer name a script reaches it by."""
    own = re.compile(rb"^[ \t]*(?:from|import)[ \t]+((?:\w+\.)*)" + re.escape(top.name.encode()) + rb"[.\s]", re.M)
    above = [part for part in reversed(top.parent.parts)]
    counts: dict[str, int] = {}
    for base, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", RUNTIME) and not d.startswith(".")]
        for name in files:
            if not name.endswith(".py"):
                continue
            try:
                text = read_bounded(Path(base, name), 1 << 20, follow=False)
            except OSError:
                continue
            for match in own.finditer(text):
                prefix = match.group(1).decode().rstrip(".").split(".") if match.group(1) else []
                if list(reversed(prefix)) == above[:len(prefix)]:  # the folders above it, by their names
                    dotted = ".".join(prefix + [top.name])
                    counts[dotted] = counts.get(dotted, 0) + 1
    return max(counts, key=lambda n: (counts[n], len(n))) if counts else None


def _build_may_ship(root: Path, dotted: str) -> bool:
    """Whether the build could install the namespace package ``dotted``, which then needs
    a copy of its own. Not when it names its packages (``find_packages()``, ``find:``, a
    list without it): ``find_packages`` skips folders without ``__init__.py``, so the
    package runs from the tree, its base on sys.path, and the root copy serves it. A build
    porter can't read (pyproject's automatic discovery, ``find_namespace_packages``) may."""
    texts = []
    for name in _BUILD_FILES + ("pyproject.toml",):
        try:
            texts.append(text_bounded(root / name))
        except OSError:
            continue
    text = "\n".join(texts)
    if re.search(r"namespace|packages\.find|\b" + re.escape(dotted) + r"\b", text):
        return True
    return not re.search(r"find_packages\s*\(|packages\s*=\s*(?:find:|\[)", text)


def _maps_packages(root: Path) -> bool:
    for name in ("setup.py", "setup.cfg", "pyproject.toml"):
        try:
            text = text_bounded(root / name)
        except OSError:
            continue
        if re.search(r"package[_-]dir|\bwhere\s*=", text):
            return True
    return False


def _package_name(folder: Path, root: Optional[Path] = None) -> Optional[str]:
    stop = None if root is None or root_is_package(root) else root
    if folder == stop or not _is_file(folder / "__init__.py"):
        return None
    parts = [folder.name]
    here = folder.parent
    while here != stop and _is_file(here / "__init__.py"):
        parts.insert(0, here.name)
        here = here.parent
    return ".".join(parts)
