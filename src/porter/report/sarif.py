"""The migration report as SARIF 2.1.0, the format code-scanning services read.

Every rule porter has is listed in ``tool.driver.rules`` (id = the rule's stable code,
help = its documentation, the same text as ``porter explain``), so a rule keeps its
index and its help across runs. Each rewrite and each finding is one result; a file porter
could not process is a tool execution notification, not a result.

Levels follow the finding: a finding for a human is a ``warning``, an informational one
(``severity: info``) and a rewrite porter makes itself are a ``note``; a rewrite carries
its ``fixes`` (porter.report.sarif_fixes) when the run saw the change. ``helpUri`` points into
porter's documentation when the installed porter names one (its Documentation URL).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

import porter
from porter.engine.registry import all_rules
from porter.report.explain import render
from porter.report.output_formats import severity
from porter.report.sarif_fixes import fixes_for

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_BASE = "SRCROOT"


_LEVEL = {"warning": "warning", "info": "note", "fix": "note", "error": "error"}


def docs_url() -> str:
    """The Documentation URL of the installed porter ("" when it names none)."""
    from importlib import metadata

    try:
        urls = metadata.metadata("porter").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return ""
    for entry in urls:
        label, _, url = entry.partition(",")
        if label.strip().lower() in ("documentation", "docs"):
            return url.strip()
    return ""


def _rule(rule, docs: str) -> dict[str, Any]:
    doc = rule.doc()
    help_text = render(rule)
    data = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": doc.summary},
        "fullDescription": {"text": doc.sections.get("What", doc.summary)},
        "help": {"text": help_text, "markdown": help_text},
        "defaultConfiguration": {"level": "warning" if rule.safety.value == "review" else "note"},
        "properties": {"safety": rule.safety.value, "tags": ["porter", "portability", rule.safety.value]},
    }
    if docs:
        data["helpUri"] = f"{docs.rstrip('/')}/rules/{rule.code}"
    return data


def _message(item: dict[str, Any], action: str) -> str:
    text = item["message"]
    if action == "rewrite" and item["before"] and item["after"]:
        text += f" (porter rewrites `{item['before']}` to `{item['after']}`)"
    elif item["suggestion"]:
        text += f" Suggestion: `{item['suggestion']}`"
    return text


def _location(path: str, item: dict[str, Any] | None) -> dict[str, Any]:
    # A URI reference: spaces, '#', '%', '?' and bytes outside ASCII percent-encoded.
    uri = urllib.parse.quote(os.fsencode(path), safe="/")
    physical: dict[str, Any] = {"artifactLocation": {"uri": uri, "uriBaseId": _BASE}}
    # A notebook's findings count lines inside a cell, not in the JSON file.
    if item is not None and not path.endswith(".ipynb"):
        physical["region"] = {"startLine": max(1, item["line"]), "startColumn": max(1, item["column"])}
    return {"physicalLocation": physical}


def to_sarif(report: dict[str, Any], edits: dict[str, list] | None = None, docs: str | None = None) -> dict[str, Any]:
    """SARIF 2.1.0 for a report built by :func:`porter.report.summary.build`; ``edits``: each
    changed file's replacements (porter.report.sarif_fixes), for the rewrites' ``fixes``."""
    rules = list(all_rules())
    index = {rule.code: i for i, rule in enumerate(rules)}
    edits = edits or {}
    results = []
    for entry in report["files"]:
        fixes = fixes_for(entry["rewrites"], edits.get(entry["path"], []))
        for action, key in (("rewrite", "rewrites"), ("review", "findings")):
            for n, item in enumerate(entry[key]):
                result: dict[str, Any] = {
                    "ruleId": item["code"],
                    "level": _LEVEL[severity(item, action)],
                    "message": {"text": _message(item, action)},
                    "locations": [_location(entry["path"], item)],
                    "properties": {"action": action},
                }
                if item["code"] in index:
                    result["ruleIndex"] = index[item["code"]]
                if action == "rewrite" and fixes[n]:
                    result["fixes"] = [_fix(entry["path"], item, fixes[n])]
                results.append(result)
    notifications = [
        {"level": "error", "message": {"text": entry["error"]}, "locations": [_location(entry["path"], None)]}
        for entry in report["files"] if entry["status"] == "error"
    ]
    run = {
        "tool": {"driver": {
            "name": "porter",
            "version": porter.__version__,
            "rules": [_rule(rule, docs_url() if docs is None else docs) for rule in rules],
        }},
        "originalUriBaseIds": {_BASE: {"uri": _root_uri(report["root"])}},
        "invocations": [{"executionSuccessful": not notifications, "toolExecutionNotifications": notifications}],
        "columnKind": "unicodeCodePoints",
        "results": results,
    }
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def _root_uri(root: str) -> str:
    from pathlib import Path

    uri = Path(root).absolute().as_uri()
    return uri if uri.endswith("/") else uri + "/"


def _fix(path: str, item: dict[str, Any], replacements: list) -> dict[str, Any]:
    text = f"{item['code']}: rewrite as porter --write does (porter --write also vendors porter_runtime)"
    return {"description": {"text": text},
            "artifactChanges": [{"artifactLocation": {"uri": path, "uriBaseId": _BASE},
                                 "replacements": replacements}]}


def dumps(report: dict[str, Any], edits: dict[str, list] | None = None) -> str:
    return json.dumps(to_sarif(report, edits), indent=2, ensure_ascii=False) + "\n"
