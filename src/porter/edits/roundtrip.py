"""Lines no rule touched come out as they went in, even where LibCST can't reproduce them.

LibCST round-trips almost every file byte for byte, not all: ``except ValueError :``
comes back as ``except ValueError:`` (it keeps no space before that colon), and a file
in a codec such as ``unicode_escape`` comes back re-encoded. A port must change only
what a rule changed, so the lines the round trip alone altered are put back: each line
of the output that is an untouched line of the round trip gets the original's line.
"""

from __future__ import annotations

import difflib


def restore_untouched(original: bytes, roundtrip: bytes, new: bytes) -> bytes:
    """``new`` (made from the module that printed as ``roundtrip``) with the original
    text of every line it kept from the round trip unchanged."""
    if roundtrip == original:
        return new
    orig, trip, out = _lines(original), _lines(roundtrip), _lines(new)
    back: dict[int, bytes] = {}  # line of the round trip -> the original's line
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, trip, orig, autojunk=False).get_opcodes():
        if tag == "replace" and i2 - i1 == j2 - j1:
            back.update(zip(range(i1, i2), orig[j1:j2]))
    if not back:
        return new
    for tag, i1, i2, j1, _ in difflib.SequenceMatcher(None, trip, out, autojunk=False).get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                if i1 + k in back:
                    out[j1 + k] = back[i1 + k]
    return b"".join(out)


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)
