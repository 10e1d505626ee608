"""Settings in pyproject.toml / porter.toml and ``# porter: ignore``, through the real CLI."""

import json

import pytest

from porter_test_utils import run_porter
from test_cli import SAMPLE, make_tree


def rewrites(root, *args, tmp_path):
    report = tmp_path / "r.json"
    proc = run_porter("migrate", root, "--report", report, *args)
    assert proc.returncode in (0, 1), proc.stderr
    return {f["path"]: sorted(x["code"] for x in f["rewrites"]) for f in json.loads(report.read_text())["files"]}


def test_pyproject_select_ignore_exclude_and_per_file_ignores(tmp_path):
    root = make_tree(tmp_path / "repo", {**SAMPLE, "experiments/old.py": SAMPLE["train.py"], "pyproject.toml": """\
[project]
name = "demo"

[tool.porter]
ignore = ["PT004"]
exclude = ["experiments/*"]

[tool.porter.per-file-ignores]
"scripts/*" = ["PT003"]
"""})
    assert rewrites(root, tmp_path=tmp_path) == {"train.py": ["PT001"], "pkg/model.py": ["PT002"]}


def test_flags_win_over_settings(tmp_path):
    root = make_tree(tmp_path / "repo", {**SAMPLE, "pyproject.toml": '[tool.porter]\nselect = ["PT002"]\n'})
    assert rewrites(root, tmp_path=tmp_path) == {"pkg/model.py": ["PT002"]}
    assert rewrites(root, "--select", "PT001", tmp_path=tmp_path) == {"train.py": ["PT001"]}


def test_porter_toml_wins_and_sets_the_runtime_folder(tmp_path):
    root = make_tree(tmp_path / "repo", {
        **SAMPLE,
        "pyproject.toml": '[tool.porter]\nselect = ["PT002"]\n',
        "porter.toml": 'select = ["PT001"]\nruntime-dir = "vendor/porter_runtime"\n',
        "vendor/__init__.py": "",  # a package: the ported code imports the copy through it
    })
    proc = run_porter("migrate", root, "--write")
    assert proc.returncode == 0, proc.stderr
    assert (root / "vendor" / "porter_runtime" / "__init__.py").exists()
    assert not (root / "porter_runtime").exists()
    assert "from vendor import porter_runtime\n" in (root / "train.py").read_text()
    assert (root / "pkg" / "model.py").read_text() == SAMPLE["pkg/model.py"]


def test_dependencies_setting_reaches_the_options(tmp_path):
    from porter.cli.command_inputs import make_run_config
    from porter.engine.config import load_config

    root = make_tree(tmp_path / "repo", {"pyproject.toml": '[tool.porter]\ndependencies = "extra"\n'})
    config = make_run_config([root], root, load_config(root), (), (), (), None, None, 1)
    assert config.options.dependencies == "extra"
    assert make_run_config([root], root, load_config(tmp_path), (), (), (), None, None, 1).options.dependencies == "marker"


@pytest.mark.parametrize("settings,message", [
    ('[tool.porter]\nfoo = 1\n', "pyproject.toml: [tool.porter] unknown key 'foo'"),
    ('[tool.porter]\nselect = "PT001"\n', "pyproject.toml: [tool.porter] select: expected a list of rule codes"),
    ('[tool.porter]\nignore = ["PX9"]\n', "pyproject.toml: [tool.porter] ignore: no rule code starts with 'PX9'"),
    ('[tool.porter]\ndependencies = "wheel"\n', "pyproject.toml: [tool.porter] dependencies: expected \"marker\" or \"extra\""),
    ('[tool.porter]\nunsafe-fixes = "yes"\n', "pyproject.toml: [tool.porter] unsafe-fixes: expected true or false"),
    ('[tool.porter.per-file-ignores]\n"tests/*" = "PT001"\n', "per-file-ignores.'tests/*': expected a list"),
    ('[tool.porter\n', "pyproject.toml: not valid TOML"),
])
def test_bad_settings_are_a_clear_error(tmp_path, settings, message):
    root = make_tree(tmp_path / "repo", {**SAMPLE, "pyproject.toml": settings})
    before = (root / "train.py").read_bytes()
    proc = run_porter("migrate", root, "--write")
    assert proc.returncode == 2
    assert message in proc.stderr.decode()
    assert (root / "train.py").read_bytes() == before


def test_porter_toml_error_names_its_file(tmp_path):
    root = make_tree(tmp_path / "repo", {**SAMPLE, "porter.toml": 'runtime_dir = "x"\n'})
    proc = run_porter("migrate", root)
    assert proc.returncode == 2 and "porter.toml: unknown key 'runtime_dir'" in proc.stderr.decode()


def test_ignore_comments_through_the_cli(tmp_path):
    root = make_tree(tmp_path / "repo", {
        "a.py": "import torch\n"
                "x = torch.ones(1).cuda()  # porter: ignore\n"
                "y = torch.ones(1).cuda()  # porter: ignore[PT001]\n"
                "z = torch.ones(1).cuda()  # porter: ignore[PT002]\n",
    })
    assert run_porter("migrate", root, "--write").returncode == 0
    lines = (root / "a.py").read_text().splitlines()
    assert lines[:3] == ["import torch", "", "import porter_runtime"]
    assert lines[3] == "x = torch.ones(1).cuda()  # porter: ignore"
    assert lines[4] == "y = torch.ones(1).cuda()  # porter: ignore[PT001]"
    assert lines[5] == "z = torch.ones(1).to(porter_runtime.device())  # porter: ignore[PT002]"
