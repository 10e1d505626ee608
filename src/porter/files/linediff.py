"""A line matcher for long files: difflib's, with patience diff's anchors in front.

difflib's ``SequenceMatcher`` takes time quadratic in the lines of a file where many lines
are alike: 4,000 functions, each rewritten the same way, took over two minutes to diff.
This matcher first pairs the lines that occur exactly once on each side (in the order
they occur on both: a longest increasing subsequence, as in patience diff), then matches
the common head and tail of each gap between two anchors, and leaves only what is left
of a gap to difflib. Where no line is unique and the gap is large, the gap is one
replacement: a correct diff, if not the shortest one.

Short files keep difflib's own matching, byte for byte.
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from typing import Sequence

#: Files up to this many lines (both sides together) are matched by difflib alone.
SHORT = 2000
#: A gap with no unique line is left to difflib only up to this many pairs of lines.
DIFFLIB_PAIRS = 250_000


class AnchoredMatcher(difflib.SequenceMatcher):
    """``difflib.SequenceMatcher`` over lists of lines, anchored on unique lines."""

    def __init__(self, a: Sequence[str], b: Sequence[str]) -> None:
        super().__init__(None, a, b, autojunk=True)

    def get_matching_blocks(self) -> list:
        if self.matching_blocks is not None:
            return self.matching_blocks
        if len(self.a) + len(self.b) <= SHORT:
            return super().get_matching_blocks()
        found: list[tuple[int, int, int]] = []
        stack = [(0, len(self.a), 0, len(self.b))]
        while stack:
            alo, ahi, blo, bhi = stack.pop()
            found += _gap(self.a, self.b, alo, ahi, blo, bhi, stack)
        self.matching_blocks = _merged(sorted(found), len(self.a), len(self.b))
        return self.matching_blocks


def _gap(a, b, alo: int, ahi: int, blo: int, bhi: int, stack: list) -> list[tuple[int, int, int]]:
    """The blocks matched in one gap now; the gaps between its anchors go on ``stack``."""
    blocks = []
    head = 0
    while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
        head += 1
    if head:
        blocks.append((alo, blo, head))
        alo, blo = alo + head, blo + head
    tail = 0
    while ahi - tail > alo and bhi - tail > blo and a[ahi - tail - 1] == b[bhi - tail - 1]:
        tail += 1
    if tail:
        blocks.append((ahi - tail, bhi - tail, tail))
        ahi, bhi = ahi - tail, bhi - tail
    if alo == ahi or blo == bhi:
        return blocks
    anchors = _anchors(a, b, alo, ahi, blo, bhi)
    if anchors:
        previous = (alo, blo)
        for i, j in anchors:
            stack.append((previous[0], i, previous[1], j))
            blocks.append((i, j, 1))
            previous = (i + 1, j + 1)
        stack.append((previous[0], ahi, previous[1], bhi))
    elif (ahi - alo) * (bhi - blo) <= DIFFLIB_PAIRS:
        inner = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
        blocks += [(alo + m.a, blo + m.b, m.size) for m in inner.get_matching_blocks() if m.size]
    return blocks


def _anchors(a, b, alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """Pairs (i, j) of lines unique on both sides, the longest run in order on both."""
    count_a = Counter(a[alo:ahi])
    count_b = Counter(b[blo:bhi])
    where_b = {b[j]: j for j in range(blo, bhi) if count_b[b[j]] == 1}
    pairs = [(i, where_b[a[i]]) for i in range(alo, ahi) if count_a[a[i]] == 1 and a[i] in where_b]
    # Longest increasing subsequence of the j's (patience sorting), kept with back links.
    tops: list[int] = []
    top_index: list[int] = []
    back: list[int] = []
    for k, (_, j) in enumerate(pairs):
        pile = bisect.bisect_left(tops, j)
        back.append(top_index[pile - 1] if pile else -1)
        if pile == len(tops):
            tops.append(j)
            top_index.append(k)
        else:
            tops[pile] = j
            top_index[pile] = k
    out = []
    k = top_index[-1] if top_index else -1
    while k >= 0:
        out.append(pairs[k])
        k = back[k]
    return out[::-1]


def _merged(blocks: list[tuple[int, int, int]], la: int, lb: int) -> list:
    """Adjacent blocks joined, and difflib's closing (la, lb, 0)."""
    out: list[list[int]] = []
    for i, j, size in blocks:
        if out and out[-1][0] + out[-1][2] == i and out[-1][1] + out[-1][2] == j:
            out[-1][2] += size
        else:
            out.append([i, j, size])
    return [difflib.Match(i, j, size) for i, j, size in out] + [difflib.Match(la, lb, 0)]


def unified_lines(a: Sequence[str], b: Sequence[str], n: int = 3) -> list[str]:
    """``difflib.unified_diff(a, b, lineterm="", n=n)`` less its ---/+++ lines, on the
    anchored matcher: the hunk lines, each as difflib writes it."""
    out = []
    for group in AnchoredMatcher(a, b).get_grouped_opcodes(n):
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in a[i1:i2]]
                continue
            if tag in ("replace", "delete"):
                out += ["-" + line for line in a[i1:i2]]
            if tag in ("replace", "insert"):
                out += ["+" + line for line in b[j1:j2]]
    return out


def _range(start: int, stop: int) -> str:
    """A hunk's range as difflib writes it (``_format_range_unified``)."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return f"{beginning}"
    if not length:
        beginning -= 1
    return f"{beginning},{length}"
