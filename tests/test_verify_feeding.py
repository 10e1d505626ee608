"""verify names a failure by a finding a few lines above it when that finding's statement
sets a name the failing statement reads, in the same function (it once said NOT NAMED
for an ``x.to(device)`` whose ``device = ...`` line three lines up carried the finding);
an unrelated statement, or one in another function, does not name it."""

from porter.verify.mapping import FindingIndex, map_failure

SOURCE = """\
import torch


def train(model, batch, rank):
    device = pick(rank)
    steps = 10
    model.train()
    out = model(batch.to(device))
    return out, steps


def other(batch):
    device = "cpu"
    return batch.to(device)
"""


def _index(tmp_path, findings):
    (tmp_path / "train.py").write_text(SOURCE)
    return FindingIndex(tmp_path, [dict(f, path="train.py", action="review", message="m") for f in findings])


def test_a_finding_on_the_statement_that_sets_a_name_the_failure_reads_names_it(tmp_path):
    index = _index(tmp_path, [{"code": "PT999", "line": 5}])
    mapping = map_failure([("train.py", 8)], [], index, "AssertionError: Torch not compiled with CUDA enabled")
    assert mapping.named and mapping.findings[0]["line"] == 5
    assert mapping.text() == "named by finding PT999 at train.py:5"


def test_an_unrelated_statement_or_another_function_does_not(tmp_path):
    index = _index(tmp_path, [{"code": "PT999", "line": 6}, {"code": "PT999", "line": 13}])
    mapping = map_failure([("train.py", 8)], [], index, "AssertionError: Torch not compiled with CUDA enabled")
    assert not mapping.named and mapping.text() == "CUDA: NOT NAMED by porter"
    later = map_failure([("train.py", 14)], [], index, "RuntimeError: cuda")
    assert later.named and later.findings[0]["line"] == 13  # its own function's line
