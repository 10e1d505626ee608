"""The rule pass: every rule a file needs, in one LibCST traversal.

A rewrite that lies in code only run where CUDA is, under a guard no rule ported, is
dropped and the pass runs again with that node kept as written (issue 14), at most
three times. The rules see the file through a :class:`porter.engine.stages.context.FileContext`.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import libcst as cst

from porter.edits.positions import locate
from porter.engine.stages.context import FileContext
from porter.engine.options import Options
from porter.engine.prefilter import SyntaxFacts
from porter.engine.stages.segments import Reduced
from porter.rulebase.conditions.guards import cuda_regions, guard_ported, parse
from porter.rulebase.matching import Resolver
from porter.rulebase.rule import Rule


def run_rules(
    module: cst.Module, data: bytes, path: str, options: Options, rules: Sequence[type[Rule]],
    facts: Optional[SyntaxFacts], reduced: Optional[Reduced],
) -> tuple[cst.Module, FileContext]:
    """The rewritten module and the context that holds the rules' records, after the
    passes that keep rewrites in CUDA-only code as written."""
    frozen: frozenset[cst.CSTNode] = frozenset()
    located: dict = {}
    for _ in range(3):
        ctx = FileContext(module, data, path, options, facts.imports if facts is not None else None, reduced)
        ctx.frozen, ctx.located = frozen, located
        new_module = module.visit(RuleRunner((rule(ctx) for rule in rules), ctx.resolver, ctx.replaced))
        more = cuda_only_rewrites(ctx, data)
        if not more:
            break
        frozen = frozen | more
    return new_module, ctx


def cuda_only_rewrites(ctx: FileContext, data: bytes) -> frozenset[cst.CSTNode]:
    """The rewritten nodes that lie in code only run where CUDA is (porter.rulebase.conditions.guards), under
    a guard no rule ported: issue 14's "no rewrite inside code that only runs on CUDA,
    unless its guard is ported too". Import guards (``try: import flash_attn``) don't
    count: porting the import is porting the guard."""
    nodes = [n for n in ctx.rewritten if n not in ctx.frozen]
    if not nodes or b"cuda" not in data:
        return frozenset()
    tree = parse(data)
    regions = [r for r in cuda_regions(tree, data) if r.kind == "device"] if tree is not None else []
    if not regions:
        return frozenset()
    missing = [n for n in nodes if n not in ctx.located]
    if missing:
        ctx.located.update(locate(ctx.module, missing))
    ranges = ctx.located
    line = ctx.reduced.original_line if ctx.reduced is not None else (lambda n: n)
    where = {n: ((line(ranges[n].start.line), ranges[n].start.column), (line(ranges[n].end.line), ranges[n].end.column))
             for n in nodes if n in ranges}
    open_regions = [r for r in regions if not guard_ported(r, (start for start, _ in where.values()))]
    return frozenset(n for n, span in where.items() if any(r.encloses(span) for r in open_regions))


#: Nodes whose only children are parentheses and the whitespace in them. The pass
#: doesn't step into them unless a rule visits those: LibCST then keeps the node as it
#: is instead of building and validating a copy of it.
_LEAVES = (cst.Name, cst.SimpleString, cst.Integer, cst.Float, cst.Imaginary, cst.Ellipsis)
_IN_LEAVES = frozenset({"LeftParen", "RightParen", "SimpleWhitespace", "ParenthesizedWhitespace",
                        "TrailingWhitespace", "EmptyLine", "Newline", "Comment"})


class RuleRunner(cst.CSTTransformer):
    """Runs many rules in one traversal, dispatching each node type to the rules
    that handle it, in the rules' order."""

    def __init__(self, rules: Iterable[Rule], resolver: Resolver, replaced: list) -> None:
        super().__init__()
        self._resolver = resolver
        #: (original node, what replaced it) for each node a rule replaced (filled in)
        self._replaced = replaced
        self._visitors: dict[type, list] = {}
        self._leavers: dict[type, list] = {}
        handled = set()
        for rule in rules:
            for attr in dir(type(rule)):
                if attr.startswith(("visit_", "leave_")):
                    kind = attr[6:]
                    handled.add(kind)
                    table = self._visitors if attr.startswith("visit_") else self._leavers
                    table.setdefault(getattr(cst, kind), []).append(getattr(rule, attr))
        self._leaves = frozenset() if handled & _IN_LEAVES else frozenset(_LEAVES)

    def on_visit(self, node: cst.CSTNode) -> bool:
        self._resolver.enter(node)
        kind = type(node)
        visitors = self._visitors.get(kind)
        if visitors:
            for visit in visitors:
                visit(node)
        return kind not in self._leaves

    # Rules never use LibCST's per-attribute hooks; skipping their lookup saves a
    # getattr per field of every node.
    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):  # type: ignore[override]
        result = self._leave(original_node, updated_node)
        self._resolver.leave(original_node)
        return result

    def _leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        leavers = self._leavers.get(type(original_node))
        if not leavers:
            return updated_node
        incoming = updated_node
        for leave in leavers:
            result = leave(original_node, updated_node)
            if not isinstance(result, type(original_node)):
                self._replaced.append((original_node, result))
                return result  # a rule replaced the node with another kind: stop here
            updated_node = result
        if updated_node is not incoming:
            self._replaced.append((original_node, updated_node))
        return updated_node
