"""porter.rulebase.walk finds what a LibCST visitor pass finds; porter.rulebase.conditions.guards parses a file once."""

from pathlib import Path

import libcst as cst
import pytest

from porter.rulebase.conditions import guards
from porter.rulebase.walk import _TRIVIA, nodes_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FILES = sorted(FIXTURES.rglob("*.py"))


class _Everything(cst.CSTVisitor):
    def __init__(self) -> None:
        self.seen: set[int] = set()

    def on_visit(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, _TRIVIA):
            self.seen.add(id(node))
        return True


def test_there_are_fixture_files():
    assert len(FILES) > 20


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(FIXTURES)) for p in FILES])
def test_nodes_of_finds_every_node_a_visitor_sees(path):
    try:
        module = cst.parse_module(path.read_bytes())
    except cst.ParserSyntaxError:
        pytest.skip("not Python LibCST parses")
    visitor = _Everything()
    module.visit(visitor)
    assert {id(n) for n in nodes_of(module, cst.CSTNode) if not isinstance(n, _TRIVIA)} == visitor.seen


def test_nodes_of_yields_only_the_types_asked_for():
    module = cst.parse_module("x = f(a, g(b))  # f(c)\nif y:\n    z = 'f(d)'\n")
    assert sorted(cst.Module([]).code_for_node(n) for n in nodes_of(module, cst.Call)) == ["f(a, g(b))", "g(b)"]
    assert len(list(nodes_of(module, (cst.Assign, cst.If)))) == 3


def test_the_same_bytes_are_parsed_once():
    data = b"import torch\nif torch.cuda.is_available():\n    x = 1\n"
    tree = guards.parse(data)
    assert guards.parse(bytes(bytearray(data))) is tree  # equal bytes, another object
    assert guards.parse(data + b"y = 2\n") is not tree
    assert guards.parse(b"def (:\n") is None
