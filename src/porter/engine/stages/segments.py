"""Parsing only the parts of a file that a rule may change.

LibCST's parse, traversal and code generation cost grows with the file, and most of a
large file is functions and classes no rule touches. From the ``ast`` stage's facts
(``prefilter.Unit``: each definition at module level and in class bodies), the engine
keeps every statement that is not a definition, every definition some candidate rule
wants (``prefilter.unit_wanted``, from the rule's ``needs``), and reduces each other
definition to a one-line stub that binds the same name::

    def forward(self, x):            →    def forward(): pass  # porter-stub-1f2e:3
        ... 200 lines ...

The rules run on that reduced module as on any other; afterwards each stub line is
put back, byte for byte, as the lines it stood for. Findings' line numbers are mapped
back to the original file.

Whenever this can't be exact, the engine parses the whole file instead: a candidate
rule that needs the whole file (``Needs.whole_file``); a file that is not plain UTF-8
with ``\\n`` / ``\\r\\n`` line ends; a definition that declares ``global`` / ``nonlocal``
or whose lines don't look as expected; a stub a rule changed or removed; an import
whose removal would leave a use inside a stub.
"""

from __future__ import annotations

import secrets
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Sequence

from porter.engine.prefilter import SyntaxFacts, Unit, unit_wanted
from porter.rulebase.rule import Rule


class Stub(NamedTuple):
    line: bytes  # the stub's exact line in the reduced module
    original: bytes  # the lines it stands for
    at: int  # its line number in the reduced module
    hidden: int  # original lines hidden by this stub and the ones before it


@dataclass
class Reduced:
    data: bytes  # the reduced module's bytes
    stubs: list[Stub] = field(default_factory=list)  # in file order
    #: names used (loaded or stored) inside the stubbed definitions
    stub_names: set[str] = field(default_factory=set)

    def original_line(self, line: int) -> int:
        """The original file's line for a line of the reduced module (not a stub)."""
        index = bisect_right([stub.at for stub in self.stubs], line)
        return line + (self.stubs[index - 1].hidden if index else 0)

    def splice(self, new: bytes) -> Optional[bytes]:
        """``new`` (the migrated reduced module) with every stub line replaced by its
        original lines, or None when a stub is no longer there exactly once."""
        pieces = []
        position = 0
        for stub in self.stubs:
            at = new.find(stub.line, position)
            if at < 0 or (at and new[at - 1:at] not in (b"\n", b"\r")):
                return None
            pieces.append(new[position:at])
            pieces.append(stub.original)
            position = at + len(stub.line)
        pieces.append(new[position:])
        return b"".join(pieces)


def reduce(data: bytes, facts: SyntaxFacts, rules: Sequence[type[Rule]]) -> Optional[Reduced]:
    """The reduced module for ``data``, or None when the whole file must be parsed
    (or nothing would be left out)."""
    if any(rule.needs.whole_file for rule in rules) or not facts.units:
        return None
    if data.startswith(b"\xef\xbb\xbf") or b"\r" in data.replace(b"\r\n", b""):
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    stubbed: list[Unit] = []
    for unit in facts.units:
        _choose(unit, facts, rules, stubbed)
    if not stubbed:
        return None
    lines = data.splitlines(keepends=True)
    marker = b"porter-stub-" + secrets.token_hex(4).encode()
    while marker in data:  # pragma: no cover - 2**-32
        marker = b"porter-stub-" + secrets.token_hex(4).encode()
    stubbed.sort(key=lambda u: u.first_line)
    reduced = Reduced(b"")
    out: list[bytes] = []
    line = 1  # next original line to copy
    hidden = 0
    for number, unit in enumerate(stubbed):
        first, last = unit.first_line, unit.last_line
        stub = _stub(unit, lines, first, last, marker + b":%d" % number)
        if stub is None:
            return None
        out.extend(lines[line - 1:first - 1])
        out.append(stub)
        at = first - hidden
        hidden += last - first
        reduced.stubs.append(Stub(stub, b"".join(lines[first - 1:last]), at, hidden))
        reduced.stub_names |= unit.facts.names
        line = last + 1
    out.extend(lines[line - 1:])
    reduced.data = b"".join(out)
    return reduced


def _choose(unit: Unit, file: SyntaxFacts, rules: Sequence[type[Rule]], stubbed: list[Unit]) -> None:
    """Stub ``unit`` if no rule wants it; in a wanted class, look at its members."""
    if unit.resolved_facts().rebinds:
        return
    if not any(unit_wanted(rule, unit, file) for rule in rules):
        stubbed.append(unit)
        return
    for child in unit.children:
        _choose(child, file, rules, stubbed)


def _stub(unit: Unit, lines: list[bytes], first: int, last: int, tag: bytes) -> Optional[bytes]:
    """``<indent>def name(): pass  # <tag>`` in place of lines ``first..last``."""
    node = unit.node
    name = node.name.encode()  # type: ignore[attr-defined]
    if not name.isascii() or last > len(lines):
        return None
    head = lines[first - 1]
    text = head.lstrip(b" \t")
    indent = head[: len(head) - len(text)]
    decorated = first != node.lineno  # type: ignore[attr-defined]
    keyword = b"class" if type(node).__name__ == "ClassDef" else b"def"
    if decorated and not text.startswith(b"@"):
        return None
    if not decorated and not text.startswith((keyword, b"async")):
        return None
    tail = lines[last - 1]
    ending = b"\r\n" if tail.endswith(b"\r\n") else b"\n" if tail.endswith(b"\n") else b""
    body = b"%s %s: pass" % (keyword, name) if keyword == b"class" else b"def %s(): pass" % name
    return indent + body + b"  # " + tag + ending
