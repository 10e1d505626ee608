"""The numbers two runs printed, compared line by line (standard library only: porter's
own process compares them)."""
from __future__ import annotations

import math
import re

#: A line that measures the machine as a whole (a date, a clock, a progress bar's rate).
_CLOCK_LINE = re.compile(r"\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|it/s|s/it|\beta\b", re.IGNORECASE)
#: A number's label that measures the machine (``epoch_time: 13.5``, ``12.3 ms``, ``tok/s``, memory).
TIMING = re.compile(r"time|elapsed|\bsec|\bms\b|throughput|speed|/s\b|per.?s(ec)?\b|mem|mib|\bmb\b|\bgb\b|"
                    r"duration|took|mfu|fps|\d\s*s\b", re.IGNORECASE)
_DELIMITER = re.compile(r"[,;|{}()\[\]]")
#: Lines about the code, not its results: a warning (``path:line: FutureWarning: ...``) and
#: the source line printed under it, a traceback's frames, porter_runtime's own notes.
_ABOUT_CODE = re.compile(r"^\S.*?:\d+: \w*Warning\b|^\s*File \"|^porter[_ ]", re.IGNORECASE)
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def relative(a: float, b: float) -> float:
    """0 when equal (NaN and NaN too), else the difference relative to ``b``."""
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    return abs(a - b) / max(abs(b), 1e-6)


def numbers(text: str) -> list[tuple[int, float]]:
    """(line number, value) of every number printed, those that measure the machine left out."""
    found, warned = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _ABOUT_CODE.search(line) or (warned and line[:1].isspace()):
            warned = "Warning" in line or (warned and line[:1].isspace())
            continue
        warned = False
        if _CLOCK_LINE.search(line):
            continue
        start = 0
        for m in _NUMBER.finditer(line):
            label = _DELIMITER.split(line[start:m.start()])[-1]
            unit = line[m.end():m.end() + 4]
            start = m.end()
            if not TIMING.search(label) and not re.match(r"\s*(s|ms|sec|seconds?|mib|mb|gb)\b", unit, re.I):
                found.append((n, float(m.group())))
    return found


def compare_text(a: str, b: str) -> tuple[float, str]:
    """The largest difference between the numbers two outputs printed, and where: the
    line of the largest, or the counts when they printed a different number of them."""
    left, right = numbers(a), numbers(b)
    if len(left) != len(right):
        return math.inf, f"{len(left)} numbers printed by the original, {len(right)} by the port"
    worst, where = 0.0, ""
    for (line, x), (_, y) in zip(left, right):
        d = relative(x, y)
        if d > worst:
            worst, where = d, f"line {line}: {x:g} against {y:g}"
    return worst, where
