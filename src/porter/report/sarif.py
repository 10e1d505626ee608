"""The migration report as SARIF 2.1.0, the format code-scanning services read.

Every rule porter has is listed in ``tool.driver.rules`` (id = the rule's stable code,
help = its documentation, the same text as ``porter explain``), so a rule keeps its
index and its help across runs. Each rewrite and each finding is one result; a file porter
could not process is a tool execution notification, not a result.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import Any

import porter
from porter.engine.registry import all_rules
from porter.report.explain import render

SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
_BASE = "SRCROOT"


def _rule(rule) -> dict[str, Any]:
    doc = rule.doc()
    help_text = render(rule)
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": doc.summary},
        "fullDescription": {"text": doc.sections.get("What", doc.summary)},
        "help": {"text": help_text, "markdown": help_text},
        "defaultConfiguration": {"level": "warning"},
        "properties": {"safety": rule.safety.value, "tags": ["porter", "portability", rule.safety.value]},
    }


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


def to_sarif(report: dict[str, Any]) -> dict[str, Any]:
    """SARIF 2.1.0 for a report built by :func:`porter.report.summary.build`."""
    rules = list(all_rules())
    index = {rule.code: i for i, rule in enumerate(rules)}
    results = []
    for entry in report["files"]:
        for action, key in (("rewrite", "rewrites"), ("review", "findings")):
            for item in entry[key]:
                result: dict[str, Any] = {
                    "ruleId": item["code"],
                    "level": "warning",
                    "message": {"text": _message(item, action)},
                    "locations": [_location(entry["path"], item)],
                    "properties": {"action": action},
                }
                if item["code"] in index:
                    result["ruleIndex"] = index[item["code"]]
                results.append(result)
    notifications = [
        {"level": "error", "message": {"text": entry["error"]}, "locations": [_location(entry["path"], None)]}
        for entry in report["files"] if entry["status"] == "error"
    ]
    run = {
        "tool": {"driver": {
            "name": "porter",
            "version": porter.__version__,
            "rules": [_rule(rule) for rule in rules],
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


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(to_sarif(report), indent=2, ensure_ascii=False) + "\n"
