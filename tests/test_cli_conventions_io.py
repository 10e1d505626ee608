"""porter's command line follows ruff's conventions, through the real CLI: ``.`` by
default and ``-`` for stdin, counts that add up, notes that are not findings, and the
smaller things (the progress bar, the runtime's notes, help that agrees with the README,
``porter.toml`` as a root marker)."""

import json
import os
import re
import subprocess
import sys

from porter_test_utils import FIXTURES, ROOT
from test_cli import SAMPLE, make_tree
from test_cli_conventions import porter, porter_on_terminal
from test_cuda_only_notes import GPU_TEST, SOAP

CUDA_SOURCE = b"import torch\nx = torch.zeros(2).cuda()\ntorch.cuda.synchronize()\n"


# -- 3. "." by default, "-" for stdin -------------------------------------------------------

def test_no_path_ports_the_current_folder(tmp_path):
    root = make_tree(tmp_path / "repo", SAMPLE)
    proc = porter("migrate", "--check", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert b"Would port train.py" in proc.stderr and b"Would port pkg/model.py" in proc.stderr
    assert porter("migrate", "--diff", cwd=root).stdout == porter("migrate", ".", "--diff", cwd=root).stdout


def test_stdin_is_ported_to_stdout_and_nothing_is_written(tmp_path):
    root = make_tree(tmp_path / "repo", {"requirements.txt": "torch\n"})
    proc = porter("migrate", "-", cwd=root, input=CUDA_SOURCE)
    assert proc.returncode == 0, proc.stderr
    assert b"porter_runtime.synchronize()" in proc.stdout and b".cuda()" not in proc.stdout
    assert proc.stdout == porter("migrate", "-", "-q", cwd=root, input=CUDA_SOURCE).stdout
    assert sorted(p.name for p in root.iterdir()) == ["requirements.txt"]  # never vendors, never writes
    assert b"never vendors" in proc.stderr


def test_stdin_with_diff_and_check(tmp_path):
    root = make_tree(tmp_path / "repo", {"requirements.txt": "torch\n"})
    diff = porter("migrate", "-", "--diff", cwd=root, input=CUDA_SOURCE)
    assert diff.returncode == 0 and diff.stdout.startswith(b"diff --git a/- b/-\n"), diff.stdout
    assert b"-x = torch.zeros(2).cuda()\n" in diff.stdout
    check = porter("migrate", "-", "--check", cwd=root, input=CUDA_SOURCE)
    assert check.returncode == 1 and check.stdout == b"" and b"Would port -" in check.stderr
    clean = b"import torch\nprint(torch.ones(1))\n"
    assert porter("migrate", "-", "--check", cwd=root, input=clean).returncode == 0
    same = porter("migrate", "-", cwd=root, input=clean)
    assert same.returncode == 0 and same.stdout == clean  # nothing to port: the source as it came
    bad = b"import torch\nx = torch.ones(1).cuda(\n"
    failed = porter("migrate", "-", cwd=root, input=bad)
    assert failed.returncode == 2 and failed.stdout == bad and b"-: error: syntax error" in failed.stderr
    assert sorted(p.name for p in root.iterdir()) == ["requirements.txt"]


def test_stdin_filename_names_the_source_and_picks_settings_and_rules(tmp_path):
    root = make_tree(tmp_path / "repo", {
        "pyproject.toml": '[tool.porter]\nper-file-ignores = { "scripts/*" = ["PT101"] }\n',
    })
    proc = porter("migrate", "-", "--check", "--stdin-filename", "pkg/train.py", cwd=root, input=CUDA_SOURCE)
    assert proc.returncode == 1 and b"Would port pkg/train.py" in proc.stderr, proc.stderr
    diff = porter("migrate", "-", "--diff", "--stdin-filename", "scripts/run.py", cwd=root, input=CUDA_SOURCE)
    assert diff.stdout.startswith(b"diff --git a/scripts/run.py b/scripts/run.py\n"), diff.stdout
    assert b"+torch.cuda.synchronize()" not in diff.stdout and b" torch.cuda.synchronize()" in diff.stdout
    # the name picks the stage too: a requirements file is a manifest, not Python
    req = porter("migrate", "-", "--stdin-filename", "requirements.txt", cwd=root, input=b"torch\nflash-attn\n")
    assert req.returncode == 0 and req.stdout == b'torch\nflash-attn; sys_platform != "darwin"\n', req.stdout
    assert not (root / "pkg").exists() and not (root / "scripts").exists() and not (root / "porter_runtime").exists()


def test_stdin_refuses_other_paths_and_a_review(tmp_path):
    root = make_tree(tmp_path / "repo", SAMPLE)
    for args in (("-", "train.py"), ("-", "--interactive"), ("train.py", "--stdin-filename", "x.py")):
        proc = porter("migrate", *args, cwd=root, input=CUDA_SOURCE)
        assert proc.returncode == 2 and proc.stderr.startswith(b"porter: error: "), (args, proc.stderr)


# -- 5. counts that add up -----------------------------------------------------------------

def _table_rows(text: str, title: str) -> list[list[str]]:
    """The body rows of the rich table under ``title`` (its cells, stripped)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("└"):
            break
        if line.startswith(("│", "┃")):
            rows.append([cell.strip() for cell in line.strip("│┃").split("│" if line.startswith("│") else "┃")])
    return rows


def test_the_summary_adds_up_and_the_ledger_does_not_read_as_needs_a_human(tmp_path):
    root = make_tree(tmp_path / "repo", {
        "tests/hsdp_test.py": GPU_TEST,  # a note
        "ext.py": "import torch\nimport fused_softmax_cuda\n",  # PT999
        "smi.py": "import subprocess\n\nimport ext  # noqa: F401\n\nsubprocess.run(['nvidia-smi'])\n",  # PT111; imports ext
        "train.py": SAMPLE["train.py"],
        "requirements.txt": "torch\n",
    })
    proc = porter("migrate", ".", "--check", cwd=root)
    err = proc.stderr.decode()
    head, *total = _table_rows(err, "porter migrate")
    totals = dict(zip(head, map(int, total[0])))
    head, *rules = _table_rows(err, "by rule")
    by_rule = [dict(zip(head, row)) for row in rules]
    assert "PT999" in [r["code"] for r in by_rule]
    assert sum(int(r["needs a human"]) for r in by_rule) == totals["needs a human"] == 2
    assert sum(int(r["rewrites"]) for r in by_rule) == totals["rewrites"]
    assert sum(int(r["notes"]) for r in by_rule) == totals["notes"] == 1
    [ledger] = [line for line in err.splitlines() if line.startswith("ledger:")]
    assert "reported" not in ledger and "needs a human" not in ledger, ledger
    assert re.search(r"CUDA touchpoints in the code: .*\d+ under a finding or note", ledger), ledger
    report = json.loads(porter("migrate", ".", "--output-format", "json", cwd=root).stdout)
    assert sum(r["findings"] for r in report["rules"]) == report["summary"]["findings"] == 2


# -- 6. notes are not findings -------------------------------------------------------------

def test_notes_are_not_printed_as_findings_and_check_agrees_with_its_lines(tmp_path):
    root = make_tree(tmp_path / "repo", {"tests/hsdp_test.py": GPU_TEST, "soap.py": SOAP})
    assert porter("migrate", ".", "--write", "-q", cwd=root).returncode == 0  # the mesh's device type (PT004)
    check = porter("migrate", ".", "--check", "-q", cwd=root)
    assert check.returncode == 0 and check.stderr == b"", check.stderr  # exit 0: no line printed
    full = porter("migrate", ".", "--check", "-q", "--output-format", "full", cwd=root)
    assert b"tests/hsdp_test.py:10:" in full.stderr and b"PT202 note: " in full.stderr, full.stderr
    assert b"PT801 note: " in full.stderr
    # with a finding for a human beside the notes: exit 1, and only that finding is printed
    make_tree(root, {"smi.py": "import subprocess\nsubprocess.run(['nvidia-smi'])\n"})
    check = porter("migrate", ".", "--check", "-q", cwd=root)
    assert check.returncode == 1 and check.stderr.decode().splitlines() == [
        line for line in check.stderr.decode().splitlines() if line.startswith("smi.py:2:1 PT111 ")] != []


def test_flow_classes_check_prints_no_note(tmp_path, copy_tree):
    root = copy_tree(FIXTURES / "repos" / "flow_classes")
    proc = porter("migrate", ".", "--check", "-q", cwd=root)
    assert proc.returncode == 1
    assert b"for information" not in proc.stderr and b"PT202" not in proc.stderr, proc.stderr


# -- 8. the smaller things ---------------------------------------------------------------------

def test_the_progress_bar_never_shows_an_unknown_total(tmp_path):
    files = {f"pkg{i}/m{j}.py": "import torch\nx = torch.zeros(1).cuda()\n" for i in range(20) for j in range(10)}
    root = make_tree(tmp_path / "repo", {**files, "requirements.txt": "torch\n"})
    code, out = porter_on_terminal("migrate", ".", "-j", "1", cwd=root)
    assert code == 0 and b"files scanned" in out
    assert b"/?" not in out, out


def test_a_copy_that_grows_is_told_once(tmp_path, copy_tree):
    root = copy_tree(FIXTURES / "repos" / "flow_classes")
    assert porter("migrate", "flowlib/metrics.py", "config.py", "--write", "-q", cwd=root).returncode == 0
    for mode in ((), ("--write",)):
        proc = porter("migrate", ".", *mode, cwd=root)
        told = [line for line in proc.stderr.decode().splitlines() if "porter_runtime at flowlib/porter_runtime/" in line
                or "to porter_runtime at flowlib/porter_runtime/" in line]
        assert len(told) == 1, told


def test_runtime_dir_help_and_readme_agree_on_the_default():
    help_text = " ".join(porter("migrate", "--help").stdout.decode().split())
    [row] = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `--runtime-dir")]
    assert "<root>/porter_runtime" not in help_text
    assert "default: per file" in help_text and "default: per file" in row
    assert "How the ported code finds the runtime" in help_text and "How the ported code finds the runtime" in row


def test_porter_toml_marks_the_project_root(tmp_path):
    root = make_tree(tmp_path / "proj", {"porter.toml": 'ignore = ["PT101"]\n',
                                         "sub/x.py": CUDA_SOURCE.decode()})
    proc = porter("migrate", "sub/x.py", "--diff", cwd=root)
    assert proc.returncode == 0
    assert proc.stdout.startswith(b"diff --git a/sub/x.py b/sub/x.py\n"), proc.stdout[:200]
    assert b"+import porter_runtime\n" in proc.stdout and b" torch.cuda.synchronize()" in proc.stdout
    # a nested porter.toml governs its folder's files; the outermost one marks the root
    make_tree(root, {"sub/porter.toml": 'ignore = ["PT001"]\n'})
    nested = porter("migrate", "sub/x.py", "--diff", cwd=root)
    assert nested.stdout.startswith(b"diff --git a/sub/x.py b/sub/x.py\n"), nested.stdout[:200]
    assert b" x = torch.zeros(2).cuda()\n" in nested.stdout  # sub's settings: PT001 off, PT101 on
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"`--root DIR` \|[^\n]*`porter\.toml`", readme)


def test_a_downloaded_repository_inside_another_project_is_its_own_root(tmp_path):
    """GitHub's "Download ZIP" has no .git and many research repositories no project file:
    unpacked inside another project, the runtime goes inside the folder named, never above
    it, and the ported script runs from its own folder."""
    outer = make_tree(tmp_path / "myproject", {"pyproject.toml": "[project]\nname = 'mine'\n"})
    repo = make_tree(outer / "third_party" / "gptrepo", {
        "README.md": "# a GPT\n",
        "train.py": "import torch\nx = torch.zeros(2).cuda()\nprint('sum', float(x.sum()))\n",
    })
    proc = porter("migrate", "third_party/gptrepo", "--write", "-q", cwd=outer)
    assert proc.returncode in (0, 1), proc.stderr
    assert sorted(p.name for p in outer.iterdir()) == ["pyproject.toml", "third_party"]
    assert (repo / "porter_runtime" / "VENDORED.txt").is_file()
    assert not (repo / "porter_runtime.py").exists()  # no pointer to a copy above
    run = subprocess.run([sys.executable, "train.py"], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PORTER_QUIET": "1"})
    assert run.returncode == 0 and "sum 0.0" in run.stdout, run.stderr
    # a folder without a README inside a project still belongs to that project
    make_tree(outer, {"scripts/go.py": "import torch\ntorch.cuda.synchronize()\n"})
    diff = porter("migrate", "scripts", "--diff", cwd=outer)
    assert diff.stdout.startswith(b"diff --git a/scripts/go.py b/scripts/go.py\n"), diff.stdout[:200]
