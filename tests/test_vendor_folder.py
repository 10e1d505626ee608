"""Issue 43: what porter keeps of the user's files around the vendored runtime, through
the real CLI: folders that only look like porter's leftovers, links inside the copy,
extended attributes and hard links of rewritten files; what it cleans (its own stale
leftovers), when it vendors at all, and who owns the copy when root runs it."""

import os
import subprocess
import time

import pytest

from porter_test_utils import run_porter

CUDA = b"import torch\nx = torch.ones(1).cuda()\n"
MORE = b"import torch\ntorch.cuda.synchronize()\ntorch.cuda.empty_cache()\n"


def port(root, *args):
    result = run_porter("migrate", root, "--write", "--no-progress", *args)
    assert result.returncode == 0, result.stderr.decode()
    return result


def test_a_folder_that_only_looks_like_porters_leftover_is_kept(tmp_path):
    (tmp_path / "train.py").write_bytes(CUDA)
    mine = tmp_path / ".porter_runtime.mine.porter-old"  # no marker: the user's
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me\n")
    tracked = tmp_path / ".porter_runtime.1234abcd.porter-old"  # porter's marker, but git tracks it
    tracked.mkdir()
    (tracked / "PORTER-OLD.txt").write_text("x\n")
    (tracked / "data.txt").write_text("tracked\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-f", tracked.name], cwd=tmp_path, check=True)
    port(tmp_path)
    (tmp_path / "more.py").write_bytes(MORE)
    port(tmp_path)  # re-vendors the copy: the old one is moved aside and removed
    assert (mine / "notes.txt").read_text() == "keep me\n"
    assert (tracked / "data.txt").read_text() == "tracked\n"
    assert sorted(p.name for p in tmp_path.glob(".porter_runtime.*")) == sorted([mine.name, tracked.name])


def test_a_link_the_user_added_inside_the_copy_survives_revendoring(tmp_path):
    (tmp_path / "train.py").write_bytes(CUDA)
    port(tmp_path)
    before = (tmp_path / "porter_runtime" / "__init__.py").read_bytes()
    (tmp_path / "porter_runtime" / "weights").symlink_to("../data", target_is_directory=True)
    (tmp_path / "porter_runtime" / "readme-link").symlink_to("README.md")
    (tmp_path / "more.py").write_bytes(MORE)
    port(tmp_path)
    assert (tmp_path / "porter_runtime" / "__init__.py").read_bytes() != before  # it was vendored again
    assert os.readlink(tmp_path / "porter_runtime" / "weights") == "../data"
    assert os.readlink(tmp_path / "porter_runtime" / "readme-link") == "README.md"


def test_extended_attributes_of_a_rewritten_file_are_kept(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(CUDA)
    try:
        os.setxattr(path, "user.origin", b"downloaded")
    except (OSError, AttributeError):
        pytest.skip("no user extended attributes on this file system")
    port(tmp_path)
    assert b"porter_runtime" in path.read_bytes()
    assert os.getxattr(path, "user.origin") == b"downloaded"


def test_a_hard_link_of_a_rewritten_file_sees_the_port(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(CUDA)
    outside = tmp_path.parent / f"{tmp_path.name}-link.py"
    os.link(path, outside)
    port(tmp_path)
    assert b"porter_runtime" in path.read_bytes()
    assert os.stat(path).st_ino == os.stat(outside).st_ino
    assert outside.read_bytes() == path.read_bytes()


def test_a_stale_partial_copy_of_a_killed_run_is_cleaned_by_the_next(tmp_path):
    (tmp_path / "train.py").write_bytes(CUDA)
    port(tmp_path)  # ported: the next run has nothing to vendor
    stale = tmp_path / ".porter_runtime.0badf00d.porter-partial"
    stale.mkdir()
    (stale / "PORTER-PARTIAL.txt").write_text("porter is writing this folder\n")
    (stale / "__init__.py").write_text("")
    old = time.time() - 3600
    os.utime(stale / "PORTER-PARTIAL.txt", (old, old))
    unmarked = tmp_path / ".porter_runtime.mine.porter-partial"
    unmarked.mkdir()
    port(tmp_path)
    assert not stale.exists()
    assert unmarked.is_dir()


def test_no_runtime_when_the_only_file_needing_it_is_not_written(tmp_path):
    path = tmp_path / "train.py"
    path.write_bytes(CUDA)
    path.chmod(0o444)  # porter refuses to write it
    result = run_porter("migrate", tmp_path, "--write", "--no-progress")
    assert result.returncode != 0 and b"read-only" in result.stderr + result.stdout
    assert path.read_bytes() == CUDA
    assert not (tmp_path / "porter_runtime").exists()
    assert not list(tmp_path.glob(".porter_runtime.*"))


def test_no_runtime_when_the_interactive_answer_is_no(tmp_path):
    (tmp_path / "train.py").write_bytes(CUDA)
    result = run_porter("migrate", tmp_path, "--interactive", "--no-progress", input=b"n\n" * 5)
    assert result.returncode in (0, 1), result.stderr.decode()
    assert (tmp_path / "train.py").read_bytes() == CUDA
    assert not (tmp_path / "porter_runtime").exists()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_a_port_run_as_root_leaves_the_copy_to_the_repository_owner(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "train.py").write_bytes(CUDA)
    for path in (repo, repo / "train.py"):
        os.chown(path, 4321, 4321)
    port(repo)
    owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in [repo / "porter_runtime", *(repo / "porter_runtime").rglob("*")]}
    assert owners == {(4321, 4321)}
