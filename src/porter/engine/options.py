"""What a run applies to every file: the rules, the opt-in fixes, the settings."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional, Sequence

from porter.engine.config import ignored_codes
from porter.project.touchpoints import ledger
from porter.rulebase.rule import BaseRule, Rule, TextRule

if TYPE_CHECKING:
    from porter.project.model import ProjectModel


@dataclass
class Options:
    """What a run applies; shared by every file of the run."""

    rules: Sequence[type[BaseRule]]
    unsafe_fixes: bool = False
    #: Where the dependency-manifest rules move CUDA-only requirements: "marker"
    #: (an environment marker) or "extra" (an optional extra); from [tool.porter].
    dependencies: str = "marker"
    #: (glob, code prefixes) pairs from ``per-file-ignores``: rules skipped for those paths.
    per_file_ignores: Sequence[tuple[str, Sequence[str]]] = ()
    #: What the scanned tree tells the ledger about imports (porter.project.touchpoints.ledger) and the probe
    #: clean-up about its sources (porter.edits.probes); None: nothing, one file alone.
    ledger: Optional["ledger.TreeContext"] = None
    #: The repository-wide model the rules may ask (porter.project); None: one file alone.
    project: Optional["ProjectModel"] = None
    #: Settings files below the root (porter.cli.folder_settings), deepest first: (folder,
    #: its rules, its per-file-ignores); a file below one of them runs those instead.
    folders: Sequence[tuple[str, Sequence[type[BaseRule]], Sequence[tuple[str, Sequence[str]]]]] = ()
    #: Names the rest of the file reads outside the source being migrated (a notebook's
    #: other cells, which share its namespace): an import binding one stays even when the
    #: rewrites took its last use in this source (porter.edits.unused_imports).
    read_outside: frozenset[str] = frozenset()

    def for_path(self, rel: str) -> "Options":
        """These options for ``rel``: the rules of the nearest settings file above it,
        less those that ``per-file-ignores`` turns off there."""
        options = self
        for folder, rules, ignores in self.folders:
            if rel.startswith(folder + "/"):
                options = replace(self, rules=rules, per_file_ignores=ignores, folders=())
                rel = rel[len(folder) + 1:]  # its globs count from its own folder
                break
        return options._less_ignored(rel)

    def _less_ignored(self, rel: str) -> "Options":
        if not self.per_file_ignores:
            return self
        codes = ignored_codes(self.per_file_ignores, rel)
        if not codes:
            return self
        rules = [r for r in self.rules if not r.code.startswith(codes)]
        return replace(self, rules=rules, per_file_ignores=())

    @property
    def source_rules(self) -> list[type[Rule]]:
        return [r for r in self.rules if issubclass(r, Rule)]

    @property
    def text_rules(self) -> list[type[TextRule]]:
        return [r for r in self.rules if issubclass(r, TextRule)]

    def text_rules_for(self, name: str) -> list[type[TextRule]]:
        return [r for r in self.text_rules if any(fnmatch.fnmatch(name, p) for p in r.patterns)]
