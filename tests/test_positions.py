"""``porter.edits.positions.locate`` gives the ranges LibCST's ``PositionProvider`` gives.

``locate`` answers from LibCST's public ``PositionProvider`` (no private module of LibCST
is imported: tests/test_house_limits.py); this holds its answers, for every node and for a
handful, to the provider's on real files."""

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from porter.edits.positions import locate

FIXTURES = Path(__file__).parent.parent / "fixtures" / "repos"
FILES = sorted(FIXTURES.rglob("*.py"))[:12]


class _Every(cst.CSTVisitor):
    def __init__(self) -> None:
        self.nodes: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.nodes.append(node)
        return True


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_locate_matches_the_position_provider(path):
    module = cst.parse_module(path.read_bytes())
    every = _Every()
    module.visit(every)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    assert locate(module, every.nodes) == {node: expected[node] for node in every.nodes}
    few = every.nodes[len(every.nodes) // 2::97]  # a handful, as the engine asks
    found = locate(module, few)  # (with the nodes a syntactic position starts or ends at)
    assert {node: found[node] for node in few} == {node: expected[node] for node in few}


def test_the_files_hold_code():
    assert len(FILES) >= 5
