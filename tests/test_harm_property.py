"""Property: for random trees mixing good files with the bad inputs of issue 17, ``porter
migrate --write`` writes only inside the root, every Python file it wrote compiles with
``compile()``, every bad file stays byte-identical, and a second run changes nothing.

Each example is a real CLI run (about two seconds): CI tries 8 trees;
``PORTER_HARM_EXAMPLES=100`` searches longer.
"""

import os
import subprocess
import sys
import warnings
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

GOOD = {
    "cuda": b"import torch\nx = torch.ones(1).cuda()\n",
    "future": b"from __future__ import annotations; import torch\nd = torch.device('cuda')\n",
    "docstring": b'"""Doc."""; import torch\nx = torch.zeros(2, device="cuda")\n',
    "cr_only": b"import torch\rx = torch.ones(1).cuda()\r",
    "crlf": b"import os\r\n\r\nimport torch\r\n\r\nx = torch.ones(1).cuda()\r\n",
    "clean": b"import os\nprint(os.sep)\n",
    "package_import": b"import torch\n\nfrom pkg import helper\n\nx = helper(torch.ones(1).cuda())\n",
}
#: Bad inputs: porter must leave every one of them byte-identical.
BAD = {
    "latin1_no_cookie": b"import torch\nname = 'caf\xe9'\nx = torch.ones(1).cuda()\n",
    "binary": b"\x00\x01import torch\x00\n",
    "syntax": b"import torch\nx = torch.ones(1).cuda(\n",
    "python2": b"import torch\nprint 'hello'\nx = torch.ones(1).cuda()\n",
    "shadow": b"import torch\nporter_runtime = 1\nx = torch.ones(1).cuda()\n",
    "shadow_param": b"import torch\ndef f(porter_runtime):\n    return torch.ones(1).cuda()\n",
    "module_return": b"import torch\nx = torch.ones(1).cuda()\nreturn x\n",
    "bad_cookie": b"# -*- coding: nope -*-\nimport torch\nx = torch.ones(1).cuda()\n",
}
NAMES = st.sampled_from(["a", "train", "odd name", "tab\tname", "caf\udce9", "esc\x1b[1m", "m2"])
FOLDERS = st.sampled_from(["", "pkg/", "scripts/", "env/", "src/lib/", "deep/er/"])
ENTRY = st.tuples(FOLDERS, NAMES, st.sampled_from(sorted(GOOD) + sorted(BAD)))


def snapshot(folder: Path) -> dict:
    out = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            if "__pycache__" not in path.parts:
                out[path.relative_to(folder)] = path.read_bytes()
    return out


def porter(root: Path, *args):
    return subprocess.run([sys.executable, "-m", "porter", "migrate", str(root), *args, "-j", "1", "--no-progress"],
                          capture_output=True, env={**os.environ, "NO_COLOR": "1"}, timeout=300)


@settings(max_examples=int(os.environ.get("PORTER_HARM_EXAMPLES", "8")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(ENTRY, min_size=1, max_size=7, unique_by=lambda e: (e[0], e[1])), st.booleans())
def test_random_trees_with_bad_inputs(tmp_path_factory, entries, with_pyproject):
    base = tmp_path_factory.mktemp("tree")
    root = base / "repo"
    sibling = base / "sibling"
    sibling.mkdir()
    (sibling / "keep.py").write_bytes(b"import torch\nx = torch.ones(1).cuda()\n")
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_bytes(b"def helper(x):\n    return x\n")
    if with_pyproject:
        (root / "pyproject.toml").write_bytes(b'[project]\nname = "demo"\nversion = "1"\n')
    kinds = {}
    for folder, name, kind in entries:
        path = root / folder / (name + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(GOOD.get(kind) or BAD[kind])
        kinds[path.relative_to(root)] = kind
    outside = snapshot(sibling)

    first = porter(root, "--write")
    assert first.returncode in (0, 2), first.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in first.stderr
    assert b"\x1b" not in first.stderr  # names are escaped on the terminal
    assert snapshot(sibling) == outside  # nothing written outside the root
    after = snapshot(root)
    for rel, data in after.items():
        kind = kinds.get(rel)
        if kind in BAD:
            assert data == BAD[kind], rel  # a bad file stays byte-identical
        elif rel.suffix == ".py":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(data, str(rel), "exec", dont_inherit=True)  # what porter wrote compiles
    assert not [p for p in after if "porter-tmp" in p.name]

    second = porter(root, "--write")
    assert second.returncode == first.returncode, second.stderr.decode("utf-8", "replace")
    assert snapshot(root) == after  # a second run changes nothing
    diff = porter(root, "--diff")
    assert diff.stdout == b""
