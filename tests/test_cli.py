"""The real CLI on real files: modes, exit codes, reports, selection, bad input."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from porter_test_utils import python_without_porter, run_porter, snapshot

SAMPLE = {
    "train.py": "import torch\nmodel = torch.nn.Linear(2, 2).cuda()\nx = torch.zeros(2, device='cuda')\n",
    "pkg/__init__.py": "",
    "pkg/model.py": "from torch import device\nDEV = device('cuda')\n",
    "scripts/run.py": '"""Run it."""\nimport torch as t\nprint(t.ones(1).to("cuda"))\n',
    "clean.py": "import torch\nprint(torch.ones(1))\n",
}


def make_tree(root: Path, files: dict) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return root


@pytest.fixture
def tree(tmp_path):
    return make_tree(tmp_path / "repo", SAMPLE)


def test_dry_run_changes_nothing_and_summarises(tree):
    before = snapshot(tree)
    proc = run_porter("migrate", tree)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b""
    assert snapshot(tree) == before
    err = proc.stderr.decode()
    assert "files scanned" in err and "PT001" in err


def test_diff_applied_with_git_equals_write(tree, tmp_path):
    other = tmp_path / "other"
    make_tree(other, SAMPLE)
    subprocess.run(["git", "init", "-q"], cwd=other, check=True)
    diff = run_porter("migrate", tree, "--diff")
    assert diff.returncode == 0, diff.stderr
    assert b"\x1b[" not in diff.stdout  # no colour when not a terminal
    applied = subprocess.run(["git", "apply", "-"], cwd=other, input=diff.stdout, capture_output=True)
    assert applied.returncode == 0, applied.stderr
    write = run_porter("migrate", tree, "--write")
    assert write.returncode == 0, write.stderr
    assert snapshot(tree) == snapshot(other)
    assert (tree / "porter_runtime" / "__init__.py").exists()


def test_check_then_write_then_idempotent(tree):
    assert run_porter("migrate", tree, "--check").returncode == 1
    assert run_porter("migrate", tree, "--write").returncode == 0
    after = snapshot(tree)
    again = run_porter("migrate", tree, "--write")
    assert again.returncode == 0
    assert snapshot(tree) == after
    assert run_porter("migrate", tree, "--check").returncode == 0


def test_untouched_files_keep_bytes_and_mode(tree):
    clean = tree / "clean.py"
    clean.chmod(0o755)
    run_porter("migrate", tree, "--write")
    assert clean.read_bytes() == SAMPLE["clean.py"].encode()
    assert clean.stat().st_mode & 0o777 == 0o755


def test_write_keeps_mode_crlf_and_encoding(tmp_path):
    source = "# -*- coding: latin-1 -*-\r\nimport torch\r\n# caf\xe9\r\nx = torch.ones(1).cuda()\r\n"
    root = make_tree(tmp_path / "r", {"a.py": source.encode("latin-1")})
    (root / "a.py").chmod(0o750)
    assert run_porter("migrate", root, "--write").returncode == 0
    data = (root / "a.py").read_bytes()
    assert b"caf\xe9" in data and b"\r\nimport porter_runtime\r\n" in data
    assert data.count(b"\r\n") == data.count(b"\n")
    assert (root / "a.py").stat().st_mode & 0o777 == 0o750


def test_bad_files_are_reported_and_left_alone(tree):
    bad = {
        "broken.py": "import torch\nx = torch.ones(1).cuda(\n",
        "latin.py": b"import torch\nname = '\xe9'\nx = torch.ones(1).cuda()\n",
        "legacy.py": "import torch\nprint 'moving', torch.ones(1).cuda()\n",
    }
    make_tree(tree, bad)
    report = tree.parent / "report.json"
    proc = run_porter("migrate", tree, "--write", "--report", report)
    assert proc.returncode == 2
    for name, text in bad.items():
        assert (tree / name).read_bytes() == (text if isinstance(text, bytes) else text.encode())
    data = json.loads(report.read_text())
    errors = {f["path"]: f["error"] for f in data["files"] if f["status"] == "error"}
    assert set(errors) == set(bad)
    assert "syntax error at line 2" in errors["broken.py"]
    assert "cannot decode as utf-8" in errors["latin.py"]
    assert "Python 2" in errors["legacy.py"]
    assert "porter_runtime" in (tree / "train.py").read_text()  # the rest was migrated
    assert "legacy.py" in proc.stderr.decode()


def test_missing_path_is_exit_2(tmp_path):
    proc = run_porter("migrate", tmp_path / "nope")
    assert proc.returncode == 2
    assert b"no such file" in proc.stderr


def test_reports_markdown_and_json(tree):
    md, js = tree.parent / "r.md", tree.parent / "r.json"
    assert run_porter("migrate", tree, "--report", md, "--report", js).returncode == 0
    data = json.loads(js.read_text())
    assert data["schema_version"] == 1
    assert data["summary"]["files_changed"] == 3
    assert data["summary"]["rewrites"] == 4
    by_path = {f["path"]: f for f in data["files"]}
    [rewrite] = by_path["pkg/model.py"]["rewrites"]
    assert rewrite["code"] == "PT002" and rewrite["line"] == 2
    assert rewrite["before"] == "device('cuda')" and rewrite["after"] == "porter_runtime.device()"
    text = md.read_text()
    assert text.startswith("# Port to Apple Silicon (MPS) and CPU, unchanged on CUDA\n")
    assert "| PT002 torch-device-cuda |" in text and "`pkg/model.py`" in text
    assert str(tree) not in text  # paths relative to the root, never the machine's


def test_select_ignore_and_exclude(tree):
    js = tree.parent / "r.json"
    run_porter("migrate", tree, "--select", "PT001", "--report", js)
    assert {r["code"] for r in json.loads(js.read_text())["rules"]} == {"PT001"}
    run_porter("migrate", tree, "--ignore", "PT001,PT002,PT999", "--report", js)
    assert {r["code"] for r in json.loads(js.read_text())["rules"]} == {"PT003", "PT004"}
    # What the ignored rules would have ported is still named, by the ledger's catch-all.
    run_porter("migrate", tree, "--ignore", "PT001,PT002", "--report", js)
    assert {r["code"] for r in json.loads(js.read_text())["rules"]} == {"PT003", "PT004", "PT999"}
    run_porter("migrate", tree, "--exclude", "scripts", "--exclude", "pkg/*", "--report", js)
    assert {f["path"] for f in json.loads(js.read_text())["files"]} == {"train.py"}


def test_gitignore_venv_and_build_folders_are_skipped(tree):
    make_tree(tree, {
        ".gitignore": "generated/\n*_tmp.py\n!keep_tmp.py\n",
        "generated/x.py": SAMPLE["train.py"],
        "a_tmp.py": SAMPLE["train.py"],
        "keep_tmp.py": SAMPLE["train.py"],
        ".venv/lib/y.py": SAMPLE["train.py"],
        "myenv/pyvenv.cfg": "",
        "myenv/z.py": SAMPLE["train.py"],
        "build/w.py": SAMPLE["train.py"],
    })
    js = tree.parent / "r.json"
    run_porter("migrate", tree, "--report", js)
    paths = {f["path"] for f in json.loads(js.read_text())["files"]}
    assert paths == {"train.py", "pkg/model.py", "scripts/run.py", "keep_tmp.py"}


def test_rules_and_explain():
    proc = run_porter("rules")
    assert proc.returncode == 0 and b"PT001" in proc.stdout and b"cuda-method" in proc.stdout
    listed = json.loads(run_porter("rules", "--json").stdout)
    assert {"code", "name", "safety", "summary"} <= set(listed[0])
    explain = run_porter("explain", "PT002")
    text = explain.stdout.decode()
    assert explain.returncode == 0
    for heading in ("## What", "## Why", "## Fix safety", "## Known limits", "## Examples"):
        assert heading in text
    assert "porter_runtime.device(1)" in text
    assert run_porter("explain", "NOPE").returncode == 2


def test_help_documents_exit_codes():
    proc = run_porter("migrate", "--help")
    assert b"Exit codes" in proc.stdout and b"2  bad input or a failure" in proc.stdout
    assert b"1  with --check" in proc.stdout and b"130  interrupted" in proc.stdout


def test_version():
    proc = run_porter("--version")
    assert proc.returncode == 0 and b"porter" in proc.stdout


def test_vendored_runtime_refreshed_only_when_older(tree):
    run_porter("migrate", tree, "--write")
    init = tree / "porter_runtime" / "__init__.py"
    text = init.read_text()
    import porter_runtime
    init.write_text(text.replace(f'"{porter_runtime.__version__}"', '"0.0.1"'))
    (tree / "new.py").write_text(SAMPLE["train.py"])
    run_porter("migrate", tree, "--write")
    assert init.read_text() == text  # older copy refreshed
    init.write_text(text.replace(f'"{porter_runtime.__version__}"', '"99.0"'))
    (tree / "new2.py").write_text(SAMPLE["train.py"])
    proc = run_porter("migrate", tree, "--write")
    assert '"99.0"' in init.read_text() and b"newer" in proc.stderr


def test_ci_runs_the_readme_commands():
    from porter_test_utils import ROOT

    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'python -m pip install -q -e ".[test]"' in ci and "python -m pytest" in ci
    assert 'python -m pip install -e ".[test]" && porter migrate fixtures/repos/multipkg --diff' in readme
    assert "python -m pytest" in readme


def test_scripts_find_the_runtime_from_any_folder_without_sys_path_code(tree, tmp_path):
    """No ported file touches sys.path. A script in a subfolder that imports nothing of the
    repository gets a pointer module beside it (its own folder is first on sys.path) that
    loads the root copy, so it runs from the root, from its folder and from anywhere else;
    a package finds the root's copy; the repository holds one copy."""
    from porter.project.vendoring.runtime_copy import is_pointer

    proc = run_porter("migrate", tree, "--write")
    assert proc.returncode == 0, proc.stderr
    for path in tree.rglob("*.py"):
        if "porter_runtime" not in path.parts and path.name != "porter_runtime.py":
            assert "sys.path" not in path.read_text(), path
    # the pointer stands for the root copy, which isort calls first-party: after torch
    assert (tree / "scripts" / "run.py").read_text() == (
        '"""Run it."""\nimport torch as t\n\nimport porter_runtime\nprint(t.ones(1).to(porter_runtime.device()))\n')
    assert is_pointer(tree / "scripts" / "porter_runtime.py")
    assert [p for p in tree.rglob("porter_runtime") if p.is_dir()] == [tree / "porter_runtime"]
    for cwd in (tree, tmp_path, tree / "scripts"):
        proc = subprocess.run(python_without_porter(str(tree / "scripts" / "run.py")), cwd=cwd,
                              capture_output=True, text=True)
        assert proc.returncode == 0 and "tensor([1.])" in proc.stdout, proc.stderr
    (tree / "pkg" / "show.py").write_text("from pkg.model import DEV\nprint(DEV.type)\n")
    proc = subprocess.run(python_without_porter("-m", "pkg.show"), cwd=tree, capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "cpu", proc.stderr
    # The copy is installable on its own (it carries a pyproject.toml).
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", str(site), str(tree / "porter_runtime")],
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr
    shutil.rmtree(tree / "porter_runtime")
    (tree / "scripts" / "porter_runtime.py").unlink()
    proc = subprocess.run(python_without_porter(str(tree / "scripts" / "run.py")), cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "No module named 'porter_runtime'" in proc.stderr  # the test can tell
    env = {**os.environ, "PYTHONPATH": str(site), "PORTER_TEST_KEEP": str(site)}
    proc = subprocess.run(python_without_porter(str(tree / "scripts" / "run.py")), cwd=tmp_path,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "tensor([1.])" in proc.stdout, proc.stderr


@pytest.mark.parametrize("comment,changed", [
    ("  # porter: ignore", False),
    ("  # porter: ignore[PT001]", False),
    ("  # porter: ignore[PT0]", False),
    ("  # porter: ignore[PT002]", True),
    ("", True),
])
def test_ignore_comments(tmp_path, comment, changed):
    from porter.engine.process import Options, migrate_source
    from porter.engine.registry import all_rules

    code = f"import torch\nx = torch.ones(1).cuda(){comment}\n"
    result = migrate_source(code.encode(), Options(rules=all_rules()))
    assert (result.new != code.encode()) is changed
    assert bool(result.findings) is changed


def test_output_is_identical_for_one_and_two_jobs(tmp_path):
    files = {f"m{i:02d}/f{j}.py": SAMPLE["train.py"] if (i + j) % 3 else SAMPLE["clean.py"]
             for i in range(12) for j in range(3)}
    files.update({"bad.py": "import torch\nx = torch.ones(1).cuda(\n", "cfg.yaml": "device: cuda\n"})
    root = make_tree(tmp_path / "r", files)
    outputs = []
    for jobs in ("1", "2"):
        report = tmp_path / f"r{jobs}.json"
        proc = run_porter("migrate", root, "--diff", "-j", jobs, "--report", report)
        assert proc.returncode == 2
        data = json.loads(report.read_text())
        outputs.append((proc.stdout, data["files"], data["summary"], proc.stderr))
    assert outputs[0] == outputs[1]
    assert outputs[0][2]["files_changed"] == 24


def test_a_rewrite_thrown_away_by_an_outer_rewrite_is_not_reported():
    """PT002 rewrites torch.device("cuda:1") inside map_location, then PT601 rebuilds
    the whole argument from the original: only PT601's rewrite is in the output."""
    from porter.engine.process import Options, migrate_source
    from porter.engine.registry import all_rules

    code = b"import torch\nsd = torch.load(path, map_location=torch.device('cuda:1'))\n"
    result = migrate_source(code, Options(rules=all_rules()))
    assert b"porter_runtime.device(1)" not in result.new, result.new
    assert [f.code for f in result.rewrites] == ["PT601"], result.findings


def test_a_project_inside_another_repository_is_its_own_root(tmp_path):
    """The README's quick start: a fixture repo inside porter's own checkout."""
    outer = make_tree(tmp_path / "outer", {"pyproject.toml": "", "examples/proj/requirements.txt": "torch\n",
                                            "examples/proj/train.py": SAMPLE["train.py"]})
    subprocess.run(["git", "init", "-q"], cwd=outer, check=True)
    diff = run_porter("migrate", outer / "examples" / "proj", "--diff").stdout
    assert b"+++ b/train.py" in diff and b"+++ b/porter_runtime/__init__.py" in diff


def test_an_internal_error_exits_2_never_the_1_of_pending_changes(tmp_path):
    """Found on a GPU machine: porter run from a checkout whose porter_runtime was not
    importable died while vendoring with Python's own status 1, which callers (the
    differential harness among them) read as "changes pending". A failure is 2."""
    import sysconfig

    root = Path(__file__).resolve().parent.parent
    checkout = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(root / "src" / "porter", checkout / "porter", ignore=ignore)
    # the rules come with porter; no porter_runtime
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    # -S: no site hooks, so the installed (editable) porter and its runtime stay hidden
    code = (f"import sys; sys.path[:0] = [{str(checkout)!r}, {sysconfig.get_paths()['purelib']!r}]\n"
            f"from porter.cli.app import main\nmain(['migrate', {str(repo)!r}, '--write'])\n")
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env={**os.environ, "NO_COLOR": "1"}, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "porter_runtime is not installed next to porter" in proc.stderr
    assert "porter: internal error" in proc.stderr
