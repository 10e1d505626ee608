"""Regenerate src/porter_runtime/tools/mps_coverage.py from the MPS op coverage reference.

    python bench/mps_coverage_table.py ../shared/reference/mps_ops_coverage.txt

The reference is read from the macOS arm64 wheels (native_functions.yaml per version);
the runtime carries a compact copy because it ships without porter and without the
reference. tests/runtime/test_rt_emulate_table.py checks the copy against the reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

CODES = {"MISSING": "M", "MPS": "P", "composite": "c", "absent": "a"}
TARGET = Path(__file__).resolve().parents[1] / "src" / "porter_runtime" / "tools" / "mps_coverage.py"

HEAD = '''"""Which aten operators lack an MPS kernel, per torch version (generated: do not edit).

Read from native_functions.yaml in the macOS arm64 wheels (porter's reference
mps_ops_coverage.txt); regenerate with bench/mps_coverage_table.py. One letter per
version in VERSIONS: M no MPS kernel (NotImplementedError on MPS unless
PYTORCH_ENABLE_MPS_FALLBACK=1), P MPS kernel, c composite (decomposes, works),
a absent in that version. Operators with an MPS kernel in every version are not listed.
"""
from __future__ import annotations

VERSIONS = {versions!r}

_ROWS = """
{rows}
"""

#: operator (``name`` or ``name.overload``) -> one letter per version in VERSIONS
TABLE = dict(line.split() for line in _ROWS.strip().splitlines())


def missing(op: str, version: tuple) -> str:
    """The letter for ``op`` in the column of ``version`` (the nearest listed one), '' if unlisted."""
    row = TABLE.get(op)
    if row is None:
        return ""
    older = [i for i, v in enumerate(VERSIONS) if v <= version]
    return row[older[-1] if older else 0]
'''


def parse(text: str) -> tuple[list[tuple[int, int]], dict[str, str]]:
    versions: list[tuple[int, int]] = []
    rows: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# op"):
            versions = [tuple(int(p) for p in v.split(".")[:2]) for v in line.split()[2:]]
        elif line.strip() and not line.startswith("#"):
            op, *states = line.split()
            rows[op] = "".join(CODES[s] for s in states)
    return versions, rows


def render(text: str) -> str:
    versions, rows = parse(text)
    body = "\n".join(f"{op} {states}" for op, states in rows.items())
    return HEAD.format(versions=versions, rows=body)


if __name__ == "__main__":
    TARGET.write_text(render(Path(sys.argv[1]).read_text()))
    print(f"wrote {TARGET}")
