"""A name in a context (a definition, an attribute read, a call), found in a file's bytes.

Each test is what a regular expression says (named beside it), but starts from the name's
occurrences found by ``bytes.find`` and looks only around them: the expressions start
with an alternation, a ``\\b`` or a ``.``, which the regex engine scans for at every byte
of every file of the tree (3 s of transformers' project model, issue 27).
"""

from __future__ import annotations

from typing import Iterator

#: What ``\\s`` matches in a bytes pattern.
_SPACE = frozenset(b" \t\n\r\f\v")


def defines(data: bytes, name: str) -> bool:
    """``(?:def|class)\\s+NAME\\b``."""
    word = name.encode()
    for at in _occurrences(data, word):
        start = _space_before(data, at)
        if start < at and _boundary(data, at + len(word)) and data.endswith((b"def", b"class"), 0, start):
            return True
    return False


def reads_attribute(data: bytes, name: str) -> bool:
    """``\\.\\s*NAME\\b``."""
    word = name.encode()
    for at in _occurrences(data, word):
        start = _space_before(data, at)
        if start and data[start - 1] == ord(".") and _boundary(data, at + len(word)):
            return True
    return False


def calls(data: bytes, name: str) -> bool:
    """``\\bNAME\\s*\\(``."""
    word = name.encode()
    for at in _occurrences(data, word):
        end = at + len(word)
        while end < len(data) and data[end] in _SPACE:
            end += 1
        if end < len(data) and data[end] == ord("(") and _boundary(data, at):
            return True
    return False


def _occurrences(data: bytes, word: bytes) -> Iterator[int]:
    at = data.find(word)
    while at >= 0:
        yield at
        at = data.find(word, at + 1)


def _space_before(data: bytes, at: int) -> int:
    while at and data[at - 1] in _SPACE:
        at -= 1
    return at


def _is_word(data: bytes, at: int) -> bool:
    """``\\w`` of a bytes pattern (ASCII letters, digits, ``_``) at ``at``."""
    if not 0 <= at < len(data):
        return False
    byte = data[at]
    return byte == 95 or 48 <= byte <= 57 or 65 <= byte <= 90 or 97 <= byte <= 122


def _boundary(data: bytes, at: int) -> bool:
    """``\\b`` at ``at``."""
    return _is_word(data, at - 1) != _is_word(data, at)
