"""``porter migrate`` as a linter people already use (ruff, black): a line per file that
would change and per finding, ``-q``, exit codes, output formats, excludes, settings
files per folder, several paths, notebooks in a diff. Real trees, the real CLI."""

import json
import os
import pty
import subprocess
import sys

from click.testing import CliRunner

from porter.cli.app import cli
from porter_test_utils import run_porter, snapshot
from test_cli import make_tree

LOADER = ("import torch\nfrom torch.utils.data import DataLoader\n"
          "loader = DataLoader([1, 2], num_workers=2, collate_fn=lambda b: b)\n")
CUDA = "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n"


def porter(*args):
    """The CLI in this process (one job): exit code, stdout, stderr."""
    result = CliRunner().invoke(cli, [*map(str, args), "-j", "1"] if args[0] == "migrate" else list(map(str, args)))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def small(tmp_path, name="repo", **extra):
    return make_tree(tmp_path / name, {"requirements.txt": "torch\n", "train.py": CUDA, "loader.py": LOADER,
                                       "clean.py": "x = 1\n", **extra})


def test_check_prints_a_line_per_file_and_per_finding(tmp_path):
    root = small(tmp_path)
    code, out, err = porter("migrate", root, "--check")
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == "Would port train.py"
    assert lines[1].startswith("loader.py:3:44 PT404 `collate_fn` can't be pickled")
    assert "files scanned" in err  # the summary follows


def test_quiet_keeps_the_lines_and_drops_the_summary(tmp_path):
    root = small(tmp_path)
    code, out, err = porter("migrate", root, "--check", "-q")
    assert code == 1 and out == ""
    assert err.splitlines()[0] == "Would port train.py" and len(err.splitlines()) == 2
    assert "files scanned" not in err and "ledger" not in err


def test_exit_codes_are_a_contract(tmp_path):
    clean = make_tree(tmp_path / "clean", {"requirements.txt": "", "a.py": "x = 1\n"})
    assert porter("migrate", clean, "--check", "-q")[:3] == (0, "", "")
    root = small(tmp_path)
    assert porter("migrate", root, "--check", "--exit-zero")[0] == 0
    assert porter("migrate", root, "--check", "--fail-on", "changes")[0] == 1
    make_tree(root, {"broken.py": "import torch\nx = torch.ones(1).cuda(\n"})
    code, _, err = porter("migrate", root, "--check", "--exit-zero", "-q")
    assert code == 2 and "broken.py: error: syntax error at line 2" in err


def test_write_says_ported_per_file(tmp_path):
    root = small(tmp_path)
    code, _, err = porter("migrate", root, "--write", "-q")
    assert code == 0 and err.splitlines() == ["Ported train.py", err.splitlines()[1]]
    assert porter("migrate", root, "--check", "--fail-on", "changes", "-q")[:3] == (0, "", err.splitlines()[1] + "\n")


def test_output_format_full_shows_code_and_suggestion(tmp_path):
    root = small(tmp_path)
    _, _, err = porter("migrate", root, "--output-format", "full", "-q")
    assert "train.py:2:9 PT001 [*] `.cuda()`" in err
    assert "    - torch.nn.Linear(2, 2).cuda()\n    + torch.nn.Linear(2, 2).to(porter_runtime.device())" in err
    assert "    | collate_fn=lambda b: b\n    = suggestion: def collate(batch)" in err


def test_output_format_github_annotations_on_stdout(tmp_path):
    root = small(tmp_path, **{"a,b.py": CUDA})
    code, out, err = porter("migrate", root, "--check", "--output-format", "github")
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert "::warning file=loader.py,line=3,col=44,title=PT404::`collate_fn` can't be pickled" in out
    # separators in a property value are escaped as the runner reads them
    assert any(line.startswith("::warning file=a%2Cb.py,line=2,col=9,title=PT001::") for line in lines)
    assert all(line.startswith("::") for line in lines)


def test_output_format_json_and_sarif_own_stdout(tmp_path):
    root = small(tmp_path)
    code, out, err = porter("migrate", root, "--output-format", "json")
    assert code == 0 and json.loads(out)["summary"]["files_changed"] == 1 and err == ""
    assert json.loads(porter("migrate", root, "--format", "json")[1])["files"] == json.loads(out)["files"]
    code, out, _ = porter("migrate", root, "--output-format", "sarif")
    assert json.loads(out)["version"] == "2.1.0"
    code, _, err = porter("migrate", root, "--output-format", "sarif", "--diff")
    assert code == 2 and "--diff" in err


def test_force_exclude_applies_exclude_to_files_named(tmp_path):
    root = small(tmp_path, **{"gen/model.py": CUDA})
    (root / "porter.toml").write_text('exclude = ["gen/*"]\n')
    named = root / "gen" / "model.py"
    assert porter("migrate", named, "--check", "-q")[0] == 1  # a file named is taken as given
    assert porter("migrate", named, "--check", "-q", "--force-exclude")[:3] == (0, "", "")
    (root / "porter.toml").write_text('exclude = ["gen/*"]\nforce-exclude = true\n')
    assert porter("migrate", named, root / "train.py", "--check", "-q")[:3] == (1, "", "Would port train.py\n")
    assert porter("migrate", named, "--check", "-q", "--no-force-exclude")[0] == 1


def test_extend_select_and_extend_exclude(tmp_path):
    root = small(tmp_path, **{"old/x.py": CUDA, "older/y.py": CUDA})
    (root / "pyproject.toml").write_text('[tool.porter]\nselect = ["PT4"]\nextend-select = ["PT001"]\n'
                                         'exclude = ["old"]\nextend-exclude = ["loader.py"]\n')
    code, _, err = porter("migrate", root, "--check", "-q")
    assert err.splitlines() == ["Would port older/y.py", "Would port train.py"]
    _, _, err = porter("migrate", root, "--check", "-q", "--extend-exclude", "older")
    assert err.splitlines() == ["Would port train.py"]
    # --select starts over (the settings' extend-select is dropped); --exclude replaces
    # the settings' exclude, their extend-exclude (loader.py) still applies
    assert porter("migrate", root, "--check", "-q", "--select", "PT4", "--exclude", "old,older")[:3] == (0, "", "")
    assert porter("migrate", root, "--extend-select", "XYZ")[0] == 2


def test_settings_per_folder_as_ruff(tmp_path):
    root = make_tree(tmp_path / "repo", {"requirements.txt": "", "top.py": CUDA, "sub/inner.py": CUDA,
                                         "sub/legacy.py": CUDA, "sub/deep/x.py": CUDA,
                                         "sub/porter.toml": 'ignore = ["PT001"]\nexclude = ["legacy.py"]\n'})
    _, _, err = porter("migrate", root, "--check", "-q")
    # sub/ runs its own rules (PT001 off: the ledger's catch-all names the .cuda()) and excludes
    assert "Would port top.py" in err and "Would port sub/" not in err and "sub/legacy.py" not in err
    assert "sub/inner.py:2:9 PT999" in err and "sub/deep/x.py:2:9 PT999" in err
    # a file named alone reads the settings nearest to it, as a run over its folder does
    _, _, err = porter("migrate", root / "sub" / "inner.py", "--check", "-q")
    assert "Would port" not in err and "inner.py:2:9 PT999" in err
    _, _, err = porter("migrate", root / "sub", "--check", "-q")  # its exclude counts from its folder
    assert "sub/inner.py:2:9 PT999" in err and "legacy" not in err and "Would port" not in err


def test_paths_from_two_projects_are_refused_clearly(tmp_path):
    a = small(tmp_path, "a")
    b = small(tmp_path, "b")
    code, out, err = porter("migrate", a, b, "--diff")
    assert code == 2 and out == ""
    assert "2 projects" in err and "run porter once per project, or pass --root" in err
    code, out, _ = porter("migrate", a, b, "--diff", "--root", tmp_path)
    assert code == 0 and "+++ b/a/train.py" in out and "+++ b/b/train.py" in out


def test_a_project_nested_in_another_runs_with_the_outer_one(tmp_path):
    outer = small(tmp_path, "outer", **{"examples/demo/requirements.txt": "", "examples/demo/run.py": CUDA})
    code, out, _ = porter("migrate", outer / "train.py", outer / "examples" / "demo" / "run.py", "--diff")
    assert code == 0 and "+++ b/train.py" in out and "+++ b/examples/demo/run.py" in out


def notebook(source: str) -> str:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def test_a_notebook_in_the_tree_keeps_the_diff_appliable(tmp_path):
    files = {"requirements.txt": "", "train.py": CUDA, "nb.ipynb": notebook(CUDA), "z.py": CUDA}
    left, right = make_tree(tmp_path / "left", files), make_tree(tmp_path / "right", files)
    subprocess.run(["git", "init", "-q"], cwd=right, check=True)
    diff = run_porter("migrate", left, "--diff")
    assert diff.returncode == 0, diff.stderr
    head, notebooks = diff.stdout.split(b"# porter: notebooks (.ipynb) below")
    assert b"+++ b/train.py" in head and b"+++ b/z.py" in head and b"nb.ipynb" not in head
    assert b"+++ b/nb.ipynb" in notebooks
    assert b"--- a/nb.ipynb (cell 1)" in diff.stderr  # the cells one by one, for reading
    applied = subprocess.run(["git", "apply", "-"], cwd=right, input=diff.stdout, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    assert run_porter("migrate", left, "--write").returncode == 0
    assert snapshot(left) == {k: v for k, v in snapshot(right).items()}


def test_rules_filter_by_code_prefix():
    code, out, _ = porter("rules", "PT1", "--json")
    codes = [r["code"] for r in json.loads(out)]
    assert code == 0 and codes and all(c.startswith("PT1") for c in codes)
    assert {r["code"] for r in json.loads(porter("rules", "pt001,PT002", "--json")[1])} == {"PT001", "PT002"}
    code, _, err = porter("rules", "XYZ")
    assert code == 2 and "XYZ" in err


def test_explain_renders_markdown_on_a_terminal_and_stays_raw_when_piped():
    piped = run_porter("explain", "PT002").stdout.decode()
    assert "## Why" in piped and "`" in piped
    primary, secondary = pty.openpty()
    proc = subprocess.run([sys.executable, "-m", "porter", "explain", "PT002"], stdout=secondary,
                          stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "100"})
    os.close(secondary)
    shown = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(primary)
    text = shown.decode()
    assert proc.returncode == 0, proc.stderr
    assert "PT002 torch-device-cuda" in text and "Why" in text and "porter_runtime.device(1)" in text
    assert "## " not in text and "`" not in text
