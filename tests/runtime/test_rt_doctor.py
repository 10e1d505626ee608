"""porter doctor: a truthful report of this CPU-only machine, as tables and JSON."""
from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from click.testing import CliRunner

import porter_runtime
from porter.cli.doctor import doctor
from porter_runtime.attn import core as _attn_core

CHECK = {"type": "object", "required": ["name", "ok", "detail"],
         "properties": {"ok": {"type": "boolean"}, "name": {"type": "string"}}}
SCHEMA = {
    "type": "object",
    "required": ["porter_runtime", "torch", "devices", "resolved", "dtypes", "attention",
                 "compile", "distributed", "benchmark", "checks", "ok"],
    "properties": {
        "porter_runtime": {"const": porter_runtime.__version__},
        "torch": {"type": "object", "required": ["version", "build"]},
        "devices": {"type": "array", "items": {"type": "object",
                                               "required": ["type", "available", "count"]}},
        "resolved": {"type": "object", "required": ["device", "reason", "error"]},
        "dtypes": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["float64", "bfloat16", "float16"]}},
        "attention": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["ok", "max_abs_err", "errors"]}},
        "compile": {"type": "object", "required": ["will_compile", "can_set_up", "problem"]},
        "distributed": {"type": "object", "required": ["backend", "nccl", "gloo"]},
        "benchmark": {"type": "array", "items": {
            "type": "object", "required": ["device", "op", "ms", "speedup_vs_cpu"]}},
        "checks": {"type": "array", "items": CHECK, "minItems": 1},
        "ok": {"type": "boolean"},
    },
}


def _run(*args: str):
    result = CliRunner().invoke(doctor, list(args))
    return result, (json.loads(result.stdout) if "--json" in args else None)


def test_json_report_is_a_truthful_cpu_only_report():
    result, report = _run("--json")
    assert result.exit_code == 0, result.output
    jsonschema.validate(report, SCHEMA)
    assert report["ok"] is True
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["build"].startswith("CPU-only")
    assert {d["type"]: d["available"] for d in report["devices"]} == \
        {"cpu": True, "cuda": False, "mps": False, "xpu": False}
    assert report["resolved"]["device"] == "cpu"
    assert report["dtypes"] == {"cpu": {dt: {"ok": True, "error": None}
                                        for dt in ("float64", "bfloat16", "float16")}}
    assert report["attention"]["cpu"]["max_abs_err"] < 1e-4
    assert report["compile"]["on_by_default"] is False
    assert report["compile"]["will_compile"] is False
    assert report["distributed"]["backend"] == "gloo" and report["distributed"]["nccl"] is False
    ops = {(b["device"], b["op"].split()[0]) for b in report["benchmark"]}
    assert ops == {("cpu", "matmul"), ("cpu", "attention")}
    assert all(b["ms"] > 0 and b["speedup_vs_cpu"] == 1.0 for b in report["benchmark"])


def test_tables_go_to_stderr_and_name_every_section():
    result, _ = _run("--no-bench")
    assert result.exit_code == 0
    assert result.stdout == ""
    for title in ("porter doctor", "Devices", "Dtype probe", "Attention vs reference",
                  "Checks", "resolved device"):
        assert title in result.stderr


def test_a_wrong_attention_result_fails_the_check(monkeypatch):
    real = _attn_core.dense
    monkeypatch.setattr(_attn_core, "dense", lambda *a, **kw: real(*a, **kw) + 1.0)
    result, report = _run("--json", "--no-bench")
    assert result.exit_code == 1
    assert report["ok"] is False
    failed = [c["name"] for c in report["checks"] if not c["ok"]]
    assert failed == ["attention on cpu vs reference"]


def test_an_impossible_porter_device_fails_resolution(monkeypatch):
    monkeypatch.setenv("PORTER_DEVICE", "mps")
    result, report = _run("--json", "--no-bench")
    assert result.exit_code == 1
    assert report["resolved"]["device"] is None
    assert "not available" in report["resolved"]["error"]
    assert report["checks"][0] == {"name": "device resolution", "ok": False,
                                   "detail": report["resolved"]["error"]}


def test_porter_compile_opt_in_is_reported(monkeypatch):
    monkeypatch.setenv("PORTER_COMPILE", "1")
    _, report = _run("--json", "--no-bench")
    assert report["compile"]["PORTER_COMPILE"] is True
    assert report["compile"]["will_compile"] is report["compile"]["can_set_up"]


@pytest.mark.parametrize("args", [[], ["--json"]])
def test_python_dash_m_porter_runtime(args, capsys):
    from porter_runtime.__main__ import main

    assert main(args + ["--no-bench"]) == 0
    out = capsys.readouterr().out
    if args:
        assert json.loads(out)["ok"] is True
    else:
        assert "[ok] attention on cpu vs reference" in out
