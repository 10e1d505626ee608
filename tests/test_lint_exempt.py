"""The repository's formatters and linters leave the vendored runtime alone (a formatted
copy reads as one edited by hand, which porter stops growing): porter adds the skip key
to the sections a repository already has, once, and nothing where it has none."""

from __future__ import annotations

from pathlib import Path

from porter.project.vendoring.lint_exempt import exempt_changes
from porter_test_utils import run_porter

# whisper's configuration: black and isort in pyproject.toml, flake8 in .flake8
PYPROJECT = '[project]\nname = "w"\n\n[tool.black]\n\n[tool.isort]\nprofile = "black"\nline_length = 88\n'
FLAKE8 = "[flake8]\nper-file-ignores =\n    */__init__.py: F401\n"
TRAIN = "import torch\n\nx = torch.zeros(2).cuda()\n"


def _repo(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_each_configured_tool_gets_its_skip_key_once(tmp_path):
    repo = _repo(tmp_path / "repo", {"pyproject.toml": PYPROJECT, ".flake8": FLAKE8, "train.py": TRAIN,
                                     "requirements.txt": "torch\n"})
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    pyproject = (repo / "pyproject.toml").read_text()
    assert '[tool.black]\nforce-exclude = "/porter_runtime(/|\\\\.py$)"\n' in pyproject
    assert '[tool.isort]\nextend_skip = ["porter_runtime", "porter_runtime.py"]\nprofile = "black"' in pyproject
    assert (repo / ".flake8").read_text().startswith("[flake8]\nextend-exclude = porter_runtime,porter_runtime.py\n")
    assert run_porter("migrate", repo, "--diff", "-q").stdout == b""  # the fixed point


def test_a_key_the_repository_sets_is_left_alone_and_a_bare_repository_untouched(tmp_path):
    repo = _repo(tmp_path / "repo", {"setup.cfg": "[flake8]\nextend-exclude = build\n",
                                     "tox.ini": "[tox]\nenvlist = py311\n"})
    [(change, note)] = exempt_changes(repo, write=True)
    assert change is None and "setup.cfg: [flake8] sets extend-exclude already" in note
    bare = _repo(tmp_path / "bare", {"pyproject.toml": '[project]\nname = "b"\n'})
    assert exempt_changes(bare, write=True) == []


def test_nothing_is_added_where_no_runtime_is_vendored(tmp_path):
    repo = _repo(tmp_path / "repo", {"pyproject.toml": PYPROJECT, "clean.py": "import torch\n\nx = torch.zeros(2)\n"})
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    assert (repo / "pyproject.toml").read_text() == PYPROJECT
