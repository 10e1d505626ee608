"""What else a file (or one function of it) must show before a rule can match there: clauses, as data.

A rule's ``Needs`` names what it matches (targets, methods, words, a string pattern).
Some rules also need evidence next to it: a loader call *and* a ``device_map=`` keyword, a
``float64`` dtype *and* a move to the device somewhere in the file. A rule writes that
evidence once, as a clause built from the classes below::

    _FLASH_LOADER = CallsMethod("from_pretrained", "from_config") & (
        Keyword("use_flash_attention_2") | (Keyword("attn_implementation") & String(exact=_FLASH)))
    needs = Needs(methods=_LOADERS, evidence=_FLASH_LOADER, unit=_FLASH_LOADER)

and never reads the engine's facts itself. The engine derives from each clause what the
file's bytes must hold (``byte_words``: the identifiers of keywords, methods and names)
and checks the clause on the ``ast`` facts of the file and of each function or class
(``porter.engine.prefilter.evidence_check``). A clause may only over-approximate the
rule: the rule's examples and the fixture trees run through every filter
(tests/test_prefilter.py, tests/test_prefilter_equivalence.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


class Clause:
    """A condition on what a file (or a unit of it) shows. ``a & b``, ``a | b`` combine."""

    def __and__(self, other: "Clause") -> "Clause":
        return AllOf((self, other))

    def __or__(self, other: "Clause") -> "Clause":
        return AnyOf((self, other))


def _names(names: tuple) -> frozenset[str]:
    out: set[str] = set()
    for name in names:
        out.update([name] if isinstance(name, str) else name)
    return frozenset(out)


@dataclass(frozen=True, init=False)
class _Named(Clause):
    """A clause about names: ``Keyword("a", "b")`` and ``Keyword(SOME_SET)`` both read
    naturally in a rule."""

    names: frozenset[str]

    def __init__(self, *names) -> None:
        object.__setattr__(self, "names", _names(names))


@dataclass(frozen=True, init=False)
class Uses(_Named):
    """A use of one of the qualified names or of something under it, resolved
    through the file's imports; ``calls_only``: a call of one."""

    calls_only: bool

    def __init__(self, *names, calls_only: bool = False) -> None:
        object.__setattr__(self, "names", _names(names))
        object.__setattr__(self, "calls_only", calls_only)


@dataclass(frozen=True, init=False)
class ReadsFlag(_Named):
    """A name the module binds at its top level to a call of one of the qualified names
    (``HAS_CUDA = torch.cuda.is_available()``) is used: the unit reads the module's flag."""


@dataclass(frozen=True, init=False)
class CallsMethod(_Named):
    """A call ``<anything>.name(...)`` of one of the names."""


@dataclass(frozen=True, init=False)
class Keyword(_Named):
    """A call that passes one of these keyword arguments."""


@dataclass(frozen=True, init=False)
class Name(_Named):
    """One of these names (a name, an attribute's name or an imported name) appears."""


@dataclass(frozen=True)
class String(Clause):
    """A string constant that ``pattern`` finds (``re.search``), or that equals one of
    ``exact``. ``word``: an identifier every such string spells (``"cuda:0"``: ``cuda``),
    which the file's bytes must then hold."""

    pattern: Optional["re.Pattern[str]"] = None
    exact: frozenset[str] = frozenset()
    word: Optional[str] = None


#: A slot a call passes an argument in: (the callee's last name, or None for any
#: call; the position, 0 or 1, or None; the keyword, or None).
Slot = tuple[Optional[str], Optional[int], Optional[str]]
#: ``Passes(name=ANY_NAME)``: any name or attribute.
ANY_NAME = re.compile("")


@dataclass(frozen=True)
class Passes(Clause):
    """A call of ``call`` (a function's or method's last name; None: any call) that
    passes, at ``position`` or as ``keyword=``, one of: a string literal ``string``
    finds, an integer literal (``integer``), a name or attribute whose last name ``name``
    finds (``re.search``), or a name the file also passes in one of the slots
    ``name_also_at`` (``x.to(gpu)`` where ``torch.cuda.set_device(gpu)`` is called)."""

    call: Optional[str] = None
    position: Optional[int] = None
    keyword: Optional[str] = None
    string: Optional["re.Pattern[str]"] = None
    integer: bool = False
    name: Optional["re.Pattern[str]"] = None
    name_also_at: tuple[Slot, ...] = ()


@dataclass(frozen=True, init=False)
class Calls(_Named):
    """A call of a function or method of one of these last names (``to(...)``,
    ``x.to(...)``)."""


@dataclass(frozen=True, init=False)
class MovesResultOf(_Named):
    """A call of one of the qualified names whose result is moved at once
    (``torch.from_numpy(a).to(device)``, ``f(x).cuda()``)."""


@dataclass(frozen=True)
class ComparesDeviceType(Clause):
    """``<x>.device.type == value`` or ``!=`` (or the same on a name ``device``)."""

    value: str


@dataclass(frozen=True, init=False)
class TriesImport(_Named):
    """A top-level ``try`` imports one of the packages or something under it (an
    import chain, or a probe that sets an availability flag)."""


@dataclass(frozen=True, init=False)
class Imports(_Named):
    """An import statement names one of the modules or something under it."""


@dataclass(frozen=True)
class CalledByName(Clause):
    """For a unit: a function the file calls by its name somewhere (``main()`` at the
    bottom of a script reaches it). Never holds for a class or a whole file."""


@dataclass(frozen=True)
class InFile(Clause):
    """``clause`` holds in the whole file, whichever unit is being looked at (the
    evidence may sit in another function: a ``try: import xformers`` at the top)."""

    clause: Clause


@dataclass(frozen=True)
class AllOf(Clause):
    clauses: tuple[Clause, ...]


@dataclass(frozen=True)
class AnyOf(Clause):
    clauses: tuple[Clause, ...]
