"""Every runtime function porter names, in a rewrite, a message or a suggestion, exists:
a reviewer who follows a suggestion must find what it names (one once named
``porter_runtime.distributed_backend()``, which the runtime never had)."""

import importlib.util
import re
from pathlib import Path

import porter_runtime

SRC = Path(__file__).resolve().parent.parent / "src" / "porter"
#: ``porter_runtime.X`` in prose about the runtime itself, not a call porter writes or suggests.
PROSE = {"X", "NAME", "py"}


def test_every_runtime_name_porter_writes_or_suggests_exists():
    named: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        for name in re.findall(r"porter_runtime\.([A-Za-z_]\w*)", path.read_text(encoding="utf-8")):
            named.setdefault(name, set()).add(path.relative_to(SRC).as_posix())
    assert len(named) > 40  # the scan sees the rules' rewrites and suggestions
    missing = {name: sorted(where) for name, where in named.items()
               if name not in PROSE and not hasattr(porter_runtime, name)
               and importlib.util.find_spec(f"porter_runtime.{name}") is None}  # a function, or a submodule
    assert not missing, missing
