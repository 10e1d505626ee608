"""Issue 26's fixture: one repository that combines the layouts that broke real ports.

- ``lab/models/sampling/``: a package whose parents ``lab/`` and ``lab/models/`` have no
  ``__init__.py`` (a PEP 420 namespace), with a CUDA default;
- ``app/train/attn_patch.py``: a package module that imports nothing else of the repo;
- ``app/train/main.py``: run with ``python -m app.train.main``, relative imports;
- ``scripts/run.py``: a script in a folder whose module-level CUDA code runs before its own
  ``sys.path`` edit, followed by a first-party import;
- ``notebooks/demo.ipynb``: a notebook beside no code of the repository.

After one ``--write`` every entry point runs on this CPU with porter's own packages hidden
(``tests/without_porter.py``), ruff finds no new F821/F401, the tree holds one runtime
copy, and ``--check`` is clean.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
WITHOUT_PORTER = HERE / "without_porter.py"

TREE = {
    "lab/models/sampling/__init__.py": "from .sampler import sample  # noqa: F401\n",
    "lab/models/sampling/sampler.py": (
        "import torch\n\n\ndef sample(n, device=\"cuda\"):\n    return torch.randn(n, device=device)\n"),
    "app/__init__.py": "",
    "app/train/__init__.py": "",
    "app/train/attn_patch.py": (
        "import torch\n\n\ndef patch(x):\n    if torch.cuda.is_available():\n"
        "        torch.backends.cuda.matmul.allow_tf32 = True\n    return x.cuda()\n"),
    "app/train/main.py": (
        "import torch\n\nfrom lab.models.sampling import sample\n\nfrom . import attn_patch\n"
        "from .attn_patch import patch\n\n\ndef main():\n    x = patch(torch.ones(2))\n"
        "    y = attn_patch.patch(sample(3))\n    print(\"main\", x.device.type, tuple(y.shape))\n\n\n"
        "if __name__ == \"__main__\":\n    main()\n"),
    "scripts/run.py": (
        "import os\nimport sys\n\nimport torch\n\n"
        "BUF = torch.empty(1, device=f\"cuda:{int(os.environ.get('LOCAL_RANK', 0))}\")\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), \"..\"))\n\n"
        "from app.train.attn_patch import patch  # noqa: E402\n\nprint(\"script\", patch(BUF).device.type)\n"),
}
NOTEBOOK = {
    "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
               "source": ["import torch\n", "x = torch.zeros(2).cuda()\n", "print('notebook', x.sum().item())"]}],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4, "nbformat_minor": 5,
}
#: (working folder, command, what it prints last)
ENTRY_POINTS = [
    (".", ["-m", "app.train.main"], "main cpu (3,)"),
    (".", ["scripts/run.py"], "script cpu"),
    ("notebooks", ["demo_cell.py"], "notebook 0.0"),
]


def make_tree(root: Path) -> Path:
    for rel, text in TREE.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "notebooks").mkdir()
    (root / "notebooks" / "demo.ipynb").write_text(json.dumps(NOTEBOOK, indent=1) + "\n")
    return root


def run_entry(root: Path, folder: str, args: list[str]) -> subprocess.CompletedProcess:
    cwd = root / folder
    if args == ["demo_cell.py"]:  # the notebook's code, run where the notebook is (a kernel's cwd)
        cell = json.loads((cwd / "demo.ipynb").read_text())["cells"][0]["source"]
        (cwd / "demo_cell.py").write_text("".join(cell))
    return subprocess.run([sys.executable, str(WITHOUT_PORTER), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False)


def porter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "porter", *args, "--no-progress"], capture_output=True,
                          text=True, timeout=300, check=False)


def ruff_f(root: Path) -> set[str]:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    out = subprocess.run([ruff, "check", "--no-cache", "--select", "F821,F401", "--output-format", "concise",
                          "--exclude", "porter_runtime,porter_runtime.py", str(root)],
                         capture_output=True, text=True, check=False).stdout
    return {line.split(":", 1)[0].replace(str(root), "") + line.rsplit(":", 1)[-1]
            for line in out.splitlines() if " F" in line}


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    base = tmp_path_factory.mktemp("layouts")
    original = make_tree(base / "original")
    port = shutil.copytree(original, base / "port")
    result = porter("migrate", str(port), "--root", str(port), "--write", "-q")
    assert result.returncode == 0, result.stderr
    return original, port


@pytest.mark.parametrize("folder,args,expected", ENTRY_POINTS, ids=["dash-m", "script", "notebook"])
def test_every_entry_point_fails_unported_and_runs_ported(ported, folder, args, expected):
    original, port = ported
    before = run_entry(original, folder, args)
    assert before.returncode != 0 and "CUDA" in before.stderr
    after = run_entry(port, folder, args)
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip().splitlines()[-1] == expected


def test_one_copy_and_no_new_ruff_errors(ported):
    original, port = ported
    copies = sorted(p.parent.relative_to(port).as_posix() for p in port.rglob("VENDORED.txt"))
    assert copies == ["porter_runtime"]
    assert ruff_f(port) <= ruff_f(original)


def test_the_script_whose_cuda_code_precedes_its_path_edit_gets_a_pointer(ported):
    _, port = ported
    text = (port / "scripts" / "run.py").read_text()
    assert text.index("import porter_runtime") < text.index("BUF = ") < text.index("sys.path.insert")
    assert (port / "scripts" / "porter_runtime.py").is_file()


def test_check_after_write_is_clean(ported):
    _, port = ported
    result = porter("migrate", str(port), "--root", str(port), "--check", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
