"""Odd input gets a clear one-line error for the file or the setting it is in, never an
"internal error": notebooks of the wrong shape, JSON and TOML nested past Python's
recursion limit, names at the file system's limit, paths longer than it allows."""

import json
import sys

import pytest

from porter_test_utils import run_porter

CUDA = "import torch\nx = torch.ones(1).cuda()\n"


def _porter(*args, cwd=None):
    proc = run_porter(*args, cwd=cwd)
    proc.stderr = proc.stderr.decode("utf-8", "replace")
    return proc


def _root(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (root / "ok.py").write_text(CUDA)
    return root


@pytest.mark.parametrize("notebook, error", [
    ({"cells": [{"cell_type": "code", "source": 5}], "nbformat": 4},
     "cell 1's source is neither a string nor a list of strings"),
    ({"cells": [{"cell_type": "code", "source": ["import torch\n", 3]}], "nbformat": 4},
     "cell 1's source is neither a string nor a list of strings"),
    ({"cells": [None, {"cell_type": "code", "source": CUDA}], "nbformat": 4},
     "cell 1 is a JSON null, not an object"),
    ({"cells": ["x"], "nbformat": 4}, "cell 1 is a JSON string, not an object"),
])
def test_a_notebook_of_the_wrong_shape_is_that_files_error(tmp_path, notebook, error):
    root = _root(tmp_path)
    (root / "nb.ipynb").write_text(json.dumps(notebook))
    proc = _porter("migrate", root, "--check", "--no-progress", "-j", "1")
    assert proc.returncode == 2
    assert f"nb.ipynb: error: not a notebook: {error}" in proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert "ok.py" in proc.stderr  # the other files are ported all the same


def test_a_notebook_nested_past_the_recursion_limit(tmp_path):
    root = _root(tmp_path)
    (root / "deep.ipynb").write_text('{"cells": ' + "[" * 5000 + "]" * 5000 + "}")
    proc = _porter("migrate", root, "--check", "--no-progress", "-j", "1")
    assert proc.returncode == 2
    assert "deep.ipynb: error: not a valid notebook (JSON): nested too deep to read" in proc.stderr
    assert "internal error" not in proc.stderr


def test_a_pyproject_nested_past_the_recursion_limit_is_a_settings_error(tmp_path):
    root = _root(tmp_path)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n[tool.other]\na = " + "[" * 5000 + "]" * 5000 + "\n")
    proc = _porter("migrate", root, "--check", "--no-progress")
    assert proc.returncode == 2
    assert "porter: error: pyproject.toml: arrays or tables nested too deep to read" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_file_whose_name_is_near_the_limit_is_written(tmp_path):
    """The temporary file beside it is named within NAME_MAX too (it was 21 bytes longer)."""
    root = _root(tmp_path)
    name = "m" * 250 + ".py"
    (root / name).write_text(CUDA)
    proc = _porter("migrate", root, "--write", "--no-progress", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "porter_runtime.device()" in (root / name).read_text()
    assert not [p for p in root.iterdir() if "porter-tmp" in p.name]


@pytest.mark.parametrize("command", ["migrate", "verify"])
def test_a_path_part_over_the_limit_is_a_one_line_error(tmp_path, command):
    proc = _porter(command, "x" * 300, cwd=tmp_path)
    assert proc.returncode == 2
    [line] = [x for x in proc.stderr.splitlines() if x.strip()]
    assert line.startswith("porter: error: xxx") and line.endswith("File name too long")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="this Python reads 3.12 syntax: the file is ported")
@pytest.mark.parametrize("line, feature", [
    ('print(f"{songs["a"]} on {"cuda"}")\n', "PEP 701"),
    ("type Vec = list[float]\n", "PEP 695"),
    ("def first[T](xs: list[T]) -> T:\n    return xs[0]\n", "PEP 695"),
])
def test_newer_syntax_says_which_python_it_needs(tmp_path, line, feature):
    """Python 3.12 syntax that LibCST reads but this Python does not: the error names the
    Python the file needs and the feature, not a bare "syntax error"."""
    root = _root(tmp_path)
    (root / "new.py").write_text("import torch\nsongs = {'a': 1}\n" + line + "x = torch.ones(1).cuda()\n")
    proc = _porter("migrate", root, "--check", "--no-progress", "-j", "1")
    assert proc.returncode == 2
    [error] = [x for x in proc.stderr.splitlines() if x.startswith("new.py: error:")]
    assert "needs Python 3.12 or newer" in error and feature in error
