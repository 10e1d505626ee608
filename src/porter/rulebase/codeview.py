"""A file's bytes with the text no rule reads taken out: comments and prose strings.

The byte stage of the pre-filter (``porter.engine.prefilter``) and the ledger's trigger lines
(``porter.project.touchpoints.ledger``) look for words anywhere in a file, so a word in a docstring's
example sends the file through an ``ast`` parse that then finds nothing: diffusers'
pipelines carry ``pipe.to("cuda")`` and ``torch_dtype=torch.bfloat16`` in docstrings,
and 302 of the 434 files its byte stage passes hold their words only there.

:func:`code_view` drops every comment and replaces every *prose string* with ``""``:
a triple-quoted string literal that spans lines, whose text has whitespace between
words, and that is no f-string (those hold code). Nothing reads either kind: ``ast``
has no comments, and every check of a string's value (a device or backend name, an
environment variable, a format template) wants a value without inner whitespace,
which a prose string never is. So when no rule's words are left in the view, no rule
and no touchpoint can be in the file. The view is only ever used for that "nothing
here" answer.

The lexing is one regular expression run at C speed: each match is a run of code and
one-line strings (kept), then the next comment, triple-quoted string, f-string or the
file's end. A quote where no string can start (an unterminated string: a file Python
rejects), or an f-string whose braces don't pair, makes the view None, and the caller
goes on with the raw bytes.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from typing import Optional

_DOUBLE = rb'"[^"\\\r\n]*+(?:\\.[^"\\\r\n]*+)*+"'
_SINGLE = rb"'[^'\\\r\n]*+(?:\\.[^'\\\r\n]*+)*+'"
_TRIPLE_DOUBLE = rb'"""[^"\\]*+(?:(?:\\.|"(?!""))[^"\\]*+)*+"""'
_TRIPLE_SINGLE = rb"'''[^'\\]*+(?:(?:\\.|'(?!''))[^'\\]*+)*+'''"
#: No f-prefix before the quote (``f"``, ``rf"``; ``elif"`` counts as one: that only
#: costs a check).
_NOT_F = rb"(?<![fF])(?<![fF][rRbB])"
#: Code and one-line strings that are no f-strings (a quote that opens a triple-quoted
#: string opens no one-line string)...
_KEPT = (rb"""(?:[^"'#]++|""" + _NOT_F + rb"""(?="(?!""))""" + _DOUBLE + rb"|" + _NOT_F + rb"(?='(?!''))"
         + _SINGLE + rb")*+")
#: ... then a comment, a triple-quoted string, a one-line f-string, a stray quote or the end.
_RUN = re.compile(_KEPT + rb"(#[^\r\n]*+|" + _TRIPLE_DOUBLE + rb"|" + _TRIPLE_SINGLE + rb"|" + _DOUBLE + rb"|"
                  + _SINGLE + rb"""|["']|\Z)""", re.S)
_PROSE = re.compile(rb"\S\s+\S")


@lru_cache(maxsize=1)
def code_view(data: bytes) -> Optional[bytes]:
    """``data`` without comments and with each prose string as ``""`` (None when the
    bytes don't lex as Python's strings and comments). The last answer is kept: the
    pre-filter and the ledger ask about the same file in turn."""
    return _view(data)


def _view(data: bytes) -> Optional[bytes]:
    pieces = []
    kept_from = 0
    for match in _RUN.finditer(data):
        start, end = match.span(1)
        if start == end:  # the end of the file
            break
        if data[start] == 0x23:  # "#": a comment, up to its line's end
            pieces.append(data[kept_from:start])
            kept_from = end
            continue
        if end - start == 1:  # a quote that opens no string
            return None
        if b"f" in data[max(0, start - 2):start].lower():
            # An f-string holds code. Python 3.12 lets its fields hold the same quote
            # (f"{d["k"]}"), which this lexing would end the string at: an open brace
            # left in the token says so, and then nothing here can be trusted.
            # (Escaped braces come in pairs and so do a field's; "{{" alone is
            # a literal brace that only costs this file its view.)
            token = data[start:end]
            if token.count(b"{") != token.count(b"}"):
                return None
            continue
        text = data[start + 3:end - 3]  # a triple-quoted string's text
        if b"\n" in text and _PROSE.search(text) is not None:
            pieces.append(data[kept_from:start])
            pieces.append(b'""')
            kept_from = end
    if not pieces:
        return data
    pieces.append(data[kept_from:])
    return b"".join(pieces)


#: ``PORTER_PREFILTER=0`` turns off every shortcut that skips text (the pre-filter's and
#: the ledger's), to check that they change nothing.
PREFILTER_ENV = "PORTER_PREFILTER"


def prefilter_enabled() -> bool:
    """Whether the shortcuts are on (``PORTER_PREFILTER`` is not "0")."""
    return os.environ.get(PREFILTER_ENV, "1") != "0"
