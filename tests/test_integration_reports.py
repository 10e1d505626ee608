"""Reports for tools, through the real CLI: SARIF 2.1.0 (validated against the official
schema) and ``--format json`` on stdout."""

import json
from pathlib import Path

import jsonschema

from porter_test_utils import run_porter
from test_cli import SAMPLE, make_tree

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif-schema-2.1.0.json").read_text())

FILES = {
    **SAMPLE,
    "loader.py": "import torch\nfrom torch.utils.data import DataLoader\n"
                 "loader = DataLoader([1, 2], num_workers=2, collate_fn=lambda b: b)\n",
    "broken.py": "import torch\nx = torch.ones(1).cuda(\n",
}


def test_sarif_validates_against_the_official_schema(tmp_path):
    root = make_tree(tmp_path / "repo", FILES)
    out = tmp_path / "porter.report.sarif"
    proc = run_porter("migrate", root, "--report", out)
    assert proc.returncode == 2  # broken.py
    sarif = json.loads(out.read_text())
    jsonschema.validate(sarif, SCHEMA, cls=jsonschema.Draft4Validator)
    [run] = sarif["runs"]
    assert sarif["version"] == "2.1.0"
    rules = run["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert ids == sorted(ids) and "PT001" in ids
    by_path = {}
    for result in run["results"]:
        location = result["locations"][0]["physicalLocation"]
        by_path.setdefault(location["artifactLocation"]["uri"], []).append(result)
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    [model] = by_path["pkg/model.py"]
    assert model["ruleId"] == "PT002" and model["locations"][0]["physicalLocation"]["region"]["startLine"] == 2
    assert "porter_runtime.device()" in model["message"]["text"]
    assert {r["properties"]["action"] for r in by_path["loader.py"]} == {"review"}
    [failed] = run["invocations"][0]["toolExecutionNotifications"]
    assert failed["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "broken.py"
    assert run["invocations"][0]["executionSuccessful"] is False


def test_sarif_rule_help_is_the_rule_documentation(tmp_path):
    root = make_tree(tmp_path / "repo", SAMPLE)
    out = tmp_path / "porter.report.sarif"
    assert run_porter("migrate", root, "--report", out).returncode == 0
    rules = {r["id"]: r for r in json.loads(out.read_text())["runs"][0]["tool"]["driver"]["rules"]}
    explain = run_porter("explain", "PT001").stdout.decode()
    assert rules["PT001"]["help"]["text"] == explain.rstrip("\n") + "\n"  # echo adds a newline
    assert rules["PT001"]["name"] == "cuda-method" and rules["PT001"]["properties"]["safety"] == "safe"
    # Stable: the same ids and help in a second run over other files.
    other = make_tree(tmp_path / "other", {"x.py": "import torch\ntorch.cuda.synchronize()\n"})
    out2 = tmp_path / "other.sarif"
    run_porter("migrate", other, "--report", out2)
    assert json.loads(out2.read_text())["runs"][0]["tool"]["driver"]["rules"] == list(rules.values())


def test_format_json_prints_only_the_report_on_stdout(tmp_path):
    root = make_tree(tmp_path / "repo", SAMPLE)
    proc = run_porter("migrate", root, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["schema_version"] == 1 and data["summary"]["files_changed"] == 3
    assert b"files scanned" not in proc.stderr  # no summary table for scripts
    written = tmp_path / "r.json"
    run_porter("migrate", root, "--report", written)
    assert json.loads(written.read_text())["files"] == data["files"]


def test_format_json_and_diff_both_want_stdout(tmp_path):
    root = make_tree(tmp_path / "repo", SAMPLE)
    proc = run_porter("migrate", root, "--format", "json", "--diff")
    assert proc.returncode == 2 and b"--diff" in proc.stderr


def test_unknown_report_suffix_is_refused(tmp_path):
    root = make_tree(tmp_path / "repo", SAMPLE)
    proc = run_porter("migrate", root, "--report", tmp_path / "x.xml")
    assert proc.returncode == 2 and b".sarif" in proc.stderr
