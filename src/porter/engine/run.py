"""One migration run over a set of paths: discover, process, collect."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from porter.engine.discover import Skipped, discover, relative_posix
from porter.engine.options import Options
from porter.engine.process import process_file, stage_for
from porter.engine.results import FileResult
from porter.engine.stages.notes import one_per_setting
from porter.files.apply import Change, gained, read_or_none, runtime_source, vendor_changes
from porter.files.vendor_write import remove_leftovers, unvendor
from porter.project import known_modules
from porter.project import model as project
from porter.project.touchpoints.ledger import TreeContext
from porter.project.vendoring.lint_exempt import exempt_changes
from porter.project.vendoring.runtime_copy import Home, manifest_change, pointer_source, refuse_home, refuse_pointer
from porter.project.vendoring.runtime_home import Layout, LazyBootstrap, home_of_import
from porter.project.vendoring.runtime_modules import parts_for, used_names


@dataclass
class RunConfig:
    paths: Sequence[Path]
    root: Path
    options: Options
    excludes: Sequence[str] = ()
    runtime_dir: Optional[Path] = None  # default: per file, porter.project.vendoring.runtime_home
    jobs: int = 1
    #: the run writes what it finds (notes say "vendored", not "would vendor")
    write: bool = False
    #: vendor every runtime module, not only those the ported code uses
    full_runtime: bool = False

    @property
    def runtime_target(self) -> Path:
        return self.runtime_dir if self.runtime_dir is not None else self.root / "porter_runtime"

    def layout(self) -> Layout:
        """The repository's layout; LayoutError for a runtime folder porter must not use."""
        return Layout.of(self.root, self.runtime_dir)


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
        """The findings a human must act on (info-level notes don't count)."""
        return sum(f.needs_human for item in self.files for f in item.findings)

    def changes(self) -> list[Change]:
        """Every file change kept by a run without a sink: the runtime, then sources."""
        own = [Change(f.path, f.old, f.new) for f in self.changed if f.new is not None]
        return self.runtime_changes + own


Task = tuple[Path, str, Layout]  # the file, its path in the report, the repository's layout
_worker_options: Optional[Options] = None
#: Seconds between a worker's checks that its parent is alive.
PARENT_CHECK = 1.0


def _init_worker(options: Options) -> None:
    global _worker_options
    _worker_options = options
    # Ctrl-C is the parent's to handle (it stops the run and exits 130); a worker that
    # took it too would print a traceback of its own. SIGTERM and SIGHUP end a worker at
    # once (the parent's handler, inherited by fork, would raise in it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in ("SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()


def _exit_with_parent(parent: int) -> None:
    """End this worker once its parent is gone (killed with SIGKILL, say): the pool's
    queue never reports it, since every worker holds the queue's other end."""
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK)
    os._exit(1)


def _work(task: Task) -> FileResult:
    assert _worker_options is not None
    path, rel, layout = task
    return process_file(path, rel, _worker_options, LazyBootstrap(path, layout))


def iter_results(config: RunConfig, tasks: Sequence[Task]) -> Iterator[FileResult]:
    """Results in the order of ``tasks``, whatever the number of worker processes."""
    jobs = max(1, min(config.jobs, len(tasks)))
    if jobs == 1:
        for path, rel, layout in tasks:
            yield process_file(path, rel, config.options, LazyBootstrap(path, layout))
        return
    # Small chunks: a few files (trainer.py and its neighbours in transformers) take
    # seconds each; in one large chunk at the end of the run they leave a worker idle.
    chunk = max(1, min(4, len(tasks) // (jobs * 8)))
    pool = ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(config.options,))
    try:
        yield from pool.map(_work, tasks, chunksize=chunk)
    finally:  # on Ctrl-C, files not started yet are dropped, not processed first
        pool.shutdown(wait=True, cancel_futures=True)


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


#: Takes the changes of one file, or of one vendored copy (written together).
Sink = Callable[[Sequence[Change]], Optional[str]]


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
    layout = config.layout()
    patterns = ["*.py", "*.ipynb", *sorted({p for rule in config.options.text_rules for p in rule.patterns})]
    skip = [layout.fixed.folder] if layout.fixed is not None else []
    found = discover(config.paths, root, config.excludes, skip=skip, patterns=patterns)
    result = RunResult(root=root, skipped=found.skipped)
    files = sorted(found.files, key=lambda p: relative_posix(p, root))
    config = with_tree_context(config, [relative_posix(p, root) for p in files])
    tasks = [(path, relative_posix(path, root), layout) for path in files]
    if progress is not None:  # the count, before the first file: a bar never shows "0/?"
        progress(0, len(tasks))
    #: each copy's folder -> why it could not be vendored ("" once it is)
    homes: dict[Path, str] = {}
    #: each copy's folder -> the parts of the runtime vendored there so far (None: all of it)
    held: dict[Path, Optional[frozenset[str]]] = {}
    #: each copy's folder -> its files as this run wrote or showed them (a dry run writes
    #: nothing, so the folder on disk can't tell)
    emitted: dict[Path, dict[str, bytes]] = {}
    #: a dry run's changes to each copy, handed to the sink at the end: a copy that grows
    #: during the run is shown once, as it ends up (the diff applies as --write writes)
    shown: dict[Path, list[Change]] = {}
    #: copies this run made where there was none, and how many files it wrote need each:
    #: a new copy no written file needs is taken away again (porter.files.vendor_write.unvendor)
    fresh: dict[Path, int] = {}
    shipped: list[Home] = []  # copies inside packages, which the build must ship
    #: each copy's folder -> its one note's place in result.notes, and all it gained this run
    told: dict[Path, int] = {}
    grown: dict[Path, list[Change]] = {}
    pyproject: list[bytes] = []  # pyproject.toml as a rule of this run left it

    def vendor(home: Home, code: Optional[bytes], needed: bool = True) -> str:
        """Vendor one copy, with the parts ``code`` needs; why it could not be, or ""."""
        if home.primary is not None:
            return refuse_pointer(home, root) or vendor(home.primary, code, needed) or point(home, needed)
        parts = None if config.full_runtime or code is None else parts_for(used_names(code), runtime_source())
        if home.folder in homes:
            have = held[home.folder]
            if homes[home.folder] or have is None or (parts is not None and parts <= have):
                return homes[home.folder]
            parts = None if parts is None else parts | have
        problem = refuse_home(home, root)
        if problem and not needed:
            return problem  # a file already imports a folder porter does not own: the user's
        if config.write and sink is not None and not problem and home.folder not in homes:
            remove_leftovers(root, relative_posix(home.folder, root))  # a killed run's, even with nothing to vendor
            if needed and not os.path.lexists(home.folder):
                fresh[home.folder] = 0
        changes: list[Change] = []
        notes: list[str] = []
        if not problem:
            changes, note = vendor_changes(home.folder, root, write=config.write, parts=parts)
            if not config.write:
                shown[home.folder] = changes
            before = emitted.get(home.folder)
            if before is not None:  # a copy this run vendored: only what it gains, told in its one note
                changes = [c for c in changes if before.get(c.path) != c.new]
                what = "" if home.folder in told else gained(changes, known=before)
                note = f"{'added' if config.write else 'would add'} {what} to porter_runtime at " \
                       f"{relative_posix(home.folder, root)}/" if what else ""
            emitted.setdefault(home.folder, {}).update({c.path: c.new for c in changes})
            _merge(grown.setdefault(home.folder, []), changes)
            if note:
                told[home.folder] = len(result.notes) + len(notes)
                notes.append(note)
            elif home.folder in told and changes:
                _retell(result.notes, told[home.folder], grown[home.folder], config.write)
            root_copy = home.primary is None and home.folder.parent == root  # shipped beside py-modules
            if (home.package or root_copy) and home.folder not in homes:
                shipped.append(home)  # the build config is edited at the end (porter.project.vendoring.runtime_home)
            if sink is not None and changes and config.write:
                problem = sink(changes) or ""
        homes[home.folder], held[home.folder] = problem, parts
        if problem:
            result.notes.append(f"porter_runtime not vendored at {relative_posix(home.folder, root)}/: {problem}")
        else:
            _merge(result.runtime_changes, changes)
            result.notes += notes
        return problem

    def point(home: Home, needed: bool) -> str:
        """Write the pointer module that hands ``home.primary`` to a folder's scripts."""
        if home.pointer in homes:
            return homes[home.pointer]
        problem = refuse_pointer(home, root)
        if problem and not needed:
            return problem
        if not problem:
            old, new = read_or_none(home.pointer), pointer_source(home)
            if old != new:
                rel = relative_posix(home.pointer, root)
                change = Change(rel, old, new, runtime=True)
                problem = (sink([change]) or "") if sink is not None else ""
                if not problem:
                    result.runtime_changes.append(change)
                    folder = relative_posix(home.pointer.parent, root)
                    target = relative_posix(home.primary.folder, root)
                    result.notes.append(f"{'wrote' if config.write else 'would write'} {rel}: the scripts in "
                                        f"{folder}/ use the copy at {target}/")
        homes[home.pointer] = problem
        if problem:
            result.notes.append(f"porter_runtime not reachable from {relative_posix(home.pointer.parent, root)}/: {problem}")
        return problem

    def home_of(item: FileResult, path: Path) -> Home:
        if item.runtime_folder.endswith(".py"):  # a pointer module to the root copy
            return Home((root / item.runtime_folder).with_suffix(""), item.runtime_package, primary=layout.root_home)
        if item.runtime_folder:
            return Home(root / item.runtime_folder, item.runtime_package)
        return home_of_import(layout, path, item.runtime_from)

    for done, (item, (path, _, _)) in enumerate(zip(iter_results(config, tasks), tasks), 1):
        if item.runtime_note and item.status == "changed":
            result.notes.append(item.runtime_note)
        if item.status == "changed" and item.path == "pyproject.toml" and item.new is not None:
            pyproject.append(item.new)
        if item.status == "changed":
            problem = vendor(home_of(item, path), item.new) if item.uses_runtime else ""
            if problem:  # never a source that imports a runtime that isn't there
                item.status, item.error = "error", f"not written: it needs porter_runtime, which could not be vendored ({problem})"
                item.old = item.new = None
            elif sink is not None:
                error = sink([Change(item.path, item.old, item.new)])  # type: ignore[arg-type]
                item.old = item.new = None
                if error:
                    item.status, item.error = "error", error
            if item.uses_runtime and item.status == "changed":
                _count_user(fresh, home_of(item, path))
        elif item.uses_runtime and item.status == "unchanged":
            vendor(home_of(item, path), read_or_none(path), needed=False)  # the code already imports the runtime: make sure it is there and current
            _count_user(fresh, home_of(item, path))
        result.files.append(item)
        if progress is not None:
            progress(done, len(tasks))
    for changes in shown.values():
        if sink is not None and changes:
            sink(changes)  # a dry run's sink shows, it does not fail
    for folder in [f for f, users in fresh.items() if not users and homes.get(f) == ""]:
        _take_back(config, result, folder)
        homes.pop(folder)
        shipped = [home for home in shipped if home.folder != folder]
    one_per_setting(result.files, {r.code for r in config.options.text_rules if r.repeated_setting})
    edited = _ship(config, result, shipped, pyproject[-1] if pyproject else None, sink, emitted)
    if any(problem == "" for problem in homes.values()):
        _exempt(config, result, edited, sink)
    return result


def _count_user(fresh: dict[Path, int], home: Home) -> None:
    folder = (home.primary or home).folder
    if folder in fresh:
        fresh[folder] += 1


def _take_back(config: RunConfig, result: RunResult, folder: Path) -> None:
    """Remove a copy this run made for files it then did not write (their owner saved
    them during the run, or the write failed): no runtime is left that nothing imports."""
    rel = relative_posix(folder, config.root)
    try:
        unvendor(config.root, rel)
    except OSError as exc:
        result.notes.append(f"porter_runtime at {rel}/ is not needed (no file that imports it was written) "
                            f"but could not be removed: {exc}")
        return
    result.runtime_changes = [c for c in result.runtime_changes if not c.path.startswith(f"{rel}/")]
    result.notes = [n for n in result.notes if f"porter_runtime at {rel}/" not in n]
    result.notes.append(f"porter_runtime not vendored at {rel}/: no file that needs it was written")


def run_source(config: RunConfig, path: Path, data: bytes) -> RunResult:
    """One file's source given as bytes (``porter migrate -``, stdin), migrated as ``run``
    would migrate it at ``path`` (its name picks the stage, the rules and the runtime's
    import); ``path`` itself is never read nor written, and no runtime is vendored. A
    path named ``-`` is Python."""
    rel = relative_posix(path, config.root)
    model = project.build_from({rel: data} if rel.endswith(".py") or path.name == "-" else {})
    config = with_tree_context(replace(config, options=replace(config.options, project=model)), [rel])
    stage = stage_for(f"{rel}.py" if path.name == "-" else rel)
    item = stage(data, rel, config.options.for_path(rel), LazyBootstrap(path, config.layout()))
    return RunResult(root=config.root, files=[item])


def _exempt(config: RunConfig, result: RunResult, pyproject: Optional[bytes], sink) -> None:
    """Keep the repository's formatters and linters off the copies (porter.project.vendoring.lint_exempt)."""
    bases = {"pyproject.toml": pyproject} if pyproject is not None and not config.write else {}
    for change, note in exempt_changes(config.root, config.write, bases):
        error = sink([change]) if sink is not None and change is not None else None
        result.notes.append(f"{change.path}: not written: {error}" if error and change is not None else note)
        if change is not None and not error:
            result.runtime_changes.append(change)


#: A note that a copy already there gains modules (porter.files.apply.vendor_changes).
_ADDS = re.compile(r"^(?:(?:would add|added) .* to porter_runtime at (?P<to>.+/)|porter_runtime at (?P<at>.+/): added .*)$")


def _retell(notes: list[str], at: int, changes: Sequence[Change], write: bool) -> None:
    """A copy that grew during the run keeps one note: a copy vendored or updated this
    run says so once; one that gains modules says all it gains (never one line per file
    that needed more of it)."""
    match = _ADDS.match(notes[at]) if at < len(notes) else None
    what = gained(changes)
    if match is None or not what:
        return
    notes[at] = (f"porter_runtime at {match.group('at')}: added {what}" if match.group("at") else
                 f"{'added' if write else 'would add'} {what} to porter_runtime at {match.group('to')}")


def _merge(kept: list[Change], changes: Sequence[Change]) -> None:
    """Add a copy's changes to the run's; a file changed twice (the copy grew) is one
    change, from what the run found to what it left."""
    where = {c.path: i for i, c in enumerate(kept)}
    for change in changes:
        if change.path in where:
            first = kept[where[change.path]]
            kept[where[change.path]] = replace(change, old=first.old)
        else:
            where[change.path] = len(kept)
            kept.append(change)


def with_tree_context(config: RunConfig, rels: Sequence[str]) -> RunConfig:
    """``config`` with what the tree tells the ledger about imports: its own modules
    and its declared dependencies (porter.project.touchpoints.ledger, porter.project.known_modules); and its
    sources, where porter.edits.probes checks that no other module reads a flag it removes."""
    if config.options.ledger is not None:
        return config
    whole = all(Path(p).resolve() == config.root.resolve() for p in config.paths)  # else some importers are unread
    model = project.build(config.root, rels, whole=whole) if config.options.project is None else config.options.project
    context = TreeContext(local=known_modules.local(rels), declared=known_modules.declared(config.root),
                          root=str(config.root), sources=frozenset(r for r in rels if r.endswith((".py", ".ipynb"))),
                          extensions=known_modules.extensions(config.root, rels), probes=model.import_probes)
    return replace(config, options=replace(config.options, ledger=context, project=model))


def _ship(config: RunConfig, result: RunResult, shipped: list[Home], edited: Optional[bytes], sink,
          emitted: dict[Path, dict[str, bytes]]) -> Optional[bytes]:
    """Add the package copies (and their sub-packages) to a hand-written package list in
    pyproject.toml. Done last, on top of what a manifest rule of this run made of the file
    (written, or in the diff); pyproject.toml as a dry run leaves it (None: as on disk)."""
    base = None if config.write else edited
    for home in shipped:
        subpackages = _subpackages(home.folder, relative_posix(home.folder, config.root), emitted.get(home.folder, {}))
        manifest = manifest_change(config.root, home, write=config.write, base=base, subpackages=subpackages)
        if manifest is None:
            continue
        change, note = manifest
        result.notes.append(note)
        if change is None:
            continue
        error = sink([change]) if sink is not None else None
        if error:
            result.notes.append(f"pyproject.toml: not written: {error}")
            continue
        result.runtime_changes.append(change)
        base = None if config.write else change.new
    return base


def _subpackages(folder: Path, rel: str, emitted: dict[str, bytes]) -> set[str]:
    """The sub-packages (``twins``) of the copy at ``folder``: on disk, or in this run's
    changes to it (a dry run writes nothing)."""
    found = {p.parent.name for p in folder.glob("*/__init__.py")}
    inside = (path[len(rel) + 1:] for path in emitted if path.startswith(f"{rel}/"))
    return found | {p.split("/")[0] for p in inside if p.count("/") == 1 and p.endswith("/__init__.py")}
