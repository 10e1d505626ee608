"""--out, pre-commit hooks, --fail-on, shell completion and --version, through the real CLI."""

import subprocess

import pytest

from porter_test_utils import ROOT, python_without_porter, run_porter, snapshot
from test_cli import SAMPLE, make_tree


def test_out_writes_a_ported_copy_and_leaves_the_original(tmp_path):
    root = make_tree(tmp_path / "repo", {**SAMPLE, ".gitignore": "data/\n", "data/big.bin": b"\0" * 10,
                                         "notes.txt": "keep me\n", ".git/HEAD": "ref: refs/heads/main\n"})
    (root / "link.py").symlink_to("clean.py")
    before = snapshot(root)
    out = tmp_path / "ported"
    proc = run_porter("migrate", root, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert snapshot(root) == before
    copied = snapshot(out)
    assert "notes.txt" in copied and "clean.py" in copied and "porter_runtime/__init__.py" in copied
    assert "data/big.bin" not in copied and ".git/HEAD" not in copied
    assert (out / "link.py").is_symlink()
    assert "porter_runtime.device()" in (out / "pkg" / "model.py").read_text()
    ran = subprocess.run(python_without_porter(str(out / "scripts" / "run.py")), capture_output=True, text=True)
    assert ran.returncode == 0 and "tensor([1.])" in ran.stdout, ran.stderr


def test_out_refuses_a_folder_with_files_or_the_tree_itself(tmp_path):
    root = make_tree(tmp_path / "repo", SAMPLE)
    busy = make_tree(tmp_path / "busy", {"x.txt": "mine\n"})
    proc = run_porter("migrate", root, "--out", busy)
    assert proc.returncode != 0 and b"not an empty folder" in proc.stderr
    assert (busy / "x.txt").read_text() == "mine\n"
    assert run_porter("migrate", root / "pkg", "--root", root, "--out", tmp_path).returncode != 0


def test_precommit_hooks_file_runs_porter():
    # Read without a YAML library (not a test dependency): the file is flat "key: value" items.
    hooks, current = {}, None
    for line in (ROOT / ".pre-commit-hooks.yaml").read_text().splitlines():
        if line.startswith("- id: "):
            current = hooks.setdefault(line[6:].strip(), {})
        elif current is not None and line.startswith("  ") and ": " in line:
            key, value = line.strip().split(": ", 1)
            current[key] = value
    assert set(hooks) == {"porter-check", "porter-fix"}
    assert hooks["porter-check"]["entry"].startswith("porter migrate --check --fail-on changes")
    assert hooks["porter-fix"]["entry"].startswith("porter migrate --write")
    assert all(h["language"] == "python" and "python" in h["types_or"] for h in hooks.values())


def test_check_hook_guards_a_ported_repo(tmp_path):
    """As pre-commit runs it: the hook's entry with the staged file names."""
    root = make_tree(tmp_path / "repo", {**SAMPLE, "loader.py": "import torch\nfrom torch.utils.data import DataLoader\n"
                                         "loader = DataLoader([1, 2], num_workers=2, collate_fn=lambda b: b)\n"})
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    entry = ["migrate", "--check", "--fail-on", "changes", "--no-progress"]
    assert run_porter(*entry, "train.py", "loader.py", cwd=root).returncode == 1
    assert run_porter("migrate", "--write", "--no-progress", "train.py", "pkg/model.py", "scripts/run.py",
                      cwd=root).returncode == 0
    # Ported: only a finding for a human is left, and it does not fail the guard ...
    assert run_porter(*entry, "train.py", "loader.py", cwd=root).returncode == 0
    # ... though plain --check still reports it.
    assert run_porter("migrate", "--check", "loader.py", cwd=root).returncode == 1
    # New CUDA-only code fails the guard again.
    (root / "new.py").write_text("import torch\ntorch.cuda.synchronize()\n")
    proc = run_porter(*entry, "new.py", "train.py", cwd=root)
    assert proc.returncode == 1 and b"PT101" in proc.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_scripts(shell):
    proc = run_porter("completion", shell)
    assert proc.returncode == 0 and b"_PORTER_COMPLETE" in proc.stdout


def test_completion_completes_subcommands_and_options():
    import os
    import sys

    env = {**os.environ, "_PORTER_COMPLETE": "bash_complete", "COMP_WORDS": "porter migrate --output-f",
           "COMP_CWORD": "2"}
    proc = subprocess.run([sys.executable, "-m", "porter"], env=env, capture_output=True, text=True)
    assert "--output-format" in proc.stdout, proc.stderr
    env.update(COMP_WORDS="porter ", COMP_CWORD="1")
    proc = subprocess.run([sys.executable, "-m", "porter"], env=env, capture_output=True, text=True)
    assert "migrate" in proc.stdout and "completion" in proc.stdout


def test_version():
    import porter

    proc = run_porter("--version")
    assert proc.returncode == 0 and proc.stdout.decode().strip() == f"porter, version {porter.__version__}"
