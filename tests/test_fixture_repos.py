"""End to end on the CUDA-only fixture repositories in fixtures/repos/.

For each repository, on copies: the original entry points fail here with a CUDA error;
``porter migrate --diff`` applied with ``git apply`` gives exactly the tree ``--write``
gives; every entry point of the port then runs to completion on this CPU with no manual
edit (the entry points chain through ``{out}``: what the ported trainer saves, the ported
eval / generate / infer script loads); a second run changes nothing; the report's
findings are exactly the items left for a human (none of them also rewritten), and
``--check`` exits 1 only for them.
"""

import json
import os
from collections import Counter
import subprocess
from pathlib import Path

import pytest

from porter_test_utils import FIXTURES, python_without_porter, run_porter, snapshot

REPOS = FIXTURES / "repos"
#: Fixture repositories whose every construct porter ports today.
PORTED = ["multipkg", "chat_lm", "cifar_cnn", "llm_scratch", "act_probe", "hrm_reasoning", "paper_repro"]

#: What each port leaves for a human: (path, rule code, code quoted) -> how many.
MANUAL = {
    "hrm_reasoning": {("config/cfg_pretrain.yaml", "PT701", "device: cuda"): 1},
    # One process per GPU (the 2-process gloo run on this CPU is an entry point); a 4-bit
    # BitsAndBytesConfig, paged optimizers and DeepSpeed have no exact equivalent off CUDA
    # (load_in_8bit=True is ported: porter_runtime.quantized_load).
    "paper_repro": {
        ("scripts/launch.sh", "PT702",
         'torchrun --standalone --nproc_per_node="$NGPUS" train.py --config configs/tiny.json "$@"'): 1,
        ("hf_finetune.py", "TP703", 'BitsAndBytesConfig( load_in_4bit=True, bnb_4bit_quant_type="nf4", '
                                    'bnb_4bit_compute_dtype=torch.bfloat16, )'): 1,
        ("hf_finetune.py", "TP705", 'optim="paged_adamw_32bit",'): 1,
        ("hf_finetune.py", "TP705", "deepspeed=args.deepspeed,"): 1,
    },
}
#: What each port lists for information only (a note: the exit code stays 0).
NOTES = {
    # The token arrays are int64 (fine on MPS), made in another module: nothing in the
    # moving file shows the dtype, so PT605 lists a note, not a finding.
    "act_probe": {
        ("act_probe/capture.py", "PT605", "torch.from_numpy(tokens[start:start + args.batch_size])"): 1,
        ("act_probe/infer.py", "PT605", "torch.from_numpy(tokens)"): 1,
    },
}


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


def report_items(report: Path, kind: str) -> Counter:
    data = json.loads(report.read_text())
    return Counter((f["path"], item["code"], item["before"]) for f in data["files"] for item in f[kind])


def report_lines(report: Path, kind: str) -> set:
    data = json.loads(report.read_text())
    return {(f["path"], item["code"], item["line"]) for f in data["files"] for item in f[kind]}


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
    first = tmp_path / "first.json"
    write = run_porter("migrate", ported, "--write", "--report", first)
    assert write.returncode == 0, write.stderr.decode()
    manual = Counter(MANUAL.get(name, {}))
    listed = manual + Counter(NOTES.get(name, {}))
    assert report_items(first, "findings") == listed
    assert not report_lines(first, "findings") & report_lines(first, "rewrites"), "a finding for a rewrite"
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
        for path, fields in entry.get("expects_json", {}).items():
            data = json.loads(Path(path.replace("{out}", str(out))).read_text())
            assert {k: data.get(k) for k in fields} == fields, f"{path}: {proc.stdout[-2000:]}"

    assert run_porter("migrate", ported, "--write").returncode == 0
    assert snapshot(ported) == snap, "a second migration must change nothing"
    second = tmp_path / "second.json"
    check = run_porter("migrate", ported, "--check", "--report", second)
    assert report_items(second, "rewrites") == Counter()
    assert report_items(second, "findings") == listed
    assert check.returncode == (1 if manual else 0), check.stderr.decode()
