"""A notebook's runtime import comes after the shell and magic lines that precede its
first use: a Colab cell that clones the repository (`!git clone`, `%cd repo`) must reach
it, and its vendored runtime, before importing it (it was placed after `import os`, above
the clone, and the notebook failed on Colab, on CUDA). Through the real CLI; a second
run changes nothing."""

import json
import subprocess

from porter_test_utils import run_porter

CELL = ["import os\n", "!git clone https://github.com/x/repo\n", "%cd repo\n", "import torch\n",
        "x = torch.ones(1).cuda()"]


def _notebook(path, source):
    path.write_text(json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                                           "execution_count": None, "source": source}],
                                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))


def test_the_runtime_import_follows_the_clone_and_the_cd(tmp_path):
    """The notebook clones the checkout's own repository: once the port is merged there,
    the clone holds the runtime."""
    (tmp_path / "pyproject.toml").write_text("")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "remote", "add", "origin", "git@github.com:x/repo.git"], cwd=tmp_path, check=True)
    nb = tmp_path / "demo.ipynb"
    _notebook(nb, CELL)
    proc = run_porter("migrate", tmp_path, "--write", "-q", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    lines = "".join(json.loads(nb.read_text())["cells"][0]["source"]).splitlines()
    assert lines == ["import os", "!git clone https://github.com/x/repo", "%cd repo", "import porter_runtime",
                     "import torch", "x = torch.ones(1).to(porter_runtime.device())"]
    before = nb.read_bytes()
    assert run_porter("migrate", tmp_path, "--write", "-q", "--no-progress").returncode == 0
    assert nb.read_bytes() == before


def test_a_shell_line_after_the_first_use_stays_after_the_import(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    nb = tmp_path / "demo.ipynb"
    _notebook(nb, ["import os\n", "x = os.getpid()\n", "import torch\n", "y = torch.ones(1).cuda()\n", "!nvidia-smi\n"])
    assert run_porter("migrate", tmp_path, "--write", "-q", "--no-progress").returncode == 0
    text = "".join(json.loads(nb.read_text())["cells"][0]["source"])
    assert text.index("import porter_runtime") < text.index("porter_runtime.device()") < text.index("!nvidia-smi")


def test_a_notebook_that_clones_another_repository_and_runs_there_is_reported_not_ported(tmp_path):
    """SiT's Colab notebook: `!git clone https://github.com/willisma/SiT.git`, `os.chdir('SiT')`,
    then its imports. In a checkout whose origin is not that URL (a user's copy, a fork), the
    clone stays the original: a ported notebook would import a runtime the clone lacks and
    fail there, on CUDA too (blind round 6, wrong). It is left as it is, its rewrites reported."""
    (tmp_path / "pyproject.toml").write_text("")
    nb = tmp_path / "demo.ipynb"
    _notebook(nb, ["import os\n", "!git clone https://github.com/willisma/SiT.git\n", "os.chdir('SiT')\n",
                   "import torch\n", "x = torch.ones(1).cuda()"])
    before = nb.read_bytes()
    report = tmp_path / "r.json"
    proc = run_porter("migrate", tmp_path, "--write", "-q", "--no-progress", "--report", report)
    assert proc.returncode == 0 and nb.read_bytes() == before
    [found] = [f for entry in json.loads(report.read_text())["files"] for f in entry["findings"]]
    assert found["code"] == "PT001" and "clones https://github.com/willisma/SiT.git" in found["message"]
    assert not (tmp_path / "porter_runtime").exists()
