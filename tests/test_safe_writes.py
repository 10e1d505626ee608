"""Safe writes: temp file + rename, form kept, nothing outside the root, kill-safe."""

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from porter.files.apply import Change, apply_changes, runtime_files, vendor_changes
from porter_test_utils import run_porter, snapshot

CUDA = b"import torch\nx = torch.ones(1).cuda()\n"


def leftovers(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*porter-tmp*"))


def test_a_write_keeps_mode_and_leaves_no_temp(tmp_path):
    path = tmp_path / "run.py"
    path.write_bytes(b"old\n")
    path.chmod(0o750)
    assert apply_changes(tmp_path, [Change("run.py", b"old\n", b"new\n")]) == []
    assert path.read_bytes() == b"new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o750
    assert leftovers(tmp_path) == []


def test_failed_write_keeps_the_original_and_removes_the_temp(tmp_path, monkeypatch):
    path = tmp_path / "a.py"
    path.write_bytes(b"old\n")

    def boom(src, dst, src_dir_fd=None, dst_dir_fd=None):
        assert Path(src).name == src and src.startswith(".a.py.")  # beside it, in the folder held open
        assert os.readlink(f"/proc/self/fd/{src_dir_fd}") == str(tmp_path)
        assert (tmp_path / src).read_bytes() == b"new\n"  # complete before the rename
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    failed = apply_changes(tmp_path, [Change("a.py", b"old\n", b"new\n")])
    assert failed == [("a.py", "cannot write: No space left on device")]
    assert path.read_bytes() == b"old\n"
    assert leftovers(tmp_path) == []


def test_write_keeps_mode_bom_crlf_and_encoding(tmp_path):
    data = "\ufeff# -*- coding: utf-8 -*-\r\nimport torch\r\nname = 'café'\r\nx = torch.ones(1).cuda()\r\n".encode()
    latin = b"# coding: latin-1\nimport torch\nname = 'caf\xe9'\nx = torch.ones(1).cuda()\n"
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_bytes(data)
    (root / "b.py").write_bytes(latin)
    (root / "a.py").chmod(0o755)
    (root / "b.py").chmod(0o600)
    assert run_porter("migrate", root, "--write", "-j", "1").returncode == 0
    a, b = (root / "a.py").read_bytes(), (root / "b.py").read_bytes()
    assert a.startswith(b"\xef\xbb\xbf# -*- coding: utf-8 -*-\r\nimport torch\r\n\r\nimport porter_runtime\r\n")
    assert a.count(b"\r\n") == a.count(b"\n") and "café".encode() in a
    assert b"name = 'caf\xe9'\n" in b and b"porter_runtime.device()" in b
    assert stat.S_IMODE((root / "a.py").stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "b.py").stat().st_mode) == 0o600
    assert leftovers(root) == []


def test_never_writes_through_a_link_out_of_the_root(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mod.py").write_bytes(CUDA)
    root = tmp_path / "repo"
    root.mkdir()
    (root / "linked").symlink_to(outside, target_is_directory=True)
    # Named explicitly through the link: it lies outside the root, and is refused unread.
    proc = run_porter("migrate", root / "linked" / "mod.py", "--root", root, "--write", "-j", "1")
    assert proc.returncode == 2
    assert b"is outside the root" in proc.stderr
    assert (outside / "mod.py").read_bytes() == CUDA
    assert sorted(p.name for p in outside.iterdir()) == ["mod.py"]
    # Walked: the link is skipped, not followed.
    proc = run_porter("migrate", root, "--write", "-j", "1")
    assert proc.returncode == 0 and b"linked: skipped: symbolic link, not followed" in proc.stderr
    assert (outside / "mod.py").read_bytes() == CUDA


def test_a_link_swapped_in_for_a_file_is_not_replaced(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (tmp_path / "target.py").write_bytes(CUDA)
    (root / "a.py").symlink_to(tmp_path / "target.py")
    failed = apply_changes(root, [Change("a.py", CUDA, b"new\n")])
    assert failed == [("a.py", "not written: a.py is a symbolic link (porter never writes through links)")]
    assert (root / "a.py").is_symlink() and (tmp_path / "target.py").read_bytes() == CUDA


def test_vendored_runtime_is_written_whole(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    changes, note = vendor_changes(root / "porter_runtime", root)
    assert "vendored" in note and changes
    assert apply_changes(root, changes) == []  # how: tests/test_reliability.py
    for name, data in runtime_files().items():
        assert (root / "porter_runtime" / name).read_bytes() == data
    assert leftovers(root) == []
    assert sorted(p.name for p in root.iterdir()) == ["porter_runtime"]


# -- an interrupted run ------------------------------------------------------------------

def _program(i: int) -> bytes:
    body = "".join(f"    y{k} = torch.zeros({k}, device='cuda') + x.cuda()\n" for k in range(6))
    return (f'"""Module {i}."""\nimport torch\n\n\ndef step(x):\n{body}    return torch.device("cuda:0")\n'
            + "".join(f"CONST_{k} = {k} * {i}  # padding\n" for k in range(40))).encode()


def test_killed_write_leaves_every_file_old_or_new(tmp_path):
    """SIGKILL a --write run part-way: each file is byte-identical to the original or to
    the fully migrated version, no temp file is left as a .py, and a second run
    finishes the job exactly as an uninterrupted run would have."""
    # 150 files: the kill comes once 10 are written (one -j 1 run writes each as it is done,
    # about 70 ms of CPU apiece), so 140 files, some 10 s of porter's CPU, are the margin
    # before "porter finished before it could be killed"; more files only lengthen the two
    # whole runs (the reference and the second run).
    count = 150
    originals = {f"m{i:03d}.py": _program(i) for i in range(count)}
    victim, reference = tmp_path / "victim", tmp_path / "reference"
    for folder in (victim, reference):
        folder.mkdir()
        for name, data in originals.items():
            (folder / name).write_bytes(data)
    done = run_porter("migrate", reference, "--write", "-q")
    assert done.returncode == 0, done.stderr
    migrated = {name: (reference / name).read_bytes() for name in originals}
    assert all(migrated[n] != originals[n] for n in originals)

    proc = subprocess.Popen([sys.executable, "-m", "porter", "migrate", str(victim), "--write", "-j", "1", "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    written = 0
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            written = sum((victim / n).read_bytes() != d for n, d in originals.items())
            if written >= 10:
                break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "porter finished before it could be killed"
    assert 10 <= written < count

    states = {}
    for name, data in originals.items():
        now = (victim / name).read_bytes()
        assert now in (data, migrated[name]), f"{name} is neither old nor new"
        states[name] = "new" if now == migrated[name] else "old"
    assert "old" in states.values() and "new" in states.values()
    stray = leftovers(victim)
    assert not any(p.endswith(".py") for p in stray), stray
    for p in stray:  # a temp file the kill interrupted: never a .py, so never imported
        (victim / p).unlink()

    again = run_porter("migrate", victim, "--write", "-q")
    assert again.returncode == 0, again.stderr
    assert snapshot(victim) == snapshot(reference)


def test_a_rerun_vendors_a_missing_runtime(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_bytes(CUDA)
    assert run_porter("migrate", root, "--write", "-j", "1").returncode == 0
    shutil.rmtree(root / "porter_runtime")  # where the kill would have left it
    assert run_porter("migrate", root, "--write", "-j", "1").returncode == 0
    assert (root / "porter_runtime" / "__init__.py").exists()


def test_ctrl_c_during_a_write_takes_effect_once_the_file_is_whole(tmp_path, monkeypatch):
    """An interrupt that arrives while a file is written (here: at its fsync) is held
    until the rename is done, then raised: the file is new, whole, and no temporary
    file is left beside it (tests/test_harm.py sends a real Ctrl-C to a whole run)."""
    from porter.files import apply

    target = tmp_path / "train.py"
    target.write_bytes(b"old\n")
    real_fsync = os.fsync

    def interrupted_fsync(fd):
        os.kill(os.getpid(), signal.SIGINT)
        real_fsync(fd)

    monkeypatch.setattr(apply.os, "fsync", interrupted_fsync)
    with pytest.raises(KeyboardInterrupt):
        apply.apply_changes(tmp_path, [Change("train.py", b"old\n", b"new\n")])
    assert target.read_bytes() == b"new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
