"""The engine: each file of a run through the one stage for its kind.

Every stage takes the same arguments (the file's bytes, its path relative to the root
with "/" separators, the run's options, how the file imports the runtime) and returns
a picklable :class:`FileResult`, so files can be processed in worker processes:

- ``.py``: :mod:`porter.engine.stages.python_stage` (the rules, the runtime import, the ledger);
- ``.ipynb``: :mod:`porter.engine.stages.notebook` (each code cell through the Python stage);
- anything else: :mod:`porter.engine.stages.text_stage` (the text rules whose patterns match its name).

Writing, diffing and vendoring live in ``porter.files.apply``, the run over a tree in
``porter.engine.run``. The stages' entry points are re-exported here for tests and tools; no
module of porter below this one imports it.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Union

from porter.engine.stages.notebook import process_notebook
from porter.engine.options import Options
from porter.engine.stages.python_stage import (
    MAX_PARSE_BYTES,
    ledger_source,
    migrate_source,
    process_python,
)
from porter.engine.results import FileResult, SourceResult
from porter.engine.stages.text_stage import migrate_text, process_text
from porter.files.safe_io import Refused, read_bounded
from porter.project.vendoring.runtime_home import LazyBootstrap

__all__ = [
    "FileResult", "LazyBootstrap", "MAX_PARSE_BYTES", "Options", "SourceResult", "ledger_source",
    "migrate_source", "migrate_text", "process_file", "stage_for",
]

#: No file larger than this is read at all (Python files over porter.engine.stages.python_stage's
#: MAX_PARSE_BYTES are only searched, never parsed).
READ_LIMIT = 64 << 20

Bootstrap = Union[None, str, LazyBootstrap]
Stage = Callable[[bytes, str, Options, Bootstrap], FileResult]


def stage_for(rel: str) -> Stage:
    """The stage that migrates a file of this name."""
    if rel.endswith(".py"):
        return process_python
    if rel.endswith(".ipynb"):
        return process_notebook
    return process_text


def process_file(path: Path, rel: str, options: Options, bootstrap: Bootstrap) -> FileResult:
    """Migrate one file; every failure becomes a per-file error, never an exception."""
    options = options.for_path(rel)
    try:  # the size is checked before the read; a FIFO or a device is refused unread
        data = read_bounded(path, READ_LIMIT, follow=False)
    except Refused as exc:
        return FileResult(rel, "error", error=f"cannot read: {exc}")
    except OSError as exc:
        return FileResult(rel, "error", error=f"cannot read: {exc.strerror or exc}")
    with _collector_paused():
        return stage_for(rel)(data, rel, options, bootstrap)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while one file is processed. Parsing makes millions
    of short-lived nodes (``ast`` and LibCST) that reference counting frees; the
    collector's passes over them find next to nothing, and cost a seventh of the CPU
    time of the files that reach a parser (diffusers, the same files with and without,
    interleaved). It runs again after the file, over whatever the file left."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
