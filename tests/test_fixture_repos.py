"""End to end on the CUDA-only fixture repositories in fixtures/repos/.

For each repository, on copies: the original entry points fail here with a CUDA error;
``porter migrate --diff`` applied with ``git apply`` gives exactly the tree ``--write``
gives; every entry point of the port then runs to completion on this CPU; a second run
changes nothing and ``--check`` passes.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from porter_test_utils import FIXTURES, python_without_porter, run_porter, snapshot

REPOS = FIXTURES / "repos"
#: Fixture repositories whose every construct porter ports today.
PORTED = ["multipkg"]


def manifest(name: str) -> dict:
    return json.loads((REPOS / name / "porter_fixture.json").read_text())


def run_entry(entry: dict, repo: Path, out: Path) -> subprocess.CompletedProcess:
    args = [c.replace("{out}", str(out)) for c in entry["cmd"]]
    assert args[0] == "python"
    cmd = python_without_porter(*args[1:])
    env = {**os.environ, **entry.get("env", {}), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(cmd, cwd=repo / entry.get("cwd", "."), env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("name", PORTED)
def test_fixture_repo_ports_and_runs(name, copy_tree, tmp_path):
    spec = manifest(name)
    original = copy_tree(REPOS / name, "original")
    for entry in spec["entry_points"]:
        out = tmp_path / "out-original"
        proc = run_entry(entry, original, out)
        assert proc.returncode != 0, f"{entry['cmd']} should fail unported"
        expected = entry.get("cuda_error", spec["expected_cuda_error"])
        assert any(e in proc.stderr for e in expected), proc.stderr[-2000:]

    ported = copy_tree(REPOS / name, "ported")
    by_diff = copy_tree(REPOS / name, "by-diff")
    untouched = {p: snapshot(ported)[p] for p in spec.get("must_not_change", []) if "::" not in p}
    assert run_porter("migrate", ported, "--check").returncode == 1
    subprocess.run(["git", "init", "-q"], cwd=by_diff, check=True)
    diff = run_porter("migrate", by_diff, "--diff")
    assert diff.returncode == 0, diff.stderr.decode()
    applied = subprocess.run(["git", "apply", "-"], cwd=by_diff, input=diff.stdout, capture_output=True)
    assert applied.returncode == 0, applied.stderr.decode()
    write = run_porter("migrate", ported, "--write")
    assert write.returncode == 0, write.stderr.decode()
    snap = snapshot(ported)
    assert snap == snapshot(by_diff)
    for path, content in untouched.items():
        assert snap[path] == content, f"{path} must not change"

    out = tmp_path / "out-ported"
    for entry in spec["entry_points"]:
        proc = run_entry(entry, ported, out)
        assert proc.returncode == 0, f"{entry['cmd']}:\n{proc.stderr[-3000:]}"
        for expected in entry.get("expects", []):
            assert Path(expected.replace("{out}", str(out))).exists(), expected

    assert run_porter("migrate", ported, "--write").returncode == 0
    assert snapshot(ported) == snap, "a second migration must change nothing"
    assert run_porter("migrate", ported, "--check").returncode == 0
