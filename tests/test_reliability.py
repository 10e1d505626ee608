"""Hostile trees and races (issue 29): nothing written outside the root, no lost edit,
never half a runtime, no hang on FIFOs or devices, diffs that git applies."""

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from porter.files.apply import Change, apply_changes, runtime_files, vendor_changes
from porter_test_utils import run_porter, snapshot

CUDA = b"import torch\nx = torch.ones(1).cuda()\n"


def make_repo(path: Path, files: dict) -> Path:
    path.mkdir(parents=True)
    for name, data in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_bytes(data)
    return path


# -- (1) writes outside the root ---------------------------------------------------------

def test_dotdot_through_a_link_out_of_the_root_is_refused(tmp_path):
    outside = make_repo(tmp_path / "outside", {"inner/x.py": b"", "victim.py": CUDA})
    root = make_repo(tmp_path / "repo", {"a.py": b""})
    (root / "link").symlink_to(outside / "inner", target_is_directory=True)  # link/.. is outside/
    proc = run_porter("migrate", f"{root}/link/../victim.py", "--root", root, "--write", "-j", "1")
    assert proc.returncode == 2
    assert b"outside the root" in proc.stderr
    assert (outside / "victim.py").read_bytes() == CUDA
    assert not (outside / "porter_runtime").exists() and not (tmp_path / "porter_runtime").exists()


def test_a_file_named_outside_the_root_is_refused(tmp_path):
    elsewhere = make_repo(tmp_path / "elsewhere", {"x.py": CUDA})
    root = make_repo(tmp_path / "repo", {"a.py": b""})
    proc = run_porter("migrate", elsewhere / "x.py", "--root", root, "--write", "-j", "1")
    assert proc.returncode == 2 and b"outside the root" in proc.stderr
    assert (elsewhere / "x.py").read_bytes() == CUDA
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a.py", "elsewhere", "repo", "x.py"]


def test_a_root_that_does_not_exist_is_not_created(tmp_path):
    src = make_repo(tmp_path / "src", {"x.py": CUDA})
    proc = run_porter("migrate", src / "x.py", "--root", tmp_path / "nowhere", "--write", "-j", "1")
    assert proc.returncode == 2
    assert not (tmp_path / "nowhere").exists()
    assert (src / "x.py").read_bytes() == CUDA


def test_a_folder_swapped_for_a_link_after_the_check_is_not_followed(tmp_path, monkeypatch):
    """The folder is replaced by a link to outside between porter's check of the target
    and its write (here at the check's os.access): the write stays in the real folder."""
    outside = make_repo(tmp_path / "outside", {"a.py": CUDA})
    root = make_repo(tmp_path / "repo", {"sub/a.py": CUDA})
    real_access = os.access
    swapped = []

    def swap_then_access(path, mode, **kw):
        if not swapped:
            swapped.append(True)
            os.rename(root / "sub", root / "moved")
            os.symlink(outside, root / "sub")
        return real_access(path, mode, **kw)

    monkeypatch.setattr(os, "access", swap_then_access)
    apply_changes(root, [Change("sub/a.py", CUDA, b"new\n")])
    assert swapped
    assert (outside / "a.py").read_bytes() == CUDA
    assert [p.name for p in outside.iterdir()] == ["a.py"]


# -- (2) the owner's edit during the run -------------------------------------------------

def test_an_edit_saved_between_read_and_rename_is_kept(tmp_path, monkeypatch):
    """The owner saves the file while porter writes its temporary file (injected at the
    fsync): the last check before the rename sees it, and the file is not replaced."""
    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    edited = CUDA + b"y = 2  # the owner's edit\n"
    real_fsync = os.fsync

    def owner_saves(fd):
        real_fsync(fd)
        if (root / "a.py").read_bytes() == CUDA:
            (root / "a.py").write_bytes(edited)

    monkeypatch.setattr(os, "fsync", owner_saves)
    failed = apply_changes(root, [Change("a.py", CUDA, b"ported\n")])
    assert failed == [("a.py", "not written: the file changed on disk during the run")]
    assert (root / "a.py").read_bytes() == edited
    assert [p.name for p in root.iterdir()] == ["a.py"]


def test_a_same_size_edit_just_before_the_rename_is_kept(tmp_path, monkeypatch):
    from porter.files import safe_io

    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    edited = CUDA.replace(b"ones", b"twos")
    monkeypatch.setattr(safe_io, "before_replace", lambda rel: (root / rel).write_bytes(edited))
    failed = apply_changes(root, [Change("a.py", CUDA, b"ported\n")])
    assert failed == [("a.py", "not written: the file changed on disk during the run")]
    assert (root / "a.py").read_bytes() == edited


# -- (3) never half a runtime -------------------------------------------------------------

def test_an_interrupted_vendoring_leaves_no_runtime_folder(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    changes, _ = vendor_changes(root / "porter_runtime", root)
    real_fsync, calls = os.fsync, []

    def full_disk_at_the_fourth(fd):
        calls.append(fd)
        if len(calls) == 4:
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk_at_the_fourth)
    failed = apply_changes(root, changes)
    assert failed and all(error == "cannot write: No space left on device" for _, error in failed)
    assert sorted(p.name for p in root.iterdir()) == ["a.py"]


def test_a_runtime_copy_is_renamed_into_place_whole(tmp_path, monkeypatch):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    changes, _ = vendor_changes(root / "porter_runtime", root)
    seen = []
    real_rename = os.rename

    def spy(src, dst, **kw):
        if dst == "porter_runtime":  # the copy is whole, marker and all, when it appears
            folder = Path(os.readlink(f"/proc/self/fd/{kw['src_dir_fd']}")) / src
            seen.append(sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()))
        return real_rename(src, dst, **kw)

    monkeypatch.setattr(os, "rename", spy)
    assert apply_changes(root, changes) == []
    wanted = runtime_files()
    assert seen == [sorted([*wanted, "PORTER-PARTIAL.txt"])]
    assert {p.relative_to(root / "porter_runtime").as_posix() for p in (root / "porter_runtime").rglob("*")
            if p.is_file()} == set(wanted)
    assert sorted(p.name for p in root.iterdir()) == ["a.py", "porter_runtime"]


@pytest.mark.parametrize("leftover", ["marked", "older-porter", "sibling"])
def test_a_partial_runtime_from_a_stopped_run_is_replaced_not_ported(tmp_path, leftover):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    reference = make_repo(tmp_path / "reference", {"a.py": CUDA})
    assert run_porter("migrate", reference, "--write", "-j", "1", "-q").returncode == 0
    ours = runtime_files()
    some = {n: d for n, d in list(ours.items())[:3]}
    folder = root / ("porter_runtime" if leftover != "sibling" else ".porter_runtime.abcd1234.porter-partial")
    for name, data in some.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    if leftover != "older-porter":
        (folder / "PORTER-PARTIAL.txt").write_bytes(b"porter is writing this folder\n")
    proc = run_porter("migrate", root, "--write", "-j", "1", "-q")
    assert proc.returncode == 0, proc.stderr
    assert snapshot(root) == snapshot(reference)


# -- (4) hangs and blow-ups ----------------------------------------------------------------

NAMES = [".gitignore", "pyproject.toml", "requirements.txt", "requirements-dev.txt", "setup.py", "setup.cfg",
         "environment.yml"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_fifos_and_devices_under_manifest_names_do_not_hang(tmp_path, kind):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA, "pkg/__init__.py": b"", "pkg/m.py": CUDA})
    (root / ".git").mkdir()
    for name in NAMES:
        for folder in (root, root / "pkg"):
            if kind == "fifo":
                os.mkfifo(folder / name)
            else:
                (folder / name).symlink_to("/dev/zero")
    proc = subprocess.run([sys.executable, "-m", "porter", "migrate", str(root), "--diff", "-j", "1"],
                          capture_output=True, timeout=120, preexec_fn=_limit_memory)
    assert proc.returncode in (0, 2), proc.stderr
    assert b"porter_runtime.device()" in proc.stdout


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_a_huge_sparse_python_file_is_refused_before_it_is_read(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    with open(root / "huge.py", "wb") as handle:
        handle.truncate(8 << 30)  # 8 GB of holes: nothing on disk, all of it in memory if read
    proc = subprocess.run([sys.executable, "-m", "porter", "migrate", str(root), "--diff", "-j", "1"],
                          capture_output=True, timeout=120, preexec_fn=_limit_memory)
    assert proc.returncode == 2, proc.stderr
    assert b"larger than the 67.1 MB porter reads" in proc.stdout + proc.stderr
    assert b"porter_runtime.device()" in proc.stdout


def test_a_notebook_with_too_much_code_is_refused(tmp_path):
    import json

    from porter.engine.process import Options, process_file
    from porter.engine.registry import all_rules

    cell = {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
            "source": ["import torch\n", "x = torch.ones(1).cuda()\n"] + ["# " + "padding " * 100 + "\n"] * 1_500}
    nb = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "big.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n")
    result = process_file(path, "big.ipynb", Options(rules=all_rules()), None)
    assert result.status == "error" and "larger than the 1 MB porter parses" in result.error


# -- (5) diffs that apply --------------------------------------------------------------------

ODD = {
    "bom": "\ufeffimport torch\nx = torch.ones(1).cuda()\n".encode(),
    "form-feed": b"import torch\n\x0c\ndef f():\n    return 1\x0c\nx = torch.ones(1).cuda()\n",
    "u2028": "import torch\ns = '\u2028'\nx = torch.ones(1).cuda()\n".encode(),
    "lone-cr": b"import torch\ns = 1 # a\rb\nx = torch.ones(1).cuda()\n",
    "mixed": b"import torch\r\ny = 1\nz = 2\r\nx = torch.ones(1).cuda()\r\n",
    "no-newline-at-end": b"import torch\nx = torch.ones(1).cuda()",
    "cr-only": b"import torch\rx = torch.ones(1).cuda()\r",
}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize("name", sorted(ODD))
def test_diff_applies_with_git_apply(tmp_path, name):
    data = ODD[name]
    root = make_repo(tmp_path / "repo", {"a.py": data})
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    proc = run_porter("migrate", root / "a.py", "--root", root, "--diff", "-j", "1", "-q")
    assert proc.returncode == 0, proc.stderr
    assert b"porter_runtime.device()" in proc.stdout
    (tmp_path / "p.diff").write_bytes(proc.stdout)
    applied = subprocess.run(["git", "apply", "--whitespace=nowarn", str(tmp_path / "p.diff")], cwd=root,
                             capture_output=True)
    assert applied.returncode == 0, applied.stderr
    written = make_repo(tmp_path / "written", {"a.py": data})
    assert run_porter("migrate", written / "a.py", "--root", written, "--write", "-j", "1", "-q").returncode == 0
    assert (root / "a.py").read_bytes() == (written / "a.py").read_bytes()



def test_lines_no_rule_touched_keep_their_text(tmp_path):
    data = b"import torch\ntry:\n    pass\nexcept ValueError :\n    pass\nx = torch.ones(1).cuda()\n"
    root = make_repo(tmp_path / "repo", {"a.py": data})
    assert run_porter("migrate", root, "--write", "-j", "1", "-q").returncode == 0
    new = (root / "a.py").read_bytes()
    assert b"except ValueError :\n" in new and b"porter_runtime.device()" in new


def test_a_file_its_codec_cannot_give_back_is_not_rewritten(tmp_path):
    data = b'# -*- coding: unicode_escape -*-\nimport torch\ns = "caf\\xe9"\nx = torch.ones(1).cuda()\n'
    root = make_repo(tmp_path / "repo", {"a.py": data})
    proc = run_porter("migrate", root, "--write", "-j", "1")
    assert proc.returncode == 2 and b"unicode_escape" in proc.stderr + proc.stdout
    assert (root / "a.py").read_bytes() == data


# -- (6) smaller items -------------------------------------------------------------------------

def test_select_and_ignore_of_the_same_rules_is_an_input_error(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    proc = run_porter("migrate", root, "--check", "--select", "PT", "--ignore", "PT", "-j", "1")
    assert proc.returncode == 2 and b"no rule left to run" in proc.stderr


def test_gitignore_character_classes_and_escapes_are_honoured(tmp_path):
    from porter.engine.discover import discover

    root = make_repo(tmp_path / "repo", {
        ".gitignore": b"gen_[0-9].py\n\\#hash.py\nskip[!x].py\n",
        "gen_1.py": CUDA, "gen_a.py": CUDA, "#hash.py": CUDA, "skipa.py": CUDA, "skipx.py": CUDA})
    found = discover([root], root)
    assert sorted(p.name for p in found.files) == ["gen_a.py", "skipx.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_gitignored_folder_git_tracks_is_ported_as_git_reads_it(tmp_path):
    """Vim's root .gitignore lists causal-conv1d/, which the repository commits: git's
    rules are for untracked files, so the tracked package is the user's code; an ignored
    file git does not track, inside it or beside it, stays skipped."""
    from porter.engine.discover import discover

    root = make_repo(tmp_path / "repo", {
        ".gitignore": b"causal-conv1d/\nscratch.py\n",
        "causal-conv1d/causal_conv1d/interface.py": CUDA, "main.py": CUDA, "scratch.py": CUDA})
    assert sorted(p.name for p in discover([root], root).files) == ["main.py"]  # no repository: the rules decide
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-f", "main.py", "causal-conv1d/causal_conv1d/interface.py"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=root, check=True)
    (root / "causal-conv1d" / "causal_conv1d" / "build_tmp.py").write_bytes(CUDA)  # ignored, untracked
    found = discover([root], root)
    assert sorted(p.relative_to(root).as_posix() for p in found.files) == [
        "causal-conv1d/causal_conv1d/interface.py", "main.py"]


def test_a_tree_1200_folders_deep_is_walked(tmp_path):
    from porter.engine.discover import discover

    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    deep = root
    for _ in range(1200):
        deep = deep / "d"
        deep.mkdir()
    (deep / "b.py").write_bytes(CUDA)
    try:
        found = discover([root], root)
        assert sorted(p.name for p in found.files) == ["a.py", "b.py"]
    finally:  # pytest's clean-up of old temporary folders recurses: take the tree down here, leaf first
        (deep / "b.py").unlink()
        while deep != root:
            deep.rmdir()
            deep = deep.parent


def test_one_file_named_twice_is_processed_once(tmp_path):
    root = make_repo(tmp_path / "repo", {"d/x.py": CUDA})
    proc = run_porter("migrate", root / "d" / "x.py", f"{root}/d/../d/x.py", "--root", root, "-j", "1",
                      "--format", "json")
    assert proc.returncode == 0, proc.stderr
    import json
    assert [f["path"] for f in json.loads(proc.stdout)["files"]] == ["d/x.py"]


def test_setuptools_packages_after_another_list_key_gets_the_runtime(tmp_path):
    from porter.project.vendoring.runtime_copy import Home, manifest_change

    text = b'[project]\nname = "p"\n\n[tool.setuptools]\npy-modules = ["tool"]\npackages = ["mypkg"]\n'
    root = make_repo(tmp_path / "repo", {"pyproject.toml": text, "mypkg/__init__.py": b""})
    change, note = manifest_change(root, Home(root / "mypkg" / "porter_runtime", "mypkg"))
    assert change is not None and b'packages = ["mypkg", "mypkg.porter_runtime"]' in change.new


def test_a_vendored_txt_of_another_tool_is_not_porters(tmp_path):
    from porter.engine.discover import discover

    root = make_repo(tmp_path / "repo", {"third/VENDORED.txt": b"vendored by pip's vendoring tool\n",
                                         "third/__init__.py": b"", "third/m.py": CUDA})
    assert [p.name for p in discover([root], root).files] == ["__init__.py", "m.py"]


def test_timeout_nan_is_a_usage_error(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": b"x = 1\n"})
    proc = run_porter("verify", root, "--timeout", "nan")
    assert proc.returncode == 2 and b"not a number of seconds" in proc.stderr and b"internal error" not in proc.stderr


def test_diff_into_a_closed_pipe_stops_quietly(tmp_path):
    files = {f"m{i:02d}.py": CUDA for i in range(40)}
    root = make_repo(tmp_path / "repo", files)
    porter = subprocess.Popen([sys.executable, "-m", "porter", "migrate", str(root), "--diff", "-j", "1", "-q"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    porter.stdout.read(10)
    porter.stdout.close()  # `| head -c 10`
    _, err = porter.communicate(timeout=120)
    assert err == b"" and porter.returncode in (0, -13), err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_run_as_root_keeps_the_owner_of_files_it_writes(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA})
    os.chown(root / "a.py", 1234, 5678)
    assert apply_changes(root, [Change("a.py", CUDA, b"ported\n")]) == []
    info = os.stat(root / "a.py")
    assert (info.st_uid, info.st_gid) == (1234, 5678)


# -- notebooks get the checks .py files get ------------------------------------------------------

def _notebook_result(tmp_path, *cells):
    import json

    from porter.engine.process import Options, process_file
    from porter.engine.registry import all_rules

    nb = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": cell.splitlines(keepends=True)} for cell in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n")
    return process_file(path, "nb.ipynb", Options(rules=all_rules()), None)


def test_a_notebook_cell_python_rejects_is_not_rewritten(tmp_path):
    result = _notebook_result(tmp_path, "import torch\ntry:\n    x = torch.ones(1).cuda()\nexcept ValueError, e:\n"
                                        "    pass\n")
    assert result.status == "error" and "cell 1: does not compile" in result.error


def test_a_notebook_that_binds_porter_runtime_is_not_rewritten(tmp_path):
    result = _notebook_result(tmp_path, "import torch\nporter_runtime = 3\n", "x = torch.ones(1).cuda()\n")
    assert result.status == "unchanged"
    assert any("binds the name porter_runtime" in f.message for f in result.findings)


def test_notebook_continuation_lines_starting_with_percent_or_not_equal_are_python(tmp_path):
    result = _notebook_result(tmp_path, "import torch\nx = (torch.ones(1).cuda().sum()\n     % 2)\n"
                                        "y = (x\n     != 0)\n")
    assert result.status == "changed", result.error
    assert b"     % 2)" in result.new and b"     != 0)" in result.new


def test_report_file_names_are_escaped_in_markdown_and_sarif(tmp_path):
    import json

    name = "a|b `c` #1 é.py"
    root = make_repo(tmp_path / "repo", {name: b"import torch\nx = torch.ones(1).cuda()\ny = torch.cuda.memory_allocated()\n"})
    md, sarif = tmp_path / "r.md", tmp_path / "r.sarif"
    proc = run_porter("migrate", root, "-j", "1", "-q", "--report", md, "--report", sarif)
    assert proc.returncode == 0, proc.stderr
    text = md.read_text()
    assert f"`{name}`" not in text and "``a\\|b `c` #1 é.py" in text
    uris = {loc["physicalLocation"]["artifactLocation"]["uri"]
            for result in json.loads(sarif.read_text())["runs"][0]["results"] for loc in result["locations"]}
    assert uris == {"a%7Cb%20%60c%60%20%231%20%C3%A9.py"}


# -- verify ----------------------------------------------------------------------------------

def test_verify_ends_when_a_module_forks_a_long_lived_child_and_a_later_one_crashes(tmp_path):
    root = make_repo(tmp_path / "repo", {
        "setup.cfg": b"",
        # assignments keep both modules (a top-level bare call would make them scripts,
        # whose top level the import stage does not run: porter.verify.scripts)
        "a_fork.py": b"import os, time\nCHILD = os.fork()\nif CHILD == 0:\n    SLEPT = time.sleep(600)\n"
                     b"    EXITED = os._exit(0)\n",
        "b_crash.py": b"import os, signal\nKILLED = os.kill(os.getpid(), signal.SIGKILL)\n"})
    proc = subprocess.run([sys.executable, "-m", "porter", "verify", str(root), "-j", "1", "--timeout", "300"],
                          capture_output=True, timeout=90)
    assert proc.returncode == 1 and b"1 crashed" in proc.stdout + proc.stderr


def test_verify_refuses_an_interpreter_that_is_not_python(tmp_path):
    root = make_repo(tmp_path / "repo", {"setup.cfg": b"", "a.py": b"x = 1\n"})
    proc = run_porter("verify", root, "--python", "/bin/sh")
    assert proc.returncode == 2 and b"not a Python 3 interpreter" in proc.stderr
    assert b"internal error" not in proc.stderr


def test_verify_ctrl_c_exits_130(tmp_path):
    import signal
    import time

    root = make_repo(tmp_path / "repo", {"setup.cfg": b"", "slow.py": b"import time\nSLEPT = time.sleep(60)\n"})  # a module: a script would not sleep
    proc = subprocess.Popen([sys.executable, "-m", "porter", "verify", str(root), "-j", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(4)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130


def test_settings_values_are_not_printed_raw(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA, "pyproject.toml": b'[tool.porter]\nruntime-dir = "a\\u001b]0;x\\u0007b"\n'})
    proc = run_porter("migrate", root, "-q")
    assert proc.returncode == 2
    assert b"\x07" not in proc.stderr and b"\x1b" not in proc.stderr and b"a\\x1b]0;x\\x07b" in proc.stderr


def test_out_copies_every_link_as_a_link(tmp_path):
    root = make_repo(tmp_path / "repo", {"a.py": CUDA, "conf/base.yaml": b"x: 1\n", "data.txt": b"d\n"})
    (root / "conf" / "run.yaml").symlink_to("base.yaml")
    (root / "latest.txt").symlink_to("data.txt")
    out = tmp_path / "out"
    proc = run_porter("migrate", root, "--out", out, "-j", "1", "-q")
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(out / "conf" / "run.yaml") == "base.yaml" and os.readlink(out / "latest.txt") == "data.txt"


def test_out_never_calls_a_file_cut_during_the_copy_whole(tmp_path, monkeypatch):
    from porter.engine import outtree

    root = make_repo(tmp_path / "repo", {"a.py": CUDA, "big.bin": b"x" * 100_000})
    real_copy = shutil.copy2

    def cut(src, dst, **kw):
        real_copy(src, dst, **kw)
        if str(src).endswith("big.bin"):
            os.truncate(src, 10)  # the owner's tool truncates it while porter copies

    monkeypatch.setattr(shutil, "copy2", cut)
    with pytest.raises(outtree.OutError, match="big.bin: it changed while it was copied"):
        outtree.copy_tree(root, tmp_path / "out")


def test_rule_records_are_not_rescanned_for_each_rewrite(monkeypatch):
    """8,000 rewrites in one file took 109 s: each rewrite scanned every earlier record.
    Counted, not timed: the records looked at grow with the rewrites, not their square."""
    from porter.engine.stages import context
    from porter.engine.process import Options, migrate_source
    from porter.engine.registry import all_rules

    reads = [0]

    class Counted(context._Record):
        @property
        def action(self):
            reads[0] += 1
            return tuple.__getitem__(self, 2)

    monkeypatch.setattr(context, "_Record", Counted)

    def looked_at(n: int) -> int:
        reads[0] = 0
        source = "import torch\nx = torch.ones(1)\n" + "".join(f"y{i} = x.cuda()\n" for i in range(n))
        migrate_source(source.encode(), Options(rules=all_rules()), segments=False)
        return reads[0]

    small, large = looked_at(200), looked_at(800)
    assert large < 6 * small, (small, large)  # linear: about 4x; quadratic: about 16x
