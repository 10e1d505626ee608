"""What a rule needs in a file before it can match: one declaration per rule.

A rule sets ``needs = Needs(...)``; the engine's pre-filter (``porter.engine.prefilter``) and
its segments (``porter.engine.stages.segments``) read it to skip files, and parts of files, the rule
can't change. The rule itself never consults the pre-filter: the declaration is data,
and skipping is only ever an optimisation (``PORTER_PREFILTER=0`` and
``PORTER_SEGMENTS=0`` give the same output).

The finer filters (``file_filter``, ``unit_filter``) are plain functions over the
facts the engine hands them (``prefilter.SyntaxFacts``, ``prefilter.Unit``); they read
the facts through their helpers (``passed_names``, ``passed_strings``, ``uses_any``
...), never through an encoding. They must never reject a file or unit the rule would
change: every rule example runs through them (tests/test_prefilter.py,
tests/test_segments.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Union

#: A finer file filter: the file's syntax facts → may the rule match there?
FileFilter = Callable[[Any], bool]
#: A unit filter: (a function or class of the file, the file's facts) → may the rule
#: act inside it? The unit's own facts are ``unit.facts``, its ``ast`` node ``unit.node``.
UnitFilter = Callable[[Any, Any], bool]


@dataclass(frozen=True)
class Needs:
    """What a file must hold for a rule to match there (every field narrows)."""

    #: Qualified names the rule matches (``torch.cuda.synchronize``); the rule's
    #: ``targets`` (what ``Rule.matches`` looks for) are these.
    targets: frozenset[str] = frozenset()
    #: Method or attribute names the rule matches on any receiver (``.cuda()``).
    methods: frozenset[str] = frozenset()
    #: Words that must all appear in a file for an untyped pattern to be possible.
    words: frozenset[str] = frozenset()
    #: When set, the file must hold a string constant this pattern matches.
    strings: Optional["re.Pattern[str]"] = None
    #: The rule acts only on calls of its targets (or of names under them), not on
    #: other references: the pre-filter may skip files that merely mention them.
    calls_only: bool = False
    #: The file's raw bytes must match one of these (for what words can't express:
    #: ``.to(`` and an integer). Empty: no byte pattern.
    byte_patterns: tuple["re.Pattern[bytes]", ...] = ()
    #: The rule looks at more of the file than the statement it changes (evidence over
    #: the whole module, a check of the module's end, line numbers in its messages):
    #: the engine then never hands it a module with parts left out.
    whole_file: bool = False
    #: A finer test of the whole file's facts, for what the fields above can't express.
    file_filter: Optional[FileFilter] = None
    #: Whether the rule may act inside one function or class; replaces the default
    #: (the unit uses, or for ``calls_only`` calls, a target or calls a method; for a
    #: rule with neither, the string pattern and ``file_filter`` hold in the unit). A
    #: rule whose evidence lies outside the node it changes sets this or ``whole_file``.
    unit_filter: Optional[UnitFilter] = None
    #: For a rule driven by the repository-wide model (porter.project): (the model, the
    #: file's path) -> may the rule act in this file? When a run has a model, this alone
    #: decides (the byte and syntax filters above are skipped for the rule, which must
    #: then set ``whole_file``); a file alone (no model) goes through the filters above.
    project: Optional[Callable[[Any, str], bool]] = None

    def __post_init__(self) -> None:
        # Accept any iterable (a set literal, a dict's keys) and one pattern alone.
        for name in ("targets", "methods", "words"):
            object.__setattr__(self, name, frozenset(getattr(self, name)))
        object.__setattr__(self, "byte_patterns", _tuple(self.byte_patterns))


def _tuple(patterns: Union["re.Pattern[bytes]", Iterable["re.Pattern[bytes]"]]) -> tuple:
    return (patterns,) if isinstance(patterns, re.Pattern) else tuple(patterns)


def literal_patterns(words: Iterable[Union[str, bytes]], whole_words: bool = False) -> tuple["re.Pattern[bytes]", ...]:
    """``byte_patterns`` for "one of these words occurs": one pattern per word, not an
    alternation. A pattern that starts with a literal is searched at C speed; an
    alternation is tried at every position of the file. ``whole_words``: not inside a
    longer identifier (the boundary is checked behind the literal, keeping it first)."""
    out = []
    for word in sorted({w.encode() if isinstance(w, str) else w for w in words}):
        literal = re.escape(word)
        out.append(re.compile(literal + rb"(?<=\b" + literal + rb")\b" if whole_words else literal))
    return tuple(out)
