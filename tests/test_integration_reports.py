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
    "run_loader.sh": "python loader.py\n",  # what runs loader.py (a module nothing runs has notes only)
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


def _apply(text: str, replacements: list) -> str:
    """SARIF replacements of whole lines (column 1 to column 1), as a viewer applies them."""
    lines = text.splitlines(keepends=True)
    for r in sorted(replacements, key=lambda r: -r["deletedRegion"]["startLine"]):
        region = r["deletedRegion"]
        assert region["startColumn"] == region["endColumn"] == 1
        lines[region["startLine"] - 1:region["endLine"] - 1] = [r["insertedContent"]["text"]]
    return "".join(lines)


def test_sarif_levels_and_fixes_that_make_what_write_makes(tmp_path):
    files = {**FILES, "multi.py": "import torch\n\nx = torch.ones(1).cuda()\n\n\n\ny = torch.zeros(1).cuda()\n"}
    files.pop("broken.py")
    root = make_tree(tmp_path / "repo", files)
    out = tmp_path / "porter.report.sarif"
    assert run_porter("migrate", root, "--report", out).returncode == 0
    sarif = json.loads(out.read_text())
    jsonschema.validate(sarif, SCHEMA, cls=jsonschema.Draft4Validator)
    [run] = sarif["runs"]
    levels = {(r["ruleId"], r["level"]) for r in run["results"]}
    assert ("PT404", "warning") in levels and ("PT001", "warning") in levels  # a human's item / a fix
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert rules["PT404"]["defaultConfiguration"]["level"] == "warning"
    assert rules["PT001"]["defaultConfiguration"]["level"] == "warning"
    assert rules["PT801"]["defaultConfiguration"]["level"] == "note"  # its findings are notes
    fixed = {}
    for result in run["results"]:
        uri = result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert ("fixes" in result) == (result["properties"]["action"] == "rewrite")
        for fix in result.get("fixes", []):
            [change] = fix["artifactChanges"]
            assert change["artifactLocation"]["uri"] == uri
            fixed.setdefault(uri, []).extend(r for r in change["replacements"] if r not in fixed.get(uri, []))
    first = [r for r in run["results"] if r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
             == "multi.py"][0]
    # the first rewrite's fix alone holds the runtime import: it makes valid code by itself
    assert "import porter_runtime" in json.dumps(first["fixes"])
    before = {uri: (root / uri).read_text() for uri in fixed}
    assert run_porter("migrate", root, "--write").returncode == 0
    for uri, replacements in fixed.items():
        assert _apply(before[uri], replacements) == (root / uri).read_text(), uri


def test_sarif_help_uri_per_rule_is_its_page_on_the_documentation_site(tmp_path):
    from porter.engine.registry import all_rules
    from porter.report.sarif import DOCS_URL

    root = make_tree(tmp_path / "repo", SAMPLE)
    proc = run_porter("migrate", root, "--output-format", "sarif")
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA, cls=jsonschema.Draft4Validator)
    rules = data["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == [r.code for r in all_rules()]
    assert all(r["helpUri"] == f"{DOCS_URL}rules/{r['id']}/" for r in rules)  # tests/test_docs.py: the pages


INFO_AND_FAILURE = {
    **SAMPLE,
    "loader.py": FILES["loader.py"],
    "eigh.py": "import torch\nw = torch.linalg.eigh(torch.ones(2, 2))\n",  # PT801: a note (severity info)
    "broken.py": FILES["broken.py"],
    "run_loader.sh": FILES["run_loader.sh"],
}


def _github_levels(out: str) -> dict:
    levels = {}
    for line in out.splitlines():
        kind, _, rest = line[2:].partition(" ")
        props = dict(p.split("=", 1) for p in rest.split("::")[0].split(","))
        key = (props["file"], int(props.get("line", 0)), int(props.get("col", 0)), props["title"])
        levels.setdefault(key, set()).add(kind)
    return levels


def test_sarif_levels_are_the_github_annotations_levels(tmp_path):
    """One mapping for both formats: a rewrite and a finding for a human are warnings, an
    informational finding a note (GitHub's ``notice``), a failed file an error."""
    root = make_tree(tmp_path / "repo", INFO_AND_FAILURE)
    github = run_porter("migrate", root, "--output-format", "github").stdout.decode()
    sarif = json.loads(run_porter("migrate", root, "--output-format", "sarif").stdout)
    [run] = sarif["runs"]
    spelled = {"note": "notice", "warning": "warning", "error": "error"}
    from_sarif = {}
    for result in run["results"]:
        location = result["locations"][0]["physicalLocation"]
        key = (location["artifactLocation"]["uri"], location["region"]["startLine"],
               location["region"]["startColumn"], result["ruleId"])
        from_sarif.setdefault(key, set()).add(spelled[result["level"]])
    from_github = _github_levels(github)
    failed = {key: kinds for key, kinds in from_github.items() if key[3] == "porter"}
    assert failed == {("broken.py", 0, 0, "porter"): {"error"}}
    [notification] = run["invocations"][0]["toolExecutionNotifications"]
    assert notification["level"] == "error"
    del from_github[("broken.py", 0, 0, "porter")]
    assert from_sarif == from_github
    kinds = {kind for values in from_sarif.values() for kind in values}
    assert kinds == {"warning", "notice"}, from_sarif
    assert {key[3] for key, values in from_sarif.items() if "notice" in values} == {"PT801"}


def test_sarif_fix_uris_are_escaped_relative_uri_references(tmp_path):
    """A fix names its file as the result's location does: a relative URI reference with
    spaces, '#', '%' and non-ASCII characters percent-encoded."""
    from urllib.parse import unquote

    name = "my dir/a b#1%2é.py"
    root = make_tree(tmp_path / "repo", {"requirements.txt": "torch\n", name: SAMPLE["train.py"]})
    proc = run_porter("migrate", root, "--output-format", "sarif")
    sarif = json.loads(proc.stdout)
    jsonschema.validate(sarif, SCHEMA, cls=jsonschema.Draft4Validator)
    results = sarif["runs"][0]["results"]
    fixes = [change for r in results for fix in r.get("fixes", []) for change in fix["artifactChanges"]]
    assert fixes, results
    expected = "my%20dir/a%20b%231%252%C3%A9.py"
    for change in fixes:
        assert change["artifactLocation"] == {"uri": expected, "uriBaseId": "SRCROOT"}
    assert unquote(expected) == name
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {expected}


GOLDEN = Path(__file__).parent / "data" / "report_golden.md"
PR_TREE = {
    "requirements.txt": "torch\n",
    "train.py": "import torch\nfrom data import loader\nfrom model import Net\n\nnet = Net().cuda()\ntorch.cuda.synchronize()\n",
    "model.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
                "        return x.to('cuda')\n",
    "data.py": "from torch.utils.data import DataLoader\n\n\ndef loader(ds):\n"
               "    return DataLoader(ds, num_workers=2, collate_fn=lambda b: b)\n",
    "broken.py": "import torch\nx = torch.ones(1).cuda(\n",
}


def test_markdown_report_is_a_pr_description_golden(tmp_path):
    """The Markdown report, byte for byte (PORTER_UPDATE_GOLDEN=1 writes the golden file)."""
    import os

    root = make_tree(tmp_path / "repo", PR_TREE)
    out = tmp_path / "port.md"
    proc = run_porter("migrate", root, "--write", "--report", out)
    assert proc.returncode == 2  # broken.py
    text = out.read_text()
    if os.environ.get("PORTER_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert str(tmp_path) not in text and "/tmp" not in text  # no machine paths
    assert text == GOLDEN.read_text()


def test_markdown_report_lists_real_items_first(tmp_path):
    from porter.report.markdown import to_markdown

    root = make_tree(tmp_path / "repo", PR_TREE)
    report = tmp_path / "r.json"
    run_porter("migrate", root, "--report", report)
    data = json.loads(report.read_text())
    [entry] = [f for f in data["files"] if f["path"] == "data.py"]
    info = {**entry["findings"][0], "code": "PT998", "line": 1, "message": "an import not installed", "severity": "info"}
    entry["findings"].insert(0, info)
    text = to_markdown(data)
    assert "## Needs a human (1)" in text
    assert text.index("**PT404**") < text.index("For information (1") < text.index("**PT998**")
    # the diff is not repeated line by line: no before/after of each rewrite
    assert ".cuda()" not in text.split("## Needs a human")[0].split("## What changed and why")[1].split("|---|")[1]
