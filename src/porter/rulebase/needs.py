"""What a rule needs in a file before it can match: one declaration per rule, as data.

A rule sets ``needs = Needs(...)``: the names it matches (``targets``, ``methods``), the
words and strings a file must hold, and the evidence it needs beside them as a clause
(``porter.rulebase.evidence``: ``CallsMethod("from_pretrained") & Keyword("device_map")``).
The engine derives every filter from that declaration: the byte stage, the ``ast`` stage
and which functions or classes of a file the rule must see (``porter.engine.prefilter``,
``porter.engine.stages.segments``). The rule itself never consults the pre-filter, and skipping
is only ever an optimisation (``PORTER_PREFILTER=0`` and ``PORTER_SEGMENTS=0`` give the
same output). Every rule example runs through the filters, which must never reject a
file or unit the rule would change (tests/test_prefilter.py, tests/test_segments.py).

No rule hands the engine a function: a clause says even PT901's join (a name passed to
``.to`` that the file also passes to ``set_device``), so a rule never reads the engine's
facts (tests/test_rule_evidence.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Union

from porter.rulebase.evidence import Clause

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
    #: What else the file must show (``porter.rulebase.evidence``): a loader call and a
    #: ``device_map=`` keyword, a move to the device. The byte and ``ast`` filters follow
    #: from it; for a rule with neither targets nor methods it must hold in a function or
    #: class too for the rule to act there.
    evidence: Optional[Clause] = None
    #: Where in a file the rule may act: a clause that must hold in a function or class
    #: (``InFile(...)`` looks at the whole file). Default: the unit uses (for
    #: ``calls_only`` calls) a target or calls a method; for a rule with neither, the
    #: string pattern and ``evidence`` hold in the unit. A rule whose evidence lies
    #: outside the node it changes sets this or ``whole_file``.
    unit: Optional[Clause] = None
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
