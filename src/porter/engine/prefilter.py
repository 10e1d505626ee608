"""Deciding, before LibCST, which rules can match a file.

LibCST parses at Python speed; most files of a large repository hold nothing a rule
targets. Two cheap stages, both derived from what each rule declares in its ``needs``
(``porter.rulebase.needs.Needs``: targets, methods, words, strings, byte patterns and finer
filters), so there is one source of truth and a new rule can't be skipped by a stale
filter:

1. bytes: every needle of one of the rule's needle groups occurs in the raw bytes, and
   some rule's needles remain once comments and prose strings are out
   (``porter.rulebase.codeview``: a docstring's example is no use);
2. syntax: the stdlib ``ast`` (C speed) shows a node the rule could match: an import of
   a target's root module plus a use of its last name, a call of a declared method, a
   string constant a declared pattern matches.

Both stages are conservative: they may let through a file no rule changes, never the
other way round (tests/test_prefilter.py checks this against the rules' examples).

The facts are typed (``IntArg``, ``StrArg``, ``NameArg`` for what a call passes) and
rules read them through ``SyntaxFacts``' helpers (``passed_names``, ``passed_strings``,
``passes_int``, ``uses_any``), never through an encoding of their own.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Iterable, Iterator, NamedTuple, Optional, Sequence, Union

from porter.rulebase.codeview import code_view, prefilter_enabled
from porter.rulebase.matching import ImportFacts, ast_dotted_name, runtime_alias
from porter.rulebase.needs import Needs, literal_patterns
from porter.rulebase.rule import BYTES_GAP, Rule


class Needle(NamedTuple):
    """What one way for a rule to match needs in a file's bytes."""

    #: words that must all occur (as whole identifiers)
    words: frozenset
    #: the word that must be called (``c(``, ``c.d(``, ``c as``, ``from ...c import``), if any
    call: Optional[bytes] = None
    #: for a target ``a.b.c``: (``a``, ``c``), a use of ``c`` the file's imports of
    #: ``a`` can reach must occur (see ``ByteFilter``)
    use: Optional[tuple[bytes, bytes]] = None


def needles(rule: type[Rule]) -> list[Needle]:
    """Needle groups of ``rule``: words that must all occur in a file (as whole
    identifiers), the word that must be called there and the use that must occur, if any.

    Any use of ``a.b.c`` needs ``a`` (in its import) and ``c`` (in the use or in a
    ``from a.b import c``) somewhere in the file. A ``calls_only`` target and a method
    also need a call: ``c(``, ``c.d(`` (a call under it), ``c as`` (an alias) or
    ``from a.b.c import d`` (a name under it, called by that name).
    """
    needs = rule.needs
    extra = tuple(w.encode() for w in sorted(needs.words))
    found: list[Needle] = []
    for target in sorted(needs.targets):
        # ``import torch.cuda.nvtx as nv`` + ``nv.range()`` still spells every part.
        parts = tuple(dict.fromkeys(p.encode() for p in target.split(".")))
        found.append(Needle(frozenset(parts + extra), parts[-1] if needs.calls_only else None,
                            (parts[0], target.rsplit(".", 1)[-1].encode())))
    for method in sorted(needs.methods):
        found.append(Needle(frozenset((method.encode(),) + extra), method.encode()))
    if not found and (extra or needs.project is None):  # a model-driven rule with no words: never by bytes
        found.append(Needle(frozenset(extra)))
    return found


_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")


@lru_cache(maxsize=None)
def _call_pattern(word: bytes) -> "re.Pattern[bytes]":
    # The literal first (with the word boundary checked behind it) lets the regex
    # engine scan for the word at C speed. Whitespace includes line continuations.
    w = re.escape(word)
    return re.compile(w + rb"(?<=\b" + w + rb")(?:(?:" + BYTES_GAP + rb"\." + BYTES_GAP + rb"[A-Za-z_][A-Za-z0-9_]*)*+"
                      + BYTES_GAP + rb"(?:\(|import\b)|\s+as\b)")


@lru_cache(maxsize=None)
def _word_pattern(word: bytes) -> "re.Pattern[bytes]":
    return literal_patterns([word], whole_words=True)[0]


_IMPORT_WORD = re.compile(rb"import(?<=\bimport)\b")
_OPEN_PAREN = re.compile(rb"[ \t]*\(")
#: The dotted name right before an attribute (``torch.distributions.`` before
#: ``Poisson``), on one line; its first name is group 1.
_RECEIVER = re.compile(rb"([A-Za-z_][A-Za-z0-9_]*)(?:[ \t]*\.[ \t]*[A-Za-z_][A-Za-z0-9_]*)*[ \t]*\.[ \t]*\Z")
#: How far back a receiver is looked for; a longer one counts as a use.
_RECEIVER_REACH = 256


class _Imports:
    """The words of a file's import statements, by the module word each mentions."""

    def __init__(self, data: bytes) -> None:
        self.statements = []
        for match in _IMPORT_WORD.finditer(data):
            text = _statement(data, match.start(), match.end())
            self.statements.append(frozenset(_IDENTIFIER.findall(text)) | ({b"*"} if b"*" in text else set()))
        self._reaching: dict[bytes, frozenset] = {}

    def reaching(self, root: bytes) -> frozenset:
        """Every name an import that mentions ``root`` may bind (its words)."""
        if root not in self._reaching:
            self._reaching[root] = frozenset().union(*(s for s in self.statements if root in s))
        return self._reaching[root]


def _statement(data: bytes, start: int, end: int) -> bytes:
    """The import statement around the word ``import`` at ``start:end``: from its
    line's start to its line's end, across backslash continuations and through a
    parenthesized list of names (more than the statement is fine: only a superset of
    the names it binds is wanted)."""
    first = data.rfind(b"\n", 0, start) + 1
    while first > 1 and (data[first - 2:first - 1] == b"\\" or data[first - 3:first - 1] == b"\\\r"):
        first = data.rfind(b"\n", 0, first - 1) + 1
    paren = _OPEN_PAREN.match(data, end)
    if paren is not None:
        close = data.find(b")", paren.end())
        return data[first:close if close >= 0 else len(data)]
    last = end
    while True:
        last = data.find(b"\n", last)
        if last < 0:
            return data[first:]
        if data[last - 1:last] != b"\\" and data[last - 2:last] != b"\\\r":
            return data[first:last]
        last += 1


def _may_use(data: bytes, use: tuple[bytes, bytes], imports: _Imports) -> bool:
    """Whether some occurrence of ``last`` may be a use of a target ``root. ... .last``
    as the ``ast`` stage resolves one: a dotted name whose first name an import that
    mentions ``root`` binds (``torch.mode``, ``th.mode``, ``D.Poisson``), or the bare
    name where such an import binds it (``from torch import mode``). ``latent.mode()``
    and a keyword ``mode=`` are none."""
    root, last = use
    bound = imports.reaching(root)
    if not bound:
        return False
    if b"*" in bound:
        return True
    for match in _word_pattern(last).finditer(data):
        start = match.start()
        before = data[max(0, start - _RECEIVER_REACH):start]
        if not before.rstrip(b" \t").endswith(b"."):
            if last in bound:
                return True
            continue
        receiver = _RECEIVER.search(before)
        if receiver is None or (receiver.start() == 0 and start > _RECEIVER_REACH) or receiver.group(1) in bound:
            return True  # a receiver across lines or past the reach counts too
    return False


class ByteFilter:
    """The rules' needle words against the set of identifier-like words of a file:
    one C-speed scan per file, then set lookups (and, for a group that needs a call
    or a use, one regex search for that word, made once per file)."""

    def __init__(self, rules: Sequence[type[Rule]]) -> None:
        self.groups = [(rule, needles(rule)) for rule in rules]
        self.words = frozenset(w for _, groups in self.groups for g in groups for w in g.words)

    def candidates(self, data: bytes) -> list[type[Rule]]:
        present = self.words.intersection(_IDENTIFIER.findall(data))
        if not present:
            return []
        called: dict[bytes, bool] = {}
        used: dict[tuple[bytes, bytes], bool] = {}
        imports: list[_Imports] = []

        def is_called(word: bytes) -> bool:
            if word not in called:
                called[word] = _call_pattern(word).search(data) is not None
            return called[word]

        def is_used(use: tuple[bytes, bytes]) -> bool:
            if use not in used:
                if not imports:
                    imports.append(_Imports(data))
                used[use] = _may_use(data, use, imports[0])
            return used[use]

        out = []
        for rule, groups in self.groups:
            patterns = rule.needs.byte_patterns
            if any(g.words <= present and (g.call is None or is_called(g.call)) and (g.use is None or is_used(g.use))
                   for g in groups) and (not patterns or any(p.search(data) for p in patterns)):
                out.append(rule)
        return out


@lru_cache(maxsize=8)
def byte_filter(rules: tuple[type[Rule], ...]) -> ByteFilter:
    return ByteFilter(rules)


def byte_candidates(data: bytes, rules: Sequence[type[Rule]]) -> list[type[Rule]]:
    return byte_filter(tuple(rules)).candidates(data)


@dataclass(frozen=True, slots=True)
class IntArg:
    """An integer literal passed to a call (``x.to(0)``)."""

    value: int


@dataclass(frozen=True, slots=True)
class StrArg:
    """A string literal passed to a call (``x.to("cuda")``)."""

    value: str


@dataclass(frozen=True, slots=True)
class NameArg:
    """A name or attribute passed to a call, by its last name (``args.gpu`` → ``gpu``)."""

    name: str


Arg = Union[IntArg, StrArg, NameArg]
#: Where an argument was passed: its position (the first two) or its keyword.
Slot = Union[int, str]
#: The positions recorded: rules look at no later positional argument.
_POSITIONS = 2


@dataclass
class SyntaxFacts:
    """What one ``ast`` walk tells about a file."""

    names: set[str] = field(default_factory=set)  # Name ids, attribute names, imported names
    called_methods: set[str] = field(default_factory=set)
    strings: list[str] = field(default_factory=list)
    imports: ImportFacts = field(default_factory=ImportFacts)
    chains: set[str] = field(default_factory=set)  # dotted names used (``t.cuda.synchronize``)
    called_chains: set[str] = field(default_factory=set)  # dotted names called
    imported: set[str] = field(default_factory=set)  # what import statements name
    used: set[str] = field(default_factory=set)  # resolved qualified names and their prefixes
    called: set[str] = field(default_factory=set)  # the same, for called names only
    #: dotted names of calls whose result is moved at once (``f(x).to(...)``, ``f(x).cuda()``)
    moved_chains: set[str] = field(default_factory=set)
    moved: set[str] = field(default_factory=set)  # ``moved_chains`` resolved, as ``called``
    #: called name (a method's or function's last name; "" for any other callee) →
    #: what its calls pass: (slot, typed value). Read through ``passed`` and friends.
    call_args: dict[str, set[tuple[Slot, Arg]]] = field(default_factory=dict)
    #: keyword argument names of all calls
    keywords: set[str] = field(default_factory=set)
    #: strings compared (== / !=) with ``<x>.device.type`` or ``device.type``
    device_type_compares: set[str] = field(default_factory=set)
    #: a ``global`` / ``nonlocal`` statement: a stub of this unit would lose a binding
    rebinds: bool = False
    #: what the imports inside a top-level ``try`` import (``try: import xformers``)
    tried_imports: set[str] = field(default_factory=set)
    #: the functions and classes at module level (and, inside them, in class bodies)
    units: list["Unit"] = field(default_factory=list)

    def passed(self, call: Optional[str] = None, position: Optional[int] = None,
               keyword: Optional[str] = None) -> Iterator[Arg]:
        """What calls of ``call`` (by last name; None: any call) pass at ``position``
        (0 or 1) or as ``keyword=``."""
        groups = self.call_args.values() if call is None else (self.call_args.get(call, ()),)
        for group in groups:
            for slot, value in group:
                if slot == keyword or slot == position:
                    yield value

    def passed_names(self, call: Optional[str] = None, position: Optional[int] = None,
                     keyword: Optional[str] = None) -> set[str]:
        """The last names of the names and attributes ``passed`` there."""
        return {v.name for v in self.passed(call, position, keyword) if type(v) is NameArg}

    def passed_strings(self, call: Optional[str] = None, position: Optional[int] = None,
                       keyword: Optional[str] = None) -> set[str]:
        """The string literals ``passed`` there."""
        return {v.value for v in self.passed(call, position, keyword) if type(v) is StrArg}

    def passes_int(self, call: Optional[str] = None, position: Optional[int] = None,
                   keyword: Optional[str] = None) -> bool:
        """Whether an integer literal is ``passed`` there."""
        return any(type(v) is IntArg for v in self.passed(call, position, keyword))

    def calls(self, name: str) -> bool:
        """Whether something of this last name is called (``x.to(...)``, ``set_device(...)``)."""
        return name in self.call_args

    def uses_any(self, names: Iterable[str], calls_only: bool = False) -> bool:
        """A use (for ``calls_only``, a call) of one of the qualified ``names`` or of
        something under it (after ``resolve``)."""
        used = self.called if calls_only else self.used
        return any(name in used for name in names)

    def tries_import_under(self, roots: Iterable[str]) -> bool:
        """Whether a top-level ``try`` imports one of ``roots`` or something under it
        (an import chain, or a probe that sets an availability flag)."""
        return any(name == root or name.startswith(root + ".") for name in self.tried_imports for root in roots)

    def moves_result_of(self, names: Iterable[str]) -> bool:
        """A call of one of the qualified ``names`` whose result is moved at once:
        the receiver of a ``.to(...)`` or ``.cuda(...)`` call."""
        return any(name in self.moved for name in names)

    def merge(self, other: "SyntaxFacts") -> None:
        """Add what ``other`` (a unit of the same file, same ``imports``) holds: every
        set, list and dict of sets, so a new fact can't be left out of the merge."""
        for name in _MERGED:
            mine, theirs = getattr(self, name), getattr(other, name)
            if isinstance(mine, dict):
                for key, values in theirs.items():
                    mine.setdefault(key, set()).update(values)
            elif isinstance(mine, bool):
                setattr(self, name, mine or theirs)
            elif isinstance(mine, list):
                mine.extend(theirs)
            else:
                mine.update(theirs)

    def resolve(self) -> None:
        """Resolve the dotted names through the file's imports, as the engine's
        resolver will (where a name is also bound otherwise, every import it may
        stand for counts: the filter may only over-approximate)."""
        simple = self.imports.simple()

        def qualify(chains: set[str]) -> set[str]:
            out: set[str] = set()
            for chain in chains:
                root, _, rest = chain.partition(".")
                targets = {simple[root]} if root in simple else (
                    self.imports.module_imports.get(root, set()) | self.imports.nested_imports.get(root, set()))
                for target in targets:
                    out.update(_prefixes(f"{target}.{rest}" if rest else target))
            return out

        self.used = qualify(self.chains)
        for name in self.imported:
            self.used.update(_prefixes(name))
        self.called = qualify(self.called_chains)
        self.moved = qualify(self.moved_chains)


#: The facts a unit adds to its file's (``imports`` is shared, ``units`` is the file's
#: own list; ``used`` / ``called`` / ``moved`` are worked out again by ``resolve``).
_MERGED = tuple(f.name for f in fields(SyntaxFacts) if f.name not in ("imports", "units", "used", "called", "moved"))


@dataclass
class Unit:
    """A function or class definition: its lines (decorators included), and what
    an ``ast`` walk of it shows (for a class, of its own parts and, through
    ``children``, of the definitions in its body)."""

    node: ast.AST
    facts: SyntaxFacts
    children: list["Unit"] = field(default_factory=list)
    resolved: bool = False

    @property
    def first_line(self) -> int:
        decorators = getattr(self.node, "decorator_list", None)
        return min([d.lineno for d in decorators] + [self.node.lineno]) if decorators else self.node.lineno

    @property
    def last_line(self) -> int:
        return self.node.end_lineno  # type: ignore[attr-defined,return-value]

    def resolved_facts(self) -> SyntaxFacts:
        if not self.resolved:
            self.facts.resolve()
            self.resolved = True
        return self.facts


def _prefixes(dotted: str) -> list[str]:
    parts = dotted.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


_BINDERS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _module_level(tree: ast.Module):
    """Statements that run in the module's own scope (inside if/try/with/for, not def)."""
    stack = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, _BINDERS):
            continue
        for attr in _BODIES:
            stack.extend(reversed(getattr(node, attr, None) or []))


def _bound_by_import(alias: ast.alias) -> str:
    return alias.asname or alias.name.split(".")[0]


def _import_target(node: ast.AST, alias: ast.alias) -> str:
    if isinstance(node, ast.Import):
        return runtime_alias(alias.name) if alias.asname else alias.name.split(".")[0]
    module = "." * node.level + (node.module or "")  # type: ignore[attr-defined]
    return runtime_alias(f"{module}.{alias.name}" if node.module else f"{module}{alias.name}")


_TRIES = (ast.Try, ast.TryStar) if hasattr(ast, "TryStar") else (ast.Try,)


def _imported_under(node: ast.AST) -> Iterator[str]:
    """What every import in ``node`` (at any depth) imports."""
    for inner in ast.walk(node):
        if isinstance(inner, (ast.Import, ast.ImportFrom)):
            for alias in inner.names:
                if alias.name != "*":
                    yield _import_target(inner, alias)


def syntax_facts(tree: ast.Module) -> SyntaxFacts:
    facts = SyntaxFacts()
    imports = facts.imports
    top_level = set()
    for node in _module_level(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            top_level.add(id(node))
            for alias in node.names:
                if alias.name != "*":
                    imports.module_imports.setdefault(_bound_by_import(alias), set()).add(_import_target(node, alias))
    others = []
    for node in tree.body:
        if isinstance(node, _TRIES):
            facts.tried_imports.update(_imported_under(node))
        if isinstance(node, _BINDERS):
            facts.units.append(_unit(node, facts, top_level))
        else:
            others.append(node)
    _collect(facts, others, top_level)
    for unit in facts.units:
        facts.merge(unit.facts)
    facts.resolve()
    return facts


def _unit(node: ast.AST, file: SyntaxFacts, top_level: set) -> Unit:
    """One definition's facts; a class's body definitions become its children."""
    unit = Unit(node, SyntaxFacts(imports=file.imports))
    if not isinstance(node, ast.ClassDef):
        _collect(unit.facts, [node], top_level)
        return unit
    own: list = [*node.decorator_list, *node.bases, *node.keywords, *getattr(node, "type_params", ())]
    for child in node.body:
        if isinstance(child, _BINDERS):
            unit.children.append(_unit(child, file, top_level))
        else:
            own.append(child)
    file.imports.other_bindings.add(node.name)
    _collect(unit.facts, own, top_level)
    for child in unit.children:
        unit.facts.merge(child.facts)
    return unit


def _collect(facts: SyntaxFacts, roots: list, top_level: set) -> None:
    """Walk ``roots`` (and everything under them) into ``facts``: one loop, the common
    node types tested first (this walk is most of the ``ast`` stage's time)."""
    other = facts.imports.other_bindings
    names, chains, strings = facts.names, facts.chains, facts.strings
    stack = list(roots)
    pop, push, extend = stack.pop, stack.append, stack.extend
    Name, Attribute, Call, Constant, Load = ast.Name, ast.Attribute, ast.Call, ast.Constant, ast.Load
    while stack:
        node = pop()
        kind = type(node)
        if kind is Name:  # no children but its ctx
            names.add(node.id)
            if type(node.ctx) is Load:
                chains.add(node.id)
            else:
                other.add(node.id)
            continue
        if kind is Constant:  # no children
            if type(node.value) is str:
                strings.append(node.value)
            continue
        if kind is Attribute:
            names.add(node.attr)
            dotted = ast_dotted_name(node)
            if dotted is not None:
                chains.add(dotted)
            push(node.value)
            continue
        if kind is Call:
            _call_facts(node, facts)
        elif node is None:  # a dict's `**` entry has no key
            continue
        else:
            handler = _HANDLERS.get(kind)
            if handler is not None:
                handler(node, facts, other, top_level)
        for name in _child_fields(kind):
            value = getattr(node, name, None)
            if type(value) is list:
                extend(value)
            elif value is not None:
                push(value)


def _call_facts(node: ast.Call, facts: SyntaxFacts) -> None:
    func = node.func
    if isinstance(func, ast.Attribute):
        facts.called_methods.add(func.attr)
        name = func.attr
        if name in _MOVES and type(func.value) is ast.Call:
            moved = ast_dotted_name(func.value.func)
            if moved is not None:
                facts.moved_chains.add(moved)
    else:
        name = func.id if isinstance(func, ast.Name) else ""
    _record_args(node, facts.call_args.setdefault(name, set()))
    for kw in node.keywords:
        if kw.arg is not None:
            facts.keywords.add(kw.arg)
    dotted = ast_dotted_name(func)
    if dotted is not None:
        facts.called_chains.add(dotted)


#: The methods that move a tensor or module to a device (for ``SyntaxFacts.moved``).
_MOVES = frozenset({"to", "cuda"})


def _bind_name(node, facts, other, top_level) -> None:
    other.add(node.name)


def _bind_arg(node, facts, other, top_level) -> None:
    other.add(node.arg)


def _bind_optional_name(node, facts, other, top_level) -> None:
    if node.name:
        other.add(node.name)


def _bind_rest(node, facts, other, top_level) -> None:
    if node.rest:
        other.add(node.rest)


def _rebind(node, facts, other, top_level) -> None:
    other.update(node.names)
    facts.rebinds = True


def _import(node, facts, other, top_level) -> None:
    _import_facts(node, facts, nested=id(node) not in top_level)


def _compare(node, facts, other, top_level) -> None:
    _record_device_type_compare(node, facts.device_type_compares)


_HANDLERS = {
    ast.FunctionDef: _bind_name, ast.AsyncFunctionDef: _bind_name, ast.ClassDef: _bind_name,
    ast.arg: _bind_arg, ast.Global: _rebind, ast.Nonlocal: _rebind,
    ast.Import: _import, ast.ImportFrom: _import, ast.Compare: _compare,
    ast.ExceptHandler: _bind_optional_name, ast.MatchAs: _bind_optional_name,
    ast.MatchStar: _bind_optional_name, ast.MatchMapping: _bind_rest,
}

#: Fields that never hold a node: names, flags, numbers, strings (and what the walk
#: does not need: an expression's ``ctx``, an import's aliases).
_SCALAR_FIELDS = frozenset({"ctx", "id", "attr", "name", "names", "arg", "asname", "module", "level",
                            "is_async", "conversion", "kind", "type_comment", "rest", "tag", "kwd_attrs",
                            "simple", "lineno"})


@lru_cache(maxsize=None)
def _child_fields(kind: type) -> tuple[str, ...]:
    """The fields of a node type that may hold nodes (none for a value that is no
    node, should a newer Python add a scalar field this list lacks)."""
    skip = _SCALAR_FIELDS | ({"value"} if kind is ast.MatchSingleton else set())
    return tuple(f for f in getattr(kind, "_fields", ()) if f not in skip)


def _is_device_type(node: ast.AST) -> bool:
    if not isinstance(node, ast.Attribute) or node.attr != "type":
        return False
    inner = node.value
    return (isinstance(inner, ast.Attribute) and inner.attr == "device") or (
        isinstance(inner, ast.Name) and inner.id == "device")


def _record_device_type_compare(node: ast.Compare, found: set[str]) -> None:
    if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
        return
    for side, other in ((node.left, node.comparators[0]), (node.comparators[0], node.left)):
        if _is_device_type(side) and isinstance(other, ast.Constant) and isinstance(other.value, str):
            found.add(other.value)


def _record_args(call: ast.Call, found: set[tuple[Slot, Arg]]) -> None:
    """The call's first positional arguments (up to a ``*args``, after which no
    position is sure) and its keyword arguments, each a typed value when it is a
    literal, a name or an attribute."""
    for position, value in enumerate(call.args[:_POSITIONS]):
        if type(value) is ast.Starred:
            break
        arg = _arg(value)
        if arg is not None:
            found.add((position, arg))
    for kw in call.keywords:
        arg = _arg(kw.value) if kw.arg is not None else None
        if arg is not None:
            found.add((kw.arg, arg))


def _arg(value: ast.AST) -> Optional[Arg]:
    kind = type(value)
    if kind is ast.Name:
        return NameArg(value.id)  # type: ignore[attr-defined]
    if kind is ast.Attribute:
        return NameArg(value.attr)  # type: ignore[attr-defined]
    if kind is ast.Constant:
        constant = value.value  # type: ignore[attr-defined]
        if isinstance(constant, str):
            return StrArg(constant)
        if isinstance(constant, int):  # a bool too: a pre-filter may over-approximate
            return IntArg(constant)
    return None


def _import_facts(node, facts: SyntaxFacts, nested: bool) -> None:
    imports = facts.imports
    if isinstance(node, ast.ImportFrom):
        if node.module and not node.level:
            facts.names.update(node.module.split("."))
            facts.imported.update(f"{node.module}.{alias.name}" for alias in node.names if alias.name != "*")
            facts.imported.add(node.module)
        facts.names.update(alias.name for alias in node.names)
    else:
        facts.imported.update(alias.name for alias in node.names)
    for alias in node.names:
        if alias.name == "*":
            imports.star = True
            continue
        if isinstance(node, ast.Import):
            facts.names.update(alias.name.split("."))
        if nested:  # an import inside a def or class binds a local name
            imports.nested_imports.setdefault(_bound_by_import(alias), set()).add(_import_target(node, alias))


def syntax_match(rule: type[Rule], facts: SyntaxFacts) -> bool:
    """Whether the file has what ``rule`` declares it needs: a use (or, for
    ``calls_only`` rules, a call) of a target or of something under it, a call of one
    of its methods, a string constant its pattern matches, its own ``file_filter``."""
    needs = rule.needs
    if needs.strings is not None and not any(needs.strings.search(s) for s in facts.strings):
        return False
    if needs.file_filter is not None and not needs.file_filter(facts):
        return False
    if not needs.targets and not needs.methods:
        return True
    return uses_target(needs, facts)


def uses_target(needs: Needs, facts: SyntaxFacts) -> bool:
    """A use (for ``calls_only``, a call) of one of the targets or of something under
    it, or a call of one of the methods."""
    return facts.uses_any(needs.targets, needs.calls_only) or bool(needs.methods & facts.called_methods)


def unit_wanted(rule: type[Rule], unit: Unit, file: SyntaxFacts) -> bool:
    """Whether ``rule`` may act inside ``unit`` (its facts resolved), a function or
    class of the file whose facts are ``file``: the rule's ``unit_filter``, else a
    use of a target or a call of a method in the unit, else (for a rule with
    neither) its string pattern and ``file_filter`` in the unit."""
    needs = rule.needs
    if needs.unit_filter is not None:
        return needs.unit_filter(unit, file)
    if needs.targets or needs.methods:
        return uses_target(needs, unit.facts)
    return syntax_match(rule, unit.facts)


def parse_for_filter(data: bytes) -> Optional[ast.AST]:
    """The stdlib AST of ``data``, or None when Python can't parse it (LibCST then
    gives the per-file error). Shared with the guard pass and the ledger (porter.rulebase.guards)."""
    from porter.rulebase.guards import parse

    return parse(data)


#: Set to "0" to turn both stages off: every rule then sees every file, whole (no
#: facts, so no segments either), and the ledger scans every file its words are in.
#: The output is the same; only the time differs (tests/test_prefilter_equivalence.py
#: holds porter to that).


def words_only_in_text(data: bytes, candidates: Sequence[type[Rule]]) -> bool:
    """Whether every word the ``candidates`` (the rules the raw bytes let through)
    need lies in comments and prose strings, where no rule acts (``porter.rulebase.codeview``):
    the file then needs no parse at all."""
    code = code_view(data)
    return code is not None and code is not data and not ByteFilter(candidates).candidates(code)


def candidate_rules(data: bytes, rules: Sequence[type[Rule]]) -> tuple[list[type[Rule]], Optional[SyntaxFacts]]:
    """The rules that may match ``data``, and the file's syntax facts (None when
    Python can't parse the file: it keeps its byte candidates, so that LibCST reports
    the error with its position)."""
    if not prefilter_enabled():
        return list(rules), None
    candidates = byte_candidates(data, rules)
    if not candidates or words_only_in_text(data, candidates):
        return [], None
    tree = parse_for_filter(data)
    if tree is None:
        return candidates, None
    facts = syntax_facts(tree)
    return [rule for rule in candidates if syntax_match(rule, facts)], facts
