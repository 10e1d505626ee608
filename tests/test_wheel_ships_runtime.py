"""Issue 43: a project whose pyproject.toml names what setuptools ships by hand, in any
TOML spelling, gets the vendored runtime into its wheel. Built for real (setuptools'
PEP 517 backend, no network), then the wheel's file list is read."""

import subprocess
import sys
import zipfile

import pytest

from porter_test_utils import run_porter

PROJECT = '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n' \
          '[project]\nname = "demo"\nversion = "1.0"\n\n'
LAYOUTS = {
    "py_modules": ("[tool.setuptools]\npy-modules = [\"train\"]\n", {"train.py": "import torch\nx = torch.ones(1).cuda()\n"}),
    "quoted_key": ('[tool.setuptools]\n"packages" = ["mypkg"]\n', None),
    "inline_table": ('[tool]\nsetuptools = {packages = ["mypkg"]}\n', None),
    "dotted_key": ('[tool]\nsetuptools.packages = [\n    "mypkg",\n]\n', None),
}
PACKAGE = {"mypkg/__init__.py": "", "mypkg/model.py": "import torch\nx = torch.ones(1).cuda()\n"}


def wheel_names(root, out):
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(out), str(root)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    (wheel,) = out.glob("*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_wheel_ships_the_vendored_runtime(tmp_path, layout):
    table, files = LAYOUTS[layout]
    root = tmp_path / "repo"
    root.mkdir()
    (root / "pyproject.toml").write_text(PROJECT + table)
    for rel, text in (files or PACKAGE).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    result = run_porter("migrate", root, "--write", "--no-progress")
    assert result.returncode == 0, result.stderr.decode()
    home = "porter_runtime" if files else "mypkg/porter_runtime"
    assert (root / home / "__init__.py").is_file()
    names = wheel_names(root, tmp_path / "dist")
    assert f"{home}/__init__.py" in names, sorted(names)
    assert all(f"{home}/{p.relative_to(root / home).as_posix()}" in names
               for p in (root / home).rglob("*.py")), "a vendored module is missing from the wheel"
    again = run_porter("migrate", root, "--diff", "--no-progress")
    assert again.stdout == b""
