"""The older, flat layout of porter_runtime, and how a copy in it is brought to today's.

Until its modules were grouped into sub-packages (``attn/``, ``thirdparty/``, ``twins/``,
``tools/``), the runtime was one flat folder: ``_attention.py``, ``_thirdparty_apex.py``,
``_twins.py``... A copy an older porter vendored that way is still porter's own (its
``VENDORED.txt`` says so) and of the same version, so it must not read as edited by hand.
porter recognises it by its ``__init__``, which names flat modules, and vendors it again in
today's layout, holding at least what it held; the flat modules it replaces are removed
when the copy is written (porter.files.vendor_write). The modules whose names did not
change (``_device.py``, ``_amp.py``...) are rewritten in place.
"""

from __future__ import annotations

import ast
from pathlib import Path

#: Each flat module of the older layout and the module (path inside the package) it became.
FLAT = {
    "_attention": "attn/attention", "_attn_core": "attn/core", "_sdpa": "attn/sdpa", "_fa3": "attn/fa3",
    "_flash_v1": "attn/flash_v1", "_thirdparty_libs": "thirdparty/libs",
    "_thirdparty_adam_atan2": "thirdparty/adam_atan2", "_thirdparty_apex": "thirdparty/apex",
    "_thirdparty_bnb": "thirdparty/bnb", "_thirdparty_xformers": "thirdparty/xformers",
    "_thirdparty_xformers_bias": "thirdparty/xformers_bias", "_huggingface": "thirdparty/huggingface",
    "_twins": "twins/device_calls", "_memory": "twins/memory", "_timing": "twins/timing",
    "_doctor": "tools/doctor", "_emulate": "tools/emulate", "_mps_coverage": "tools/mps_coverage",
    "_peak": "tools/peak",
}


def is_flat(folder: Path) -> bool:
    """Whether the copy at ``folder`` has the older flat layout: its ``__init__`` names a
    flat module (its table of names, its ``_reset``), which today's never does."""
    try:
        tree = ast.parse((folder / "__init__.py").read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(isinstance(n, ast.Constant) and n.value in FLAT for n in ast.walk(tree))


def stale(folder: Path) -> list[str]:
    """The flat modules of the older layout in the copy at ``folder`` (file names)."""
    return sorted(f"{stem}.py" for stem in FLAT if (folder / f"{stem}.py").is_file())
