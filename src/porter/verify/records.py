"""What ``porter verify`` reports: each module's import, the ``--run`` command, the whole run
(porter.verify.command fills them in)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Optional, Sequence

from porter.verify.mapping import Mapping
from porter.verify.modules import SkippedFile


@dataclass
class ModuleResult:
    module: str
    path: str
    status: str  # "ok" | "failed" | "timeout" | "crashed"
    seconds: float = 0.0
    error: str = ""  # the exception's last line, or what happened
    error_type: str = ""
    location: Optional[tuple[str, int]] = None  # innermost frame inside the tree
    frames: list[tuple[str, int]] = field(default_factory=list)  # in the tree, innermost first
    missing: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    traceback: str = ""
    output: str = ""  # what the module printed (failures only), tail
    mapping: Optional[Mapping] = None
    script: bool = False  # a script: only its imports were run (porter.verify.scripts)


@dataclass
class RunCommandResult:
    command: str
    returncode: Optional[int]
    seconds: float
    status: str  # "ok" | "failed" | "timeout"
    output: str  # tail of stdout + stderr
    error: str = ""
    location: Optional[tuple[str, int]] = None
    frames: list[tuple[str, int]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    mapping: Optional[Mapping] = None
    rank: Optional[int] = None  # the launcher's child (torchrun, mpiexec rank) that failed
    full_output: str = field(default="", repr=False)  # all of it (--against compares its numbers)


#: The longest limit a timer is set to (about four months).
MAX_SECONDS = 1e7


@dataclass
class VerifyOptions:
    path: Path
    root: Path
    python: str = sys.executable
    timeout: float = 60.0
    jobs: int = 1
    include_tests: bool = False
    excludes: Sequence[str] = ()
    allow: Sequence[str] = ()
    run: Optional[str] = None
    run_timeout: Optional[float] = None
    #: where the --run command's output is shown as it comes (a binary stream), if anywhere
    echo: Optional[BinaryIO] = None
    #: "mps": the children run under porter_runtime's emulation of MPS (PORTER_EMULATE);
    #: "cuda": on an emulated CUDA machine (porter/verify/emulate_cuda)
    emulate: Optional[str] = None
    #: --against: the original tree, whose run of ``run`` the port's must match
    against: Optional[Path] = None

    def __post_init__(self) -> None:
        # Longer than any run, and short enough for every timer below it (threading's,
        # faulthandler's): `--timeout 1e10` means "no limit", not an OverflowError.
        self.timeout = min(self.timeout, MAX_SECONDS)
        if self.run_timeout is not None:
            self.run_timeout = min(self.run_timeout, MAX_SECONDS)


@dataclass
class VerifyReport:
    root: Path
    python: str
    modules: list[ModuleResult]
    skipped: list[SkippedFile]
    run: Optional[RunCommandResult] = None
    cuda_available: Optional[bool] = None  # torch.cuda.is_available() seen in a worker
    analysis_error: str = ""
    seconds: float = 0.0
    workers: int = 0  # worker processes started for the batches (not counting restarts)
    #: rewrites porter would still make in the tree (0 once it is ported)
    pending_rewrites: int = 0
    emulate: Optional[str] = None
    #: whether a child started the runtime's emulation (None: not emulating)
    emulation_started: Optional[bool] = None
    #: operators that fell back to the CPU under emulation: op, calls, first_at, always
    fallbacks: list[dict] = field(default_factory=list)
    #: --against: the original's run and the port's, compared (porter.verify.against)
    differential: Optional[Any] = None

    @property
    def failures(self) -> list[ModuleResult]:
        return [m for m in self.modules if m.status != "ok"]

    @property
    def ok(self) -> bool:
        return not self.failures and (self.run is None or self.run.status == "ok") and (
            self.differential is None or self.differential.same)

    def counts(self) -> dict[str, int]:
        out = {"modules": len(self.modules), "ok": 0, "failed": 0, "timeout": 0, "crashed": 0}
        for m in self.modules:
            out[m.status] += 1
        causes = [m.mapping.cause if m.mapping else "other" for m in self.failures]
        out["named"] = sum(1 for m in self.failures if m.mapping and m.mapping.named)
        out["missing_dependency"] = causes.count("missing-dependency")
        # NOT NAMED: a CUDA cause porter's report does not name (a porter bug)
        out["not_named"] = sum(1 for m, c in zip(self.failures, causes) if c == "cuda" and not m.mapping.named)
        out["other"] = causes.count("other")
        out["skipped"] = len(self.skipped)
        return out
