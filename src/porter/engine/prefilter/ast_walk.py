"""The pre-filter's ``ast`` walk: a file's ``SyntaxFacts``, and its definitions as units.

The stdlib ``ast`` parses at C speed; one walk per file records the names, calls,
arguments, strings and imports the rules' ``needs`` ask about (``porter.engine.prefilter.facts``).
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Iterator, Optional

from porter.engine.prefilter.facts import Arg, IntArg, NameArg, Slot, StrArg, SyntaxFacts, Unit
from porter.rulebase.matching import ast_dotted_name, runtime_alias

#: The positions recorded: rules look at no later positional argument.
_POSITIONS = 6  # create_block_mask(mask_mod, B, H, Q, KV, device): position 5


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
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and not node.value.args and not node.value.keywords):
            chain = ast_dotted_name(node.value.func)
            if chain:
                facts.flag_chains.setdefault(node.targets[0].id, set()).add(chain)
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
    if kind is ast.JoinedStr and all(type(v) is ast.Constant for v in value.values):  # f"cuda": its text
        return StrArg("".join(v.value for v in value.values))  # type: ignore[attr-defined]
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
