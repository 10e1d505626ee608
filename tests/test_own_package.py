"""The repository's own package is never a CUDA-only package to itself: in a tree that
holds ``mamba_ssm/`` (kernels and all), ``from mamba_ssm.models.config import X`` is the
code being ported, and so is the ``from mamba_ssm import porter_runtime`` a port adds;
``--check`` right after ``--write`` reports no more than before. Through the real CLI."""

import json

from porter_test_utils import run_porter
from test_cli import make_tree

TREE = {
    "pyproject.toml": "[project]\nname = 'mamba-ssm'\n",
    "mamba_ssm/__init__.py": "",
    "mamba_ssm/models/__init__.py": "",
    "mamba_ssm/models/config.py": "from dataclasses import dataclass\n\n\n@dataclass\nclass Config:\n    d_model: int = 8\n",
    "mamba_ssm/modules/__init__.py": "",
    "mamba_ssm/modules/block.py": (
        "import torch\n"
        "from mamba_ssm.models.config import Config\n\n\n"
        "def make(device='cuda'):\n"
        "    return torch.zeros(Config().d_model, device=device)\n"),
    "benchmarks/bench.py": (
        "import torch\n"
        "from mamba_ssm.modules.block import make\n\n"
        "x = make().cuda()\n"),
}


def _findings(root, *extra):
    proc = run_porter("migrate", root, "--output-format", "json", *extra)
    data = json.loads(proc.stdout)
    return [(f["path"], x["code"], x["line"]) for f in data["files"] for x in f["findings"]]


def test_the_trees_own_package_is_not_reported(tmp_path):
    root = make_tree(tmp_path / "repo", TREE)
    assert not [f for f in _findings(root) if f[1] == "TP603"]


def test_the_same_imports_without_the_package_are_reported(tmp_path):
    tree = {k: v for k, v in TREE.items() if not k.startswith("mamba_ssm/")}
    root = make_tree(tmp_path / "repo", tree)
    assert ("benchmarks/bench.py", "TP603", 2) in _findings(root)


def test_check_after_write_reports_no_more_than_before(tmp_path):
    root = make_tree(tmp_path / "repo", TREE)
    before = _findings(root)
    proc = run_porter("migrate", root, "--write", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    written = [p.relative_to(root).as_posix() for p in root.rglob("*.py") if "porter_runtime" in p.read_text()
               and "porter_runtime/" not in p.relative_to(root).as_posix()]
    assert written  # the port imports the runtime from the package
    after = _findings(root)
    assert len(after) <= len(before)
    assert not [f for f in after if f[1] == "TP603"]


#: Vim's layout (blind round 12): mamba_ssm vendored as a project of its own, with its
#: setup.py, in a folder that is no Python name; the models put it on sys.path.
NESTED = {
    "mamba-1p1p1/setup.py": "from setuptools import find_packages, setup\n\n"
                            "setup(name='mamba_ssm', packages=find_packages())\n",
    **{f"mamba-1p1p1/{rel}": text for rel, text in TREE.items() if rel.startswith("mamba_ssm/")},
    "vim/models_mamba.py": (
        "import sys\n\nsys.path.insert(0, '../mamba-1p1p1')\n\n"
        "from mamba_ssm.modules.block import make  # noqa: E402\n\n"
        "print(make().shape)\n"),
}


def test_a_package_vendored_as_a_nested_project_is_the_trees_own(tmp_path):
    """Vim's ``mamba-1p1p1/mamba_ssm``: TP603 named the tree's own vendored package
    CUDA-only, and on the second pass the ``from mamba_ssm import porter_runtime`` the
    first added too, so ``--check`` after ``--write`` was not clean. The ported model
    runs on the CPU."""
    import os
    import subprocess

    from porter_test_utils import python_without_porter

    root = make_tree(tmp_path / "repo", NESTED)
    assert not [f for f in _findings(root) if f[1] == "TP603"]
    proc = run_porter("migrate", root, "--write", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "from mamba_ssm import porter_runtime" in (root / "mamba-1p1p1/mamba_ssm/modules/block.py").read_text()
    assert not [f for f in _findings(root) if f[1] == "TP603"]
    ran = subprocess.run(python_without_porter("models_mamba.py"), cwd=root / "vim", capture_output=True, text=True,
                         timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": ""})
    assert ran.returncode == 0 and "torch.Size([8])" in ran.stdout, ran.stderr
