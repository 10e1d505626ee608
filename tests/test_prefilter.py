"""The pre-filters (porter/engine/prefilter/) never skip what a rule changes."""

import ast
import subprocess
import sys

import pytest

from porter.project.model import build_from
from porter.engine.process import Options, migrate_source
from porter.engine.prefilter import byte_candidates, candidate_rules, syntax_facts
from porter.engine.prefilter.byte_stage import _call_pattern
from porter.engine.registry import all_rules
from porter.rulebase.rule import Rule
from porter.rules import integer_devices

SOURCE_RULES = [r for r in all_rules() if issubclass(r, Rule)]
INVALID = [(rule, i, ex) for rule in SOURCE_RULES for i, ex in enumerate(rule.invalid)]
BY_CODE = {r.code: r for r in SOURCE_RULES}


@pytest.mark.parametrize("rule,index,example", INVALID, ids=[f"{r.code}-{i}" for r, i, _ in INVALID])
def test_every_invalid_example_passes_both_stages(rule, index, example):
    data = example.before.encode()
    if rule.needs.project is not None:  # with a model, the model alone decides (porter.engine.stages.python_stage)
        model = build_from({**{p: c.encode() for p, c in example.project}, example.path: data})
        assert rule.needs.project(model, example.path)
        return
    assert rule in byte_candidates(data, [rule])
    assert rule in candidate_rules(data, [rule])[0]


@pytest.mark.parametrize("text", [
    "torch.device(0)",
    "torch.device (0)",
    "torch.device  # why\n  (0)",
    "torch.device\\\n(0)",
    "torch . device . something(0)",
    "from torch import device as D",
    "from torch.device import x",
])
def test_a_call_is_seen_through_spacing_comments_continuations_and_aliases(text):
    assert _call_pattern(b"device").search(text.encode())


@pytest.mark.parametrize("text", ["x.device.type == 'cuda'", "mydevice(0)", "device_count()", "# device\n"])
def test_a_mere_mention_is_no_call(text):
    assert not _call_pattern(b"device").search(text.encode())


@pytest.mark.parametrize("code,expected", [
    ("import torch\ndev = torch.device(cfg.device)\n", True),  # PT006: a call
    ("import torch\nok = x.device.type == 'cuda' and isinstance(d, torch.device)\n", False),
])
def test_calls_only_targets_need_a_call_in_the_bytes(code, expected):
    assert (BY_CODE["PT006"] in byte_candidates(code.encode(), SOURCE_RULES)) is expected


@pytest.mark.parametrize("code,expected", [
    ("x = x.to(0)\n", True),
    ("x = x.to( # gpu\n    args.local_rank, non_blocking=True)\n", True),
    ("x = x.to(non_blocking=True, device=gpu_id)\n", True),
    ("torch.cuda.set_device(which)\nx = x.to(which)\n", True),
    ("x = x.to(dtype)\ny = y.to(other_tensor)\n", False),
    ("x = x.to(torch.float16)\n", False),
])
def test_integer_device_byte_pattern(code, expected):
    assert (BY_CODE["PT901"] in byte_candidates(code.encode(), [BY_CODE["PT901"]])) is expected


def test_index_evidence_from_a_name_call_reaches_pt901():
    # `set_device(which)` called by its own name still says `which` is a CUDA index.
    code = "from torch.cuda import set_device\nset_device(which)\nx = x.to(which)\n"
    rules, facts = candidate_rules(code.encode(), [BY_CODE["PT901"]])
    assert rules == [BY_CODE["PT901"]] and "which" in facts.passed_names("set_device", 0)


def test_the_rule_base_never_loads_the_prefilter():
    # The engine consults the pre-filter with each rule's `needs`; the rule base and
    # the rules only declare them.
    code = "import sys, porter.rulebase.rule, porter.rules.integer_devices; print('porter.engine.prefilter' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_retired_class_variable_is_refused():
    with pytest.raises(TypeError, match="calls_only"):
        type("Stale", (Rule,), {"code": "PT000", "calls_only": True})


def test_targets_are_the_needs_targets():
    assert all(rule.targets == rule.needs.targets for rule in SOURCE_RULES)


def test_call_facts_are_typed():
    facts = syntax_facts(ast.parse(
        "x.to(0)\ny.to('cuda:1', non_blocking=True)\nz.to(args.gpu)\nset_device(index=rank)\nf()(device='cpu')\n"))
    assert facts.passes_int("to", 0) and not facts.passes_int("to", 1)
    assert facts.passed_strings("to", 0) == {"cuda:1"} and facts.passed_names("to", 0) == {"gpu"}
    assert facts.passed_names("set_device", 0, "index") == {"rank"} and not facts.passed_names("set_device", 0)
    assert facts.passed_strings(keyword="device") == {"cpu"}  # any callee, by keyword
    assert facts.calls("to") and not facts.calls("cuda")


def test_no_position_is_recorded_past_a_star():
    facts = syntax_facts(ast.parse("x.to(*args, 0)\n"))
    assert not facts.passes_int("to", 0) and not facts.passes_int("to", 1)


def _index_uses():
    """Each CUDA-index evidence call of PT901's table, spelled by position and by keyword."""
    for use in integer_devices._INDEX_USES.values():
        head = [repr(use.first)] if use.first else []
        by_position = head + ["None"] * (use.position - len(head)) + ["which"]
        for args in (by_position, head + [f"{use.keyword}=which"]):
            yield f"obj.{use.call}({', '.join(args)})"


@pytest.mark.parametrize("evidence", list(_index_uses()))
def test_pt901_evidence_table_drives_the_visitor_and_both_filters(evidence):
    # One table says which calls use a name as a CUDA index: the byte and ast stages
    # let the file through, the LibCST visitor finds the evidence, in every unit layout.
    for code in (f"{evidence}\nx = x.to(which)\n", f"def f():\n    {evidence}\n\ndef g(x):\n    return x.to(which)\n"):
        rule = BY_CODE["PT901"]
        assert candidate_rules(code.encode(), [rule])[0] == [rule]
        result = migrate_source(code.encode(), Options(rules=[rule]), path="example.py")
        assert b"x.to(porter_runtime.device(which))" in result.new, code
