"""One migration run over a set of paths: discover, process, collect."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from porter import known_modules
from porter.apply import Change, vendor_changes
from porter.discover import Skipped, discover
from porter.engine import FileResult, LazyBootstrap, Options, process_file
from porter.ledger import TreeContext


@dataclass
class RunConfig:
    paths: Sequence[Path]
    root: Path
    options: Options
    excludes: Sequence[str] = ()
    runtime_dir: Optional[Path] = None  # default: <root>/porter_runtime
    jobs: int = 1

    @property
    def runtime_target(self) -> Path:
        return self.runtime_dir if self.runtime_dir is not None else self.root / "porter_runtime"


@dataclass
class RunResult:
    root: Path
    files: list[FileResult] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    runtime_changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "changed"]

    @property
    def errors(self) -> list[FileResult]:
        return [f for f in self.files if f.status == "error"]

    @property
    def reviews(self) -> int:
        return sum(len(f.reviews) for f in self.files)

    def changes(self) -> list[Change]:
        """Every file change kept by a run without a sink: the runtime, then sources."""
        own = [Change(f.path, f.old, f.new) for f in self.changed if f.new is not None]
        return self.runtime_changes + own


Task = tuple[Path, str, Path]  # the file, its path in the report, the runtime's folder
_worker_options: Optional[Options] = None


def _init_worker(options: Options) -> None:
    global _worker_options
    _worker_options = options


def _work(task: Task) -> FileResult:
    assert _worker_options is not None
    path, rel, runtime_parent = task
    return process_file(path, rel, _worker_options, LazyBootstrap(path, runtime_parent))


def iter_results(config: RunConfig, tasks: Sequence[Task]) -> Iterator[FileResult]:
    """Results in the order of ``tasks``, whatever the number of worker processes."""
    jobs = max(1, min(config.jobs, len(tasks)))
    if jobs == 1:
        for path, rel, runtime_parent in tasks:
            yield process_file(path, rel, config.options, LazyBootstrap(path, runtime_parent))
        return
    # Small chunks: a few files (trainer.py and its neighbours in transformers) take
    # seconds each; in one large chunk at the end of the run they leave a worker idle.
    chunk = max(1, min(4, len(tasks) // (jobs * 8)))
    with ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(config.options,)) as pool:
        yield from pool.map(_work, tasks, chunksize=chunk)


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


Sink = Callable[[Change], Optional[str]]


def run(
    config: RunConfig,
    sink: Optional[Sink] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> RunResult:
    """Process every file in path order.

    With a ``sink``, each change is handed to it as soon as its file is done and its
    bytes are dropped, so memory is bounded by the largest file, not by the tree. The
    runtime's files go first, before the first source change: a run killed half-way
    never leaves code that imports a runtime that isn't there. A sink returns an error
    text when it could not apply a change; the file is then reported as failed.
    """
    root = config.root
    target = config.runtime_target
    patterns = ["*.py", "*.ipynb", *sorted({p for rule in config.options.text_rules for p in rule.patterns})]
    found = discover(config.paths, root, config.excludes, skip=[target], patterns=patterns)
    result = RunResult(root=root, skipped=found.skipped)
    files = sorted(found.files, key=lambda p: _rel(p, root))
    config = with_tree_context(config, [_rel(p, root) for p in files])
    tasks = [(path, _rel(path, root), target.parent) for path in files]
    vendored = False

    def vendor() -> None:
        nonlocal vendored
        vendored = True
        result.runtime_changes, note = vendor_changes(target, root)
        if note:
            result.notes.append(note)
        for change in result.runtime_changes:
            if sink is not None:
                sink(change)

    for done, item in enumerate(iter_results(config, tasks), 1):
        if item.status == "changed":
            if not vendored and item.uses_runtime:
                vendor()
            if sink is not None:
                error = sink(Change(item.path, item.old, item.new))  # type: ignore[arg-type]
                item.old = item.new = None
                if error:
                    item.status, item.error = "error", error
        result.files.append(item)
        if progress is not None:
            progress(done, len(tasks))
    if not vendored and any(f.uses_runtime for f in result.files):
        vendor()  # the code already imports the runtime: make sure it is there and current
    return result


def with_tree_context(config: RunConfig, rels: Sequence[str]) -> RunConfig:
    """``config`` with what the tree tells the ledger about imports: its own modules
    and its declared dependencies (porter.ledger, porter.known_modules)."""
    if config.options.ledger is not None:
        return config
    context = TreeContext(local=known_modules.local(rels), declared=known_modules.declared(config.root))
    return replace(config, options=replace(config.options, ledger=context))


def _rel(path: Path, root: Path) -> str:
    try:
        return path.absolute().relative_to(root.absolute()).as_posix()
    except ValueError:
        return path.as_posix()
