"""Where device values go across the repository: a small lattice and its fixpoint (issue 27).

Each expression the model can follow gets one :class:`Kind`: a CUDA index (``rank %
torch.cuda.device_count()``, ``torch.cuda.current_device()``, ``int(os.environ["LOCAL_RANK"])``,
a name the code passes to ``torch.cuda.set_device``), a list of them (``gpu_ids``, what
``device_ids=`` takes), a CUDA string, a resolved device. Two different kinds meet in
UNKNOWN. Values flow through assignments, attributes (by attribute name, whatever the
object: a field-based analysis, the cheapest that follows ``self.gpu_ids = opt.gpu_ids``)
and the arguments of calls to the repository's own functions, methods and classes.

The builder parses with ``ast`` only the files that can matter: those that hold a CUDA
index source or sink (a byte search), then, until nothing new turns up, those that
define a function a known value is passed to or that read an attribute holding one.
Most files of a large tree are never parsed. The result, :class:`FlowFacts`, is plain
picklable data keyed by (file, function qualname) and read by rules through
:mod:`porter.flow_query`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Iterator, Mapping, Optional

from porter.project import word_search
from porter.project.returns import Returns, returned as _returned
from porter.project.value_kinds import (  # noqa: F401  (Kind and the facts are this module's API too)
    Callee,
    FlowFacts,
    Kind,
    Scope,
    dotted,
    evidence,
    join,
    source_kind,
    string_evidence,
)

_TRIGGER = (b"device_count", b"current_device", b"LOCAL_RANK", b"set_device", b"device_ids")
_MAX_FILES = 400  # bound on the files parsed, whatever the tree
_MAX_CALLERS = 30  # files calling one callee, past which its parameters are not followed
#: Method names of torch's own classes: a call of one is torch's, not a repository
#: class's that happens to share the name (``x.to(i)``, ``net.cuda(i)``).
_TORCH_METHODS = frozenset({"to", "cuda", "cpu", "type", "forward", "__call__", "__init__"})
#: The kinds whose attributes and calls bring more files in (a resolved device is
#: everywhere in a large tree, and needs no port).
_FOLLOWED = (Kind.INDEX, Kind.INDEX_LIST)


@dataclass
class _Function:
    scope: Scope
    node: ast.AST  # FunctionDef, or the Module for module scope
    params: tuple[str, ...] = ()
    method: bool = False
    #: the nodes of its own body the sweeps look at (kept: a sweep runs several times)
    nodes: tuple = ()
    defaults: dict = field(default_factory=dict)  # parameter -> its default expression


def _functions(rel: str, tree: ast.Module) -> Iterator[_Function]:
    yield _Function((rel, ""), tree)

    def walk(body, prefix: str, in_class: bool) -> Iterator[_Function]:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = f"{prefix}{node.name}"
                args = node.args
                positional = [*args.posonlyargs, *args.args]
                params = tuple(a.arg for a in (*positional, *args.kwonlyargs))
                defaults = dict(zip([a.arg for a in positional][len(positional) - len(args.defaults):], args.defaults))
                defaults.update((a.arg, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)
                yield _Function((rel, qual), node, params, in_class, defaults=defaults)
                yield from walk(node.body, qual + ".", False)
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.", True)
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                yield from walk([*getattr(node, "body", []), *getattr(node, "orelse", [])], prefix, in_class)

    yield from walk(tree.body, "", False)


def _own_nodes(function: _Function) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the definitions nested in it."""
    stack = list(ast.iter_child_nodes(function.node))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


_SWEPT = (ast.Assign, ast.Call, ast.JoinedStr, ast.BinOp, ast.Return)


class _Builder:
    def __init__(self, sources: Mapping[str, bytes]) -> None:
        self.sources = sources
        self.parsed: dict[str, list[_Function]] = {}
        self.facts = FlowFacts()
        self.changed = False
        self.defaults: dict[Scope, dict] = {}
        self.functions: dict[Scope, _Function] = {}
        #: (scope, name) a CUDA-index use in the code itself proves, whatever the callers pass
        self.proven: set[tuple[Scope, str]] = set()
        #: (scope, parameter) some call site passes something else to: never followed
        self.blocked: set[tuple[Scope, str]] = set()
        self.blocked_attrs: set[str] = set()
        #: the values a repository function returns (returns.py): found again each sweep
        self.returns = Returns()

    # -- the lattice over one scope ------------------------------------------
    def kind(self, node: ast.AST, scope: Scope) -> Optional[Kind]:
        own = source_kind(node)
        if own is not None:
            return own
        if isinstance(node, ast.Name):
            return self.facts.name_kind(scope, node.id)
        if isinstance(node, ast.Attribute):
            return Kind.DEVICE if node.attr == "device" else self.facts.attrs.get(node.attr)
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Slice):
            return Kind.INDEX if self.kind(node.value, scope) == Kind.INDEX_LIST else None
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            kinds = {self.kind(e, scope) for e in node.elts}
            return Kind.INDEX_LIST if kinds == {Kind.INDEX} else None
        if isinstance(node, ast.Call):
            return self.returns.of(self._callees(node), None)
        return None

    def learn(self, target: ast.AST, scope: Scope, kind: Optional[Kind]) -> None:
        if kind is None:
            return
        if isinstance(target, ast.Name):
            table = self.facts.names.setdefault(scope, {})
            key = target.id
            if (scope, key) in self.blocked:
                kind = Kind.UNKNOWN
        elif isinstance(target, ast.Attribute):
            table, key = self.facts.attrs, target.attr
            if key in self.blocked_attrs:
                kind = Kind.UNKNOWN
        elif isinstance(target, ast.Subscript) and kind == Kind.INDEX:
            return self.learn(target.value, scope, Kind.INDEX_LIST)
        else:
            return
        new = join(table.get(key), kind)
        if new != table.get(key):
            table[key] = new
            self.changed = True

    # -- one pass over the parsed files ----------------------------------------
    def settle(self) -> None:
        for _ in range(8):  # the fixpoint: each sweep only raises kinds, towards UNKNOWN
            self.changed = False
            self.sweep()
            if not self.changed:
                break

    def sweep(self) -> None:
        self.returns.start()
        for rel in sorted(self.parsed):
            for function in self.parsed[rel]:
                for node in function.nodes:
                    self.visit(node, function.scope)
        self.changed |= self.returns.finish()

    def visit(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Assign):
            kind = self.kind(node.value, scope)
            for target in node.targets:
                self.learn(target, scope, kind)
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Call):
                    self.unpack(target, node.value, scope)
        elif isinstance(node, ast.Return):
            self.returns.see(scope, [self.kind(e, scope) for e in _returned(node.value)])
        elif isinstance(node, ast.Call):
            for expr, kind in evidence(node):
                if isinstance(expr, ast.Name):
                    self.proven.add((scope, expr.id))
                self.learn(expr, scope, kind)
            self.bind(node, scope)
        else:
            for expr, kind in string_evidence(node):
                self.learn(expr, scope, kind)

    def unpack(self, target: ast.Tuple, call: ast.Call, scope: Scope) -> None:
        """``rank, local_rank, device = dist.setup()``: each name gets the kind the
        callee returns at its position, where every definition and every return agree."""
        callees = self._callees(call)
        for position, element in enumerate(target.elts):
            self.learn(element, scope, self.returns.of(callees, position, len(target.elts)))

    def _callees(self, call: ast.Call) -> tuple[Callee, ...]:
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        return self.facts.callees.get(name, ())

    def bind(self, call: ast.Call, scope: Scope) -> None:
        """Each argument of known kind flows into the parameter it binds, in every
        definition of the repository the callee's name may stand for."""
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        targets = self.facts.callees.get(name, ())
        if not targets or any(isinstance(a, ast.Starred) for a in call.args):
            return
        for callee in targets:
            params = callee.params[1:] if callee.method else callee.params
            pairs = [*zip(params, call.args), *((k.arg, k.value) for k in call.keywords if k.arg)]
            for param, value in pairs:
                if param in callee.params:
                    self.learn(ast.Name(param), callee.scope, self.kind(value, scope))

    def device_uses(self) -> None:
        """``Callee.device_only`` for the callees some call passes a CUDA index to (the
        only ones a rule asks about)."""
        for name in self._called_with_values():
            self.facts.callees[name] = tuple(
                replace(c, device_only=_device_only(self.functions[c.scope])) for c in self.facts.callees.get(name, ()))

    # -- every caller must agree ------------------------------------------------------
    def unverified(self) -> set[tuple[Scope, str]]:
        """Parameters given a kind that some call site contradicts: it passes a value of
        another or unknown kind, unpacks ``*args``/``**kwargs``, or leaves out a parameter
        whose default is something else (``device=None``). The sweeps follow the values
        optimistically (a kind learned late must reach every call); this pass is the check."""
        found: set[tuple[Scope, str]] = set()
        for functions in self.parsed.values():
            for function in functions:
                for node in function.nodes:
                    if isinstance(node, ast.Call):
                        found |= self._contradicted(node, function.scope)
        return found - self.proven - self.blocked

    def _contradicted(self, call: ast.Call, scope: Scope) -> set[tuple[Scope, str]]:
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        found = set()
        unpacks = any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
        for callee in self.facts.callees.get(name, ()):
            known = {p: k for p, k in self.facts.names.get(callee.scope, {}).items()
                     if k in _FOLLOWED and p in callee.params}
            if not known:
                continue
            params = callee.params[1:] if callee.method else callee.params
            bound = {**dict(zip(params, call.args)), **{k.arg: k.value for k in call.keywords if k.arg}}
            for param, kind in known.items():
                value = bound.get(param, self.defaults.get(callee.scope, {}).get(param))
                if unpacks or not _agrees(self.kind(value, scope) if value is not None else kind, value, kind):
                    found.add((callee.scope, param))
        return found

    # -- which files to parse ----------------------------------------------------
    def parse(self, rel: str) -> None:
        try:
            tree = ast.parse(self.sources[rel])
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self.parsed[rel] = []
            return
        functions = list(_functions(rel, tree))
        for function in functions:
            function.nodes = tuple(n for n in _own_nodes(function) if isinstance(n, _SWEPT))
        self.parsed[rel] = functions
        for function in functions[1:]:
            self.defaults[function.scope] = function.defaults
            simple = function.scope[1].rsplit(".", 1)[-1]
            if simple in _TORCH_METHODS - {"__init__"}:
                continue
            callee = Callee(function.scope, function.params, function.method)
            self.functions[function.scope] = function
            keys = [simple]
            if simple == "__init__" and "." in function.scope[1]:
                keys = [function.scope[1].rsplit(".", 2)[-2]]  # ``Cls(...)`` calls ``Cls.__init__``
            for key in keys:
                self.facts.callees[key] = (*self.facts.callees.get(key, ()), callee)

    def wanted(self, done: set[str]) -> set[str]:
        """Files that define a callee a known value is passed to, read a known attribute,
        or call a callee whose parameter holds one (every caller must agree)."""
        words = [(n, word_search.defines) for n in self._called_with_values()]
        words += [(a, word_search.reads_attribute) for a in self._attrs_to_see()]
        words += [(n, word_search.calls) for n in self._callers_to_see()]
        words += [(n, word_search.calls) for n in self._returning()]
        found: set[str] = set()
        for word, test in words:  # the word first: a byte search at C speed, the context only where it is
            needle = word.encode()
            found.update(rel for rel, data in self.sources.items()
                         if rel not in self.parsed and needle in data and test(data, word))
        return found - done

    def _called_with_values(self) -> list[str]:
        found: set[str] = set()
        for functions in self.parsed.values():
            for function in functions:
                for node in function.nodes:
                    if isinstance(node, ast.Call) and self._passes_value(node, function.scope):
                        func = node.func
                        found.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
        return sorted(found - {""} - _TORCH_METHODS)

    def _attrs_to_see(self) -> list[str]:
        """Attributes of a followed kind; one read in too many files (``.device``) is
        blocked instead: a name that common holds many kinds of value."""
        names = []
        for attr, kind in sorted(self.facts.attrs.items()):
            if kind not in _FOLLOWED:
                continue
            needle = b"." + attr.encode()
            if sum(1 for r, data in self.sources.items() if r not in self.parsed and needle in data) > _MAX_CALLERS:
                self.blocked_attrs.add(attr)
                self.facts.attrs[attr] = Kind.UNKNOWN
                self.changed = True
            else:
                names.append(attr)
        return names

    def _callers_to_see(self) -> list[str]:
        """Callees whose other callers must be parsed; a name called in too many files
        (a common method name) is not followed: its parameters are blocked instead."""
        names = []
        for name in self._given_values():
            needle = name.encode()
            callers = [r for r, data in self.sources.items() if r not in self.parsed and needle in data]
            if len(callers) > _MAX_CALLERS and len([r for r in callers if word_search.calls(
                    self.sources[r], name)]) > _MAX_CALLERS:
                self.blocked |= {(c.scope, p) for c in self.facts.callees[name] for p in c.params}
                self.changed = True
            else:
                names.append(name)
        return names

    def _returning(self) -> list[str]:
        """Callees that return a value of a followed kind: their callers receive it."""
        scopes = self.returns.followed(_FOLLOWED)
        return sorted(name for name, callees in self.facts.callees.items()
                      if any(c.scope in scopes for c in callees) and name not in _TORCH_METHODS)

    def _given_values(self) -> list[str]:
        """Callees with a parameter of a followed kind: every call of them must be seen."""
        return sorted(name for name, callees in self.facts.callees.items()
                      if any(k in _FOLLOWED for c in callees for k in self.facts.names.get(c.scope, {}).values()))

    def _passes_value(self, call: ast.Call, scope: Scope) -> bool:
        values = [*call.args, *(k.value for k in call.keywords)]
        return any(self.kind(v, scope) in _FOLLOWED for v in values)


def _agrees(found: Optional[Kind], value: Optional[ast.AST], wanted: Kind) -> bool:
    """An argument of kind ``found`` may stand where ``wanted`` is followed: the same
    kind, or an empty list for a list of indices (``gpu_ids=[]``)."""
    if found == wanted:
        return True
    return wanted == Kind.INDEX_LIST and isinstance(value, (ast.List, ast.Tuple)) and not value.elts


def _device_only(function: _Function) -> frozenset[str]:
    """The parameters whose every read is a device use."""
    uses: dict[str, bool] = {p: True for p in function.params}
    device_reads: set[int] = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.keyword) and node.arg == "device" and isinstance(node.value, ast.Name):
            device_reads.add(id(node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to" \
                and node.args and isinstance(node.args[0], ast.Name):
            device_reads.add(id(node.args[0]))
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and len(node.ops) == 1 \
                and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            device_reads.add(id(node.left))
    for node in _own_nodes(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in uses \
                and id(node) not in device_reads:
            uses[node.id] = False
    return frozenset(p for p, only in uses.items() if only and p not in ("self", "cls"))


def build(sources: Mapping[str, bytes]) -> FlowFacts:
    """The device-value facts of a tree (``sources``: file -> bytes, Python files only)."""
    builder = _Builder(sources)
    todo = {rel for rel, data in sources.items() if any(word in data for word in _TRIGGER)}
    done: set[str] = set()
    while todo and len(builder.parsed) < _MAX_FILES:
        for rel in sorted(todo)[: _MAX_FILES - len(builder.parsed)]:
            builder.parse(rel)
        done |= todo
        builder.settle()
        todo = builder.wanted(done)
    for _ in range(4):  # block what a caller contradicts, and follow the values again
        blocked = builder.unverified()
        if not blocked:
            break
        builder.blocked |= blocked
        builder.facts.names.clear()
        builder.facts.attrs.clear()
        builder.settle()
    builder.facts.files = frozenset(r for r in builder.parsed if builder.parsed[r])
    builder.device_uses()
    return builder.facts
