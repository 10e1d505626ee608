"""One migration run over a set of paths: discover, process, collect."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from porter.apply import Change, vendor_changes
from porter.discover import Skipped, discover
from porter.engine import FileResult, Options, bootstrap_path, process_file


@dataclass
class RunConfig:
    paths: Sequence[Path]
    root: Path
    options: Options
    excludes: Sequence[str] = ()
    runtime_dir: Optional[Path] = None  # default: <root>/porter_runtime

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
        """Every file change of the run: the runtime's first, so that a diff on a
        terminal ends with the changes to the user's own code."""
        own = [Change(f.path, f.old, f.new) for f in self.changed if f.new is not None]
        return self.runtime_changes + own


def run(config: RunConfig, progress: Optional[Callable[[int, int], None]] = None) -> RunResult:
    """Process every file; the result is in a deterministic (path) order."""
    root = config.root
    target = config.runtime_target
    patterns = ["*.py", *sorted({p for rule in config.options.text_rules for p in rule.patterns})]
    found = discover(config.paths, root, config.excludes, skip=[target], patterns=patterns)
    result = RunResult(root=root, skipped=found.skipped)
    files = sorted(found.files, key=lambda p: _rel(p, root))
    for done, path in enumerate(files, 1):
        rel = _rel(path, root)
        result.files.append(process_file(path, rel, config.options, bootstrap_path(path, target.parent)))
        if progress is not None:
            progress(done, len(files))
    if any(f.status == "changed" for f in result.files):
        result.runtime_changes, note = vendor_changes(target, root)
        if note:
            result.notes.append(note)
    return result


def _rel(path: Path, root: Path) -> str:
    try:
        return path.absolute().relative_to(root.absolute()).as_posix()
    except ValueError:
        return path.as_posix()
