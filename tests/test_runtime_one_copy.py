"""One vendored copy per repository where Python allows it (porter.project.vendoring.runtime_home):
packages that import one another share the copy of the one they all import, and a
namespace package that the build can't ship uses the root copy through a pointer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from porter.project.vendoring.runtime_copy import is_pointer, is_vendored
from porter_test_utils import run_porter

SAMPLER = "import torch\n\n\ndef noise(n):\n    return torch.randn(n).cuda()\n"
#: latent-diffusion's shape: setup.py's find_packages() skips ldm/ (no __init__.py at its top)
LATENT_DIFFUSION = {
    "setup.py": "from setuptools import setup, find_packages\n\nsetup(name='ld', packages=find_packages())\n",
    "ldm/models/diffusion/__init__.py": "",
    "ldm/models/diffusion/ddim.py": SAMPLER,
    "main.py": "import torch\n\nfrom ldm.models.diffusion.ddim import noise\n\n"
               "print(noise(3).shape, torch.zeros(1).cuda().device.type)\n",
}


def _tree(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _copies(repo: Path) -> list[str]:
    return sorted(p.relative_to(repo).as_posix() for p in repo.rglob("porter_runtime") if is_vendored(p))


def _runs(repo: Path, *argv: str, path: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=repo, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": path})


def test_packages_that_build_on_one_another_share_one_copy(tmp_path):
    """yolov5's layout: a pyproject.toml that builds, ``models/`` imports ``utils/``, and
    root scripts import both. ``train.py`` once took ``models``' copy (its first import)
    and ``utils`` had its own: two copies. ``utils`` is what they all import."""
    repo = _tree(tmp_path / "repo", {
        "pyproject.toml": "[build-system]\nrequires = ['setuptools']\n\n[project]\nname = 'y'\nversion = '0'\n",
        "utils/__init__.py": "",
        "utils/torch_utils.py": "import torch\n\n\ndef select():\n    return torch.device('cuda')\n",
        "models/__init__.py": "",
        "models/common.py": "import torch\n\nfrom utils.torch_utils import select\n\n\n"
                            "def zeros():\n    return torch.zeros(2).cuda()\n",
        "train.py": "import torch\n\nfrom models.common import zeros\nfrom utils.torch_utils import select\n\n"
                    "torch.cuda.synchronize()\nprint(zeros().device == select())\n",
    })
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert _copies(repo) == ["utils/porter_runtime"]
    assert "from utils import porter_runtime\n" in (repo / "models/common.py").read_text()
    proc = _runs(repo, "train.py")
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr
    assert run_porter("migrate", repo, "--diff", "-q").stdout == b""


def test_a_package_that_imports_another_uses_its_copy(tmp_path):
    """consistency-models: ``evaluations/th_evaluator.py`` imports ``cm``, so it runs only
    where ``cm`` imports, and ``cm``'s copy serves it."""
    repo = _tree(tmp_path / "repo", {
        "setup.py": "from setuptools import setup\n\nsetup(name='cm', py_modules=['cm', 'evaluations'])\n",
        "cm/__init__.py": "",
        "cm/dist_util.py": "import torch\n\n\ndef dev():\n    return torch.device('cuda')\n",
        "evaluations/__init__.py": "",
        "evaluations/th_evaluator.py": "import torch\n\nfrom cm import dist_util\n\n\n"
                                       "def ones():\n    return torch.ones(2).cuda().to(dist_util.dev())\n",
        "evaluations/alone.py": SAMPLER,  # imports nothing of the repository: its own copy
    })
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert "from cm import dist_util, porter_runtime\n" in (repo / "evaluations/th_evaluator.py").read_text()
    assert _copies(repo) == ["cm/porter_runtime", "evaluations/porter_runtime"]
    proc = _runs(repo, "-c", "from evaluations.th_evaluator import ones; print(ones().tolist())")
    assert proc.returncode == 0 and "[1.0, 1.0]" in proc.stdout, proc.stderr


def test_a_namespace_package_the_build_skips_uses_the_root_copy(tmp_path):
    """latent-diffusion: setup.py's ``find_packages()`` skips ``ldm/`` (no ``__init__.py``),
    so ``ldm.models.diffusion`` runs from the tree with the root on sys.path. It once got a
    copy of its own, next to the root copy main.py uses; now a pointer to the root copy."""
    repo = _tree(tmp_path / "repo", LATENT_DIFFUSION)
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert _copies(repo) == ["porter_runtime"]
    assert is_pointer(repo / "ldm/models/diffusion/porter_runtime.py")
    assert "from ldm.models.diffusion import porter_runtime\n" in (repo / "ldm/models/diffusion/ddim.py").read_text()
    proc = _runs(repo, "main.py")
    assert proc.returncode == 0 and "torch.Size([3])" in proc.stdout, proc.stderr
    assert run_porter("migrate", repo, "--diff", "-q").stdout == b""


def test_a_namespace_package_a_build_may_ship_keeps_its_copy(tmp_path):
    repo = _tree(tmp_path / "repo", {
        "setup.py": "from setuptools import setup, find_namespace_packages\n\n"
                    "setup(name='ld', packages=find_namespace_packages(include=['ldm.*']))\n",
        "ldm/models/diffusion/__init__.py": "",
        "ldm/models/diffusion/ddim.py": SAMPLER,
        "main.py": "from ldm.models.diffusion.ddim import noise\n\nprint(noise(3).shape)\n",
    })
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert _copies(repo) == ["ldm/models/diffusion/porter_runtime"]


def test_a_pointer_and_the_root_copy_are_one_module_in_one_process(tmp_path):
    """stable-diffusion: a script imports porter_runtime (the root copy), then a sampler
    of a namespace package imports it through its folder's pointer. The pointer once
    loaded the copy a second time under its own name: two runtimes in one process (the
    MPS emulation's loader hook registered twice). Now it is the same module, in either order."""
    repo = _tree(tmp_path / "repo", LATENT_DIFFUSION)
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert is_pointer(repo / "ldm/models/diffusion/porter_runtime.py")
    for first, second in (("porter_runtime", "ldm.models.diffusion.porter_runtime"),
                          ("ldm.models.diffusion.porter_runtime", "porter_runtime")):
        code = (f"import importlib, sys\na = importlib.import_module({first!r})\nb = importlib.import_module({second!r})\n"
                "print(a is b, len({id(m) for name, m in list(sys.modules.items())"
                " if name.split('.')[-1] == 'porter_runtime'}))\n")
        proc = _runs(repo, "-c", code, path=str(repo))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["True", "1"], (first, proc.stdout)
