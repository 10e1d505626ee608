"""What a stage hands back: new bytes and findings for one text (``SourceResult``),
and the whole story of one file of a run (``FileResult``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from porter.project.touchpoints import ledger
from porter.rulebase.rule import Finding


@dataclass
class SourceResult:
    new: bytes
    findings: list[Finding]
    needs_runtime: bool = False

    @property
    def rewrites(self) -> list[Finding]:
        return [f for f in self.findings if f.action == "rewrite"]


@dataclass
class FileResult:
    """What happened to one file. Plain, picklable data."""

    path: str  # relative to the run's root, with "/" separators
    status: str  # "unchanged" | "changed" | "error" | "skipped"
    findings: list[Finding] = field(default_factory=list)
    error: str = ""
    old: Optional[bytes] = None  # set only when status == "changed"
    new: Optional[bytes] = None
    #: The file (after migration) imports porter_runtime, so the run must vendor it.
    uses_runtime: bool = False
    #: The copy it imports: its folder (relative to the root) and package, when porter
    #: added the import; ``runtime_from`` is the package of an import the file already had.
    runtime_folder: str = ""
    runtime_package: str = ""
    runtime_from: str = ""
    #: Why the file finds that copy only under conditions (porter.project.vendoring.runtime_home).
    runtime_note: str = ""
    #: Its CUDA touchpoints and how each is accounted for (porter.project.touchpoints.ledger).
    ledger: list["ledger.Touchpoint"] = field(default_factory=list)

    @property
    def rewrites(self) -> list[Finding]:
        return [f for f in self.findings if f.action == "rewrite"]

    @property
    def reviews(self) -> list[Finding]:
        return [f for f in self.findings if f.action == "review"]
