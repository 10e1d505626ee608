"""Issue 43: the runtime import a port adds binds the name the rewrites call, and no
star import can rebind it. Run through the real CLI, the ported module then runs."""

import subprocess
import sys

from porter_test_utils import run_porter


def port_and_run(root, entry="train.py"):
    result = run_porter("migrate", root, "--write", "--no-progress")
    assert result.returncode == 0, result.stderr.decode()
    ran = subprocess.run([sys.executable, entry], cwd=root, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    return (root / entry).read_text()


def test_a_file_with_an_aliased_runtime_import_gets_the_name_it_calls(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch\nimport porter_runtime as pr\nx = torch.ones(1).cuda()\nprint(pr.device())\n")
    new = port_and_run(tmp_path)
    assert "porter_runtime.device()" in new and "\nimport porter_runtime\n" in new


def test_the_runtime_import_comes_after_a_star_import_that_could_rebind_it(tmp_path):
    (tmp_path / "helpers.py").write_text("porter_runtime = None  # the user's own name\n")
    (tmp_path / "train.py").write_text("import torch\nfrom helpers import *\nx = torch.ones(1).cuda()\n")
    new = port_and_run(tmp_path)
    assert new.index("from helpers import *") < new.index("import porter_runtime")
