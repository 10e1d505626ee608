"""One file's state during the rule pass: what the rules recorded, and what they may ask.

``FileContext`` is the engine's :class:`porter.rulebase.rule.RuleContext` (what a rule sees) and
:class:`porter.edits.unused_imports.RulePass` (what the import clean-up reads afterwards). It turns
the records into findings once the pass is over, when positions are worth resolving.
"""

from __future__ import annotations

import re
from typing import NamedTuple, Optional, Sequence

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from porter.edits.positions import locate
from porter.engine.options import Options
from porter.engine.stages.segments import Reduced
from porter.rulebase.matching import ImportFacts, Resolver
from porter.rulebase.rule import INFO, Finding, Rule, WholeFile, one_line
from porter.rulebase.walk import nodes_of


class _Record(NamedTuple):
    """What a rule recorded, before positions are known."""

    rule: Rule
    node: cst.CSTNode
    action: str  # "rewrite" | "review"
    message: str
    after: Optional[cst.CSTNode]
    suggestion: str


class FileContext:
    """Per-file state shared by the rules of one pass."""

    def __init__(
        self, module: cst.Module, source: bytes, path: str, options: Options, facts: Optional[ImportFacts] = None,
        reduced: Optional[Reduced] = None,
    ) -> None:
        self.module = module
        #: the file's own bytes (rules may search them for file-wide evidence)
        self.source = source
        self.path = path
        self.unsafe_fixes = options.unsafe_fixes
        #: the repository-wide model (porter.project); None for one file alone
        self.project = options.project
        #: names read outside this source (Options.read_outside): their imports stay
        self.read_outside = options.read_outside
        self.resolver = Resolver(module, facts)
        self.needs_runtime = False
        #: set when ``module`` is the file with some definitions stubbed (porter.engine.stages.segments)
        self.reduced = reduced
        self._positions = None
        self._ignores = ignore_comments(reduced.data if reduced is not None else source)
        self._records: list[_Record] = []
        #: the records of each node (by identity: LibCST nodes hash by id)
        self._by_node: dict[cst.CSTNode, list[_Record]] = {}
        #: every node a rule rewrote, kept or not (porter.rulebase.conditions.guards decides which may stay)
        self.rewritten: list[cst.CSTNode] = []
        #: nodes whose rewrite is dropped: they lie in code that only runs on CUDA
        self.frozen: frozenset[cst.CSTNode] = frozenset()
        #: positions already worked out (by porter.rulebase.conditions.guards' check), shared by the passes
        self.located: dict = {}
        #: (original node, what replaced it) for each node the rule pass replaced
        self.replaced: list[tuple[cst.CSTNode, object]] = []

    def record(
        self,
        rule: Rule,
        node: cst.CSTNode,
        action: str,
        message: str,
        *,
        after: Optional[cst.CSTNode] = None,
        suggestion: str = "",
    ) -> None:
        if action == "rewrite":
            self.rewritten.append(node)
        if action == "rewrite" and after is not None and self._records:
            self._drop_overwritten(node, after)
        record = _Record(rule, node, action, message, after, suggestion)
        self._records.append(record)
        self._by_node.setdefault(node, []).append(record)

    def _drop_overwritten(self, node: cst.CSTNode, after: cst.CSTNode) -> None:
        """Forget the rewrites inside ``node`` that its new replacement threw away.

        Rules leave inner nodes first: when an outer rewrite is built from the original
        node (not from the already rewritten children), the inner rewrites are not in
        the output and must not be reported. One that survives keeps its record. A
        second rule rewriting the very same node keeps the first one's record only
        where the first one's new parts are still in the output (two rules each
        changing one keyword of a call); otherwise one change is reported once.
        """
        inside = _subtree(node)
        # Only a record of a node inside this one can be dropped: skip the scan of every
        # record otherwise (8,000 independent rewrites in one file made it quadratic).
        if not any(r.action == "rewrite" for n in inside for r in self._by_node.get(n, ())):
            return
        kept = _subtree(after)
        self._records = [
            r for r in self._records
            if not (r.action == "rewrite" and (
                (r.node is node and not _survives(r, after)) or
                (r.node is not node and r.node in inside and r.after not in kept)))
        ]
        self._by_node = {}
        for r in self._records:
            self._by_node.setdefault(r.node, []).append(r)

    def recorded(self) -> bool:
        """Whether any rule recorded a rewrite or a finding (porter.edits.unused_imports asks)."""
        return bool(self._records)

    def positions(self):
        """Every node's position (LibCST's full pass): only for files with
        ``# porter: ignore`` comments, where any node may need checking."""
        if self._positions is None:
            self._positions = MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)
        return self._positions

    def suppressed(self, node: cst.CSTNode, code: str) -> bool:
        """Whether a ``# porter: ignore`` comment on one of the node's lines covers ``code``."""
        if not self._ignores:
            return False
        span = self.positions()[node]
        for line in range(span.start.line, span.end.line + 1):
            codes = self._ignores.get(line)
            if codes is not None and (not codes or any(code.startswith(c) for c in codes)):
                return True
        return False

    def ignored(self, node: cst.CSTNode) -> bool:
        """Whether any ``# porter: ignore`` comment, whatever its codes, is on one of
        the node's lines: the import clean-up leaves such a statement as written."""
        if not self._ignores:
            return False
        span = self.positions()[node]
        return any(line in self._ignores for line in range(span.start.line, span.end.line + 1))

    def rewrites(self) -> list[tuple[Rule, cst.CSTNode]]:
        """(rule, original node) of each rewrite recorded so far, in order."""
        return [(r.rule, r.node) for r in self._records if r.action == "rewrite"]

    def rewrites_name(self, name: str) -> bool:
        """Whether the new code of a recorded rewrite names ``name`` (the runtime: a rule may
        build a runtime call and then report instead of applying it)."""
        return any(r.action == "rewrite" and r.after is not None
                   and any(n.value == name for n in nodes_of(r.after, cst.Name)) for r in self._records)

    def see_all_uses_of(self, names: Sequence[str]) -> None:
        """A use of ``names`` inside a definition left out (porter.engine.stages.segments) is invisible
        to a count over the module: only the whole file can tell (the engine catches
        WholeFile and parses the whole file)."""
        if self.reduced is not None and not self.reduced.stub_names.isdisjoint(names):
            raise WholeFile(", ".join(names))

    def see_whole_file(self, why: str) -> None:
        """Only the whole file gives the exact answer from here on (a search that reads
        the module's other definitions): a rule that needs it only for some nodes calls
        this when it meets one, instead of declaring ``Needs.whole_file``, so that files
        without such a node still parse only the definitions some rule wants."""
        if self.reduced is not None:
            raise WholeFile(why)

    def keeps(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` must stay as written: it only runs where CUDA is (a guard
        porter did not port), so a rewrite there changes nothing off CUDA."""
        return node in self.frozen

    def code_for(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def findings(self) -> list[Finding]:
        """Resolve positions (one metadata pass, only when something was recorded)."""
        if not self._records:
            return []
        wanted = {r.node for r in self._records}
        positions = {n: self.located[n] for n in wanted if n in self.located}
        if len(positions) < len(wanted):
            positions.update(locate(self.module, wanted - positions.keys()))
        out = []
        for rule, node, action, message, after, suggestion in self._records:
            start = positions[node].start
            out.append(
                Finding(
                    code=rule.code,
                    rule=rule.name,
                    path=self.path,
                    line=self.reduced.original_line(start.line) if self.reduced is not None else start.line,
                    column=start.column + 1,
                    action="review" if action == "note" else action,
                    message=message,
                    before=one_line(self.code_for(node)),
                    after=one_line(self.code_for(after)) if after is not None else "",
                    suggestion=suggestion,
                    severity=INFO if action == "note" else rule.severity if action == "review" else "",
                )
            )
        out.sort(key=lambda f: (f.line, f.column, f.code))
        return out


def _survives(record: _Record, later: cst.CSTNode) -> bool:
    """Whether every part ``record``'s rewrite changed is still in the code of the
    ``later`` rewrite of the same node (two rules each porting one keyword of a call)."""
    if record.after is None:
        return False
    parts = _changed_parts(record.node, record.after)
    if not parts or record.after in parts:
        return False
    code = _EMPTY.code_for_node(later)
    return all(_EMPTY.code_for_node(part) in code for part in parts)


_EMPTY = cst.Module(body=[])


def _changed_parts(before: cst.CSTNode, after: cst.CSTNode) -> list[cst.CSTNode]:
    """The smallest subtrees of ``after`` that differ from ``before``, matched child
    by child while the two have the same shape."""
    if after is before or after.deep_equals(before):
        return []
    old, new = before.children, after.children
    if type(before) is not type(after) or len(old) != len(new):
        return [after]
    return [part for o, n in zip(old, new) for part in _changed_parts(o, n)]


def _subtree(node: cst.CSTNode) -> set[cst.CSTNode]:
    found: set[cst.CSTNode] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        found.add(current)
        stack.extend(current.children)
    return found


_IGNORE = re.compile(rb"#\s*porter:\s*ignore(?:\[([A-Za-z0-9_, ]*)\])?")


def ignore_comments(source: bytes) -> dict[int, frozenset[str]]:
    """Line number → codes silenced there (empty: every code), from ``# porter: ignore``.

    Found by a cheap byte scan; a match inside a string literal would only make porter
    more cautious on that line.
    """
    if b"porter:" not in source:
        return {}
    found: dict[int, frozenset[str]] = {}
    for number, line in enumerate(source.splitlines(), 1):
        match = _IGNORE.search(line)
        if match:
            codes = match.group(1)
            found[number] = frozenset(c.strip().upper() for c in codes.decode().split(",") if c.strip()) if codes else frozenset()
    return found
