"""Issue 14's acceptance on fixtures/repos/mps_ready: a repository that already runs on
CPU and MPS (device picked at run time, gloo off CUDA, `module.` prefixes stripped
when loading) but still hard-codes CUDA in three lines.

The port changes exactly those lines and adds the runtime import, nothing else: the
changed lines of ``porter migrate --diff`` are compared as text. The vendored runtime's
own files are left out of the comparison, and so is the place of the added import
(where it goes is the import-style work's to decide; that there is exactly one is
checked here). The port then runs on this CPU, loads a DDP checkpoint through the
repository's own prefix stripping, and a second run finds nothing.
"""

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch

from porter_test_utils import FIXTURES, python_without_porter, run_porter, snapshot

REPO = FIXTURES / "repos" / "mps_ready"
SPEC = json.loads((REPO / "porter_fixture.json").read_text())
TRAIN, EVALUATE = SPEC["entry_points"]
IMPORT = "+import porter_runtime"

#: Every line the port removes and adds in the user's files, in diff order.
EXPECTED = {
    "evaluate.py": [
        '-    p.add_argument("--device", default="cuda")',
        '+    p.add_argument("--device", default=porter_runtime.device_str())',
    ],
    "train.py": [
        "-        torch.cuda.synchronize()  # the epoch's kernels are done: time them",
        "+        porter_runtime.synchronize()  # the epoch's kernels are done: time them",
        '-        print(f"peak memory {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")',
        '+        print(f"peak memory {porter_runtime.max_memory_allocated() / 2**20:.1f} MiB")',
    ],
}


def changed_lines(diff: str) -> dict[str, list[str]]:
    """The - and + lines of each file's section of a unified diff (runtime files left out)."""
    out: dict[str, list[str]] = {}
    for section in re.split(r"^(?=diff --git )", diff, flags=re.M):
        match = re.match(r"diff --git a/(\S+) b/", section)
        if match is None or match.group(1).startswith("porter_runtime/"):
            continue
        body = section.split("\n@@", 1)[1] if "\n@@" in section else ""
        out[match.group(1)] = [line for line in body.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    return out


def run(entry: dict, repo: Path, out: Path) -> subprocess.CompletedProcess:
    args = [c.replace("{out}", str(out)) for c in entry["cmd"]]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(python_without_porter(*args[1:]), cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_the_port_changes_only_the_lines_that_hard_code_cuda(copy_tree):
    repo = copy_tree(REPO, "diff")
    diff = run_porter("migrate", repo, "--diff")
    assert diff.returncode == 0, diff.stderr.decode()
    changed = changed_lines(diff.stdout.decode())
    assert set(changed) == set(EXPECTED)
    for path, lines in changed.items():
        assert lines.count(IMPORT) == 1, path
        assert [line for line in lines if line != IMPORT] == EXPECTED[path], path


@pytest.mark.slow
def test_the_port_runs_here_loads_a_ddp_checkpoint_and_a_second_run_finds_nothing(copy_tree, tmp_path):
    original = copy_tree(REPO, "original")
    ported = copy_tree(REPO, "ported")
    out = tmp_path / "out"
    proc = run(TRAIN, original, out)
    assert proc.returncode != 0 and "Torch not compiled with CUDA enabled" in proc.stderr, proc.stderr[-2000:]

    report = tmp_path / "port.json"
    assert run_porter("migrate", ported, "--write", "--report", report).returncode == 0
    data = json.loads(report.read_text())
    assert {r["code"]: (r["rewrites"], r["findings"]) for r in data["rules"]} == {
        "PT005": (1, 0), "PT101": (1, 0), "PT106": (1, 0)}
    snap = snapshot(ported)
    for path in SPEC["must_not_change"]:
        assert snap[path] == snapshot(original)[path], f"{path} must not change"

    proc = run(TRAIN, ported, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "peak memory 0.0 MiB" in proc.stdout  # the CPU keeps no allocator statistics
    proc = run(EVALUATE, original, out)
    assert proc.returncode != 0 and "Torch not compiled with CUDA enabled" in proc.stderr, proc.stderr[-2000:]

    # a checkpoint written under DDP on a GPU box: the repository's own loader strips `module.`
    state = torch.load(out / "model.pt")
    state["model"] = {f"module.{k}": v for k, v in state["model"].items()}
    torch.save(state, out / "model.pt")
    proc = run(EVALUATE, ported, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "eval.json").read_text())
    assert result["epochs"] == 2 and 0.0 <= result["accuracy"] <= 1.0

    assert run_porter("migrate", ported, "--write").returncode == 0
    assert snapshot(ported) == snap, "a second migration must change nothing"
    check = run_porter("migrate", ported, "--check")
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
