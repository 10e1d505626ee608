"""The pre-filters (porter/prefilter.py) never skip what a rule changes."""

import pytest

from porter.prefilter import _call_pattern, byte_candidates, candidate_rules
from porter.registry import all_rules
from porter.rule import Rule

SOURCE_RULES = [r for r in all_rules() if issubclass(r, Rule)]
INVALID = [(rule, i, ex) for rule in SOURCE_RULES for i, ex in enumerate(rule.invalid)]
BY_CODE = {r.code: r for r in SOURCE_RULES}


@pytest.mark.parametrize("rule,index,example", INVALID, ids=[f"{r.code}-{i}" for r, i, _ in INVALID])
def test_every_invalid_example_passes_both_stages(rule, index, example):
    data = example.before.encode()
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
