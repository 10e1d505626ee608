"""The pre-filter's byte stage: which rules a file's raw bytes let through.

Each rule's ``needs`` become needle groups (``Needle``): whole words that must all occur,
and, for some, a word that must be called or a target's last name that the file's imports
may reach. One C-speed scan of the file's identifier-like words, then set lookups; a
regex search only for a group that needs a call or a use.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import NamedTuple, Optional, Sequence

from porter.engine.prefilter.evidence_check import byte_words
from porter.rulebase.needs import literal_patterns
from porter.rulebase.rule import BYTES_GAP, Rule


class Needle(NamedTuple):
    """What one way for a rule to match needs in a file's bytes."""

    #: words that must all occur (as whole identifiers)
    words: frozenset
    #: the word that must be called (``c(``, ``c.d(``, ``c as``, ``from ...c import``), if any
    call: Optional[bytes] = None
    #: for a target ``a.b.c``: (``a``, ``c``), a use of ``c`` the file's imports of
    #: ``a`` can reach must occur (see ``ByteFilter``)
    use: Optional[tuple[bytes, bytes]] = None


def needles(rule: type[Rule]) -> list[Needle]:
    """Needle groups of ``rule``: words that must all occur in a file (as whole
    identifiers), the word that must be called there and the use that must occur, if any.

    Any use of ``a.b.c`` needs ``a`` (in its import) and ``c`` (in the use or in a
    ``from a.b import c``) somewhere in the file. A ``calls_only`` target and a method
    also need a call: ``c(``, ``c.d(`` (a call under it), ``c as`` (an alias) or
    ``from a.b.c import d`` (a name under it, called by that name).
    """
    needs = rule.needs
    extra = tuple(w.encode() for w in sorted(needs.words))
    found: list[Needle] = []
    for target in sorted(needs.targets):
        # ``import torch.cuda.nvtx as nv`` + ``nv.range()`` still spells every part.
        parts = tuple(dict.fromkeys(p.encode() for p in target.split(".")))
        found.append(Needle(frozenset(parts + extra), parts[-1] if needs.calls_only else None,
                            (parts[0], target.rsplit(".", 1)[-1].encode())))
    for method in sorted(needs.methods):
        found.append(Needle(frozenset((method.encode(),) + extra), method.encode()))
    if not found and (extra or needs.project is None):  # a model-driven rule with no words: never by bytes
        found.append(Needle(frozenset(extra)))
    return found


_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=None)
def _call_pattern(word: bytes) -> "re.Pattern[bytes]":
    # The literal first (with the word boundary checked behind it) lets the regex
    # engine scan for the word at C speed. Whitespace includes line continuations.
    w = re.escape(word)
    return re.compile(w + rb"(?<=\b" + w + rb")(?:(?:" + BYTES_GAP + rb"\." + BYTES_GAP + rb"[A-Za-z_][A-Za-z0-9_]*)*+"
                      + BYTES_GAP + rb"(?:\(|import\b)|\s+as\b)")


@lru_cache(maxsize=None)
def _word_pattern(word: bytes) -> "re.Pattern[bytes]":
    return literal_patterns([word], whole_words=True)[0]


_IMPORT_WORD = re.compile(rb"import(?<=\bimport)\b")
_OPEN_PAREN = re.compile(rb"[ \t]*\(")
#: The dotted name right before an attribute (``torch.distributions.`` before
#: ``Poisson``), on one line; its first name is group 1.
_RECEIVER = re.compile(rb"([A-Za-z_][A-Za-z0-9_]*)(?:[ \t]*\.[ \t]*[A-Za-z_][A-Za-z0-9_]*)*[ \t]*\.[ \t]*\Z")
#: How far back a receiver is looked for; a longer one counts as a use.
_RECEIVER_REACH = 256


class _Imports:
    """The words of a file's import statements, by the module word each mentions."""

    def __init__(self, data: bytes) -> None:
        self.statements = []
        for match in _IMPORT_WORD.finditer(data):
            text = _statement(data, match.start(), match.end())
            self.statements.append(frozenset(_IDENTIFIER.findall(text)) | ({b"*"} if b"*" in text else set()))
        self._reaching: dict[bytes, frozenset] = {}

    def reaching(self, root: bytes) -> frozenset:
        """Every name an import that mentions ``root`` may bind (its words)."""
        if root not in self._reaching:
            self._reaching[root] = frozenset().union(*(s for s in self.statements if root in s))
        return self._reaching[root]


def _statement(data: bytes, start: int, end: int) -> bytes:
    """The import statement around the word ``import`` at ``start:end``: from its
    line's start to its line's end, across backslash continuations and through a
    parenthesized list of names (more than the statement is fine: only a superset of
    the names it binds is wanted)."""
    first = data.rfind(b"\n", 0, start) + 1
    while first > 1 and (data[first - 2:first - 1] == b"\\" or data[first - 3:first - 1] == b"\\\r"):
        first = data.rfind(b"\n", 0, first - 1) + 1
    paren = _OPEN_PAREN.match(data, end)
    if paren is not None:
        close = data.find(b")", paren.end())
        return data[first:close if close >= 0 else len(data)]
    last = end
    while True:
        last = data.find(b"\n", last)
        if last < 0:
            return data[first:]
        if data[last - 1:last] != b"\\" and data[last - 2:last] != b"\\\r":
            return data[first:last]
        last += 1


def _may_use(data: bytes, use: tuple[bytes, bytes], imports: _Imports) -> bool:
    """Whether some occurrence of ``last`` may be a use of a target ``root. ... .last``
    as the ``ast`` stage resolves one: a dotted name whose first name an import that
    mentions ``root`` binds (``torch.mode``, ``th.mode``, ``D.Poisson``), or the bare
    name where such an import binds it (``from torch import mode``). ``latent.mode()``
    and a keyword ``mode=`` are none."""
    root, last = use
    bound = imports.reaching(root)
    if not bound:
        return False
    if b"*" in bound:
        return True
    for match in _word_pattern(last).finditer(data):
        start = match.start()
        before = data[max(0, start - _RECEIVER_REACH):start]
        if not before.rstrip(b" \t").endswith(b"."):
            if last in bound:
                return True
            continue
        receiver = _RECEIVER.search(before)
        if receiver is None or (receiver.start() == 0 and start > _RECEIVER_REACH) or receiver.group(1) in bound:
            return True  # a receiver across lines or past the reach counts too
    return False


class ByteFilter:
    """The rules' needle words against the set of identifier-like words of a file:
    one C-speed scan per file, then set lookups (and, for a group that needs a call
    or a use, one regex search for that word, made once per file)."""

    def __init__(self, rules: Sequence[type[Rule]]) -> None:
        self.groups = [(rule, needles(rule)) for rule in rules]
        #: per rule, the groups of words its evidence needs (one word of each)
        self.evidence = {rule: byte_words(rule.needs.evidence) for rule in rules if rule.needs.evidence is not None}
        self.words = frozenset(w for _, groups in self.groups for g in groups for w in g.words) | frozenset(
            w for groups in self.evidence.values() for g in groups for w in g)

    def candidates(self, data: bytes) -> list[type[Rule]]:
        present = self.words.intersection(_IDENTIFIER.findall(data))
        if not present:
            return []
        called: dict[bytes, bool] = {}
        used: dict[tuple[bytes, bytes], bool] = {}
        imports: list[_Imports] = []

        def is_called(word: bytes) -> bool:
            if word not in called:
                called[word] = _call_pattern(word).search(data) is not None
            return called[word]

        def is_used(use: tuple[bytes, bytes]) -> bool:
            if use not in used:
                if not imports:
                    imports.append(_Imports(data))
                used[use] = _may_use(data, use, imports[0])
            return used[use]

        out = []
        for rule, groups in self.groups:
            patterns = rule.needs.byte_patterns
            if any(not (g & present) for g in self.evidence.get(rule, ())):
                continue
            if any(g.words <= present and (g.call is None or is_called(g.call)) and (g.use is None or is_used(g.use))
                   for g in groups) and (not patterns or any(p.search(data) for p in patterns)):
                out.append(rule)
        return out


@lru_cache(maxsize=8)
def byte_filter(rules: tuple[type[Rule], ...]) -> ByteFilter:
    return ByteFilter(rules)


def byte_candidates(data: bytes, rules: Sequence[type[Rule]]) -> list[type[Rule]]:
    return byte_filter(tuple(rules)).candidates(data)
