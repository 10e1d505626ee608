"""Shared pieces of the third-party rules (TP1xx-TP6xx): finding uses of a package's
names, checking call arguments, and telling a guarded import from an unguarded one.

The mixins below are mixed into the rules that report every use of a package they
cannot rewrite; the rule modules import them from here, never from one another.
"""
from __future__ import annotations

import textwrap
from typing import Iterable, Optional, Sequence

import libcst as cst

from porter.rulebase.cuda_packages import IMPORT_ROOTS
from porter.rulebase.conditions.guards import IMPORT_ERRORS
from porter.rulebase.evidence import Clause, InFile, TriesImport, Uses
from porter.rulebase.matching import Ambiguous, dotted_name
from porter.rulebase.syntax import callee_name
from porter.rulebase.walk import code_children


def example_code(text: str) -> str:
    """An example written as an indented triple-quoted string, as the file would hold it."""
    return textwrap.dedent(text).lstrip("\n")


def under(name: Optional[str], prefixes: Iterable[str]) -> bool:
    """Whether ``name`` is one of ``prefixes`` or inside one (``a.b`` is under ``a``)."""
    if name is None or isinstance(name, Ambiguous):
        return False
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def package_units(roots: Iterable[str]) -> Clause:
    """``Needs.unit`` for a rule whose evidence is every use of a package in the module
    (import chains, availability flags and the stops on them): the units that use the
    package, and every unit wherever a top-level ``try`` imports it (the only place
    chains and flags are looked for; the names it binds may be read anywhere, so the
    engine then parses the whole file)."""
    roots = frozenset(roots)
    return InFile(TriesImport(roots)) | Uses(roots)


def arguments_fit(call: cst.Call, max_positional: int, keywords: frozenset[str]) -> bool:
    """True when ``call`` passes at most ``max_positional`` positional arguments, only
    keywords from ``keywords``, and no ``*args`` / ``**kwargs``."""
    positional = 0
    for arg in call.args:
        if arg.star:
            return False
        if arg.keyword is None:
            positional += 1
        elif arg.keyword.value not in keywords:
            return False
    return positional <= max_positional


class UseFinder:
    """Mixin: calls ``self.on_use(node, qualname, call)`` for every outermost Name or
    Attribute chain that resolves under ``self.prefixes`` (``call`` is the Call whose
    callee the chain is, else None). Names inside imports are not uses."""

    prefixes: tuple[str, ...] = ()

    def _inner_nodes(self) -> set[int]:
        if not hasattr(self, "_inner"):
            self._inner: set[int] = set()
            self._callees: dict[int, cst.Call] = {}
        return self._inner

    def visit_Call(self, node: cst.Call) -> None:
        self._inner_nodes()
        self._callees[id(node.func)] = node

    def visit_Attribute(self, node: cst.Attribute) -> None:
        inner = self._inner_nodes()
        inner.add(id(node.value))
        inner.add(id(node.attr))  # ``torch.unbind``'s ``unbind`` is no use of an imported ``unbind``
        if id(node) not in inner:
            self._check_use(node)

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._inner_nodes().add(id(node.keyword))

    def visit_Name(self, node: cst.Name) -> None:
        if id(node) not in self._inner_nodes():
            self._check_use(node)

    def _check_use(self, node: cst.BaseExpression) -> None:
        name = self.qualname(node)  # type: ignore[attr-defined]
        if under(name, self.prefixes):
            self.on_use(node, name, self._callees.get(id(node)))  # type: ignore[arg-type]

    def on_use(self, node: cst.BaseExpression, name: str, call: Optional[cst.Call]) -> None:
        raise NotImplementedError


def _catches_import_error(handler: cst.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    for kind in kinds:
        value = kind.value if isinstance(kind, cst.Element) else kind
        if isinstance(value, cst.Name) and value.value in IMPORT_ERRORS:
            return True
    return False


def only_raises(body: cst.BaseSuite) -> bool:
    """A handler body that ends by raising (``raise ImportError("xFormers is required")``)
    after at most some imports or calls (logging): no fallback, so no guard."""
    stmts = body.body if isinstance(body, cst.IndentedBlock) else [body]
    small = [s for line in stmts if isinstance(line, cst.SimpleStatementLine) for s in line.body]
    if len(small) != len(stmts) or not small or not isinstance(small[-1], cst.Raise):
        return False
    return all(isinstance(s, (cst.Expr, cst.Import, cst.ImportFrom)) for s in small[:-1])


def flags_set_false(module: cst.Module, roots: Iterable[str]) -> set[str]:
    """Availability flags: names a top-level ``try`` importing under ``roots`` sets to
    False in its ``except ImportError:`` (``XFORMERS_AVAILABLE = False``)."""
    found: set[str] = set()
    roots = tuple(roots)
    for stmt in module.body:
        if not tries_import(stmt, roots):
            continue
        for handler in stmt.handlers:
            if not _catches_import_error(handler) or not isinstance(handler.body, cst.IndentedBlock):
                continue
            for line in handler.body.body:
                for small in line.body if isinstance(line, cst.SimpleStatementLine) else ():
                    if isinstance(small, cst.Assign) and isinstance(small.value, cst.Name) \
                            and small.value.value == "False":
                        found.update(t.target.value for t in small.targets if isinstance(t.target, cst.Name))
    return found


def stop_evidence(rule, roots: Iterable[str], finder) -> tuple[set[str], bool]:
    """(the module's availability flags for ``roots``, whether every use gets ported,
    as ``finder`` (a UseFinder visitor with ``all_ported``) sees it). The uses are only
    walked where there is a flag: without one there is no stop to decide on."""
    flags = flags_set_false(rule.ctx.module, roots)
    if flags:
        rule.ctx.module.visit(finder)
    return flags, not flags or finder.all_ported


def _some_imports(body: cst.BaseSuite) -> list[tuple[str, str]]:
    """The imports among a block's simple statements."""
    found = []
    for line in body.body if isinstance(body, cst.IndentedBlock) else [body]:
        if isinstance(line, cst.SimpleStatementLine):
            for small in line.body:
                if isinstance(small, (cst.Import, cst.ImportFrom)):
                    found += _imports(cst.SimpleStatementLine(body=[small])) or []
    return found


def _imports(body: cst.BaseSuite) -> Optional[list[tuple[str, str]]]:
    """(bound name, qualified name) of each import when ``body`` only imports (absolute
    imports, no ``*``), else None."""
    found: list[tuple[str, str]] = []
    for line in body.body if isinstance(body, cst.IndentedBlock) else [body]:
        if not isinstance(line, cst.SimpleStatementLine):
            return None
        for small in line.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = dotted_name(alias.name) or ""
                    bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) \
                        else full.split(".")[0]
                    found.append((bound, full if alias.asname else bound))
            elif isinstance(small, cst.ImportFrom) and not small.relative and small.module is not None \
                    and not isinstance(small.names, cst.ImportStar):
                module = dotted_name(small.module) or ""
                for alias in small.names:
                    name = dotted_name(alias.name) or ""
                    bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) \
                        else name
                    found.append((bound, f"{module}.{name}"))
            elif not _flag_assign(small):
                return None
    return found


def _flag_assign(small: cst.BaseSmallStatement) -> bool:
    """``FA3 = True`` / ``FLASH_VERSION = 3``: a constant that records which branch ran."""
    return isinstance(small, cst.Assign) and all(isinstance(t.target, cst.Name) for t in small.targets) \
        and isinstance(small.value, (cst.Integer, cst.Float, cst.SimpleString, cst.Name)) \
        and (not isinstance(small.value, cst.Name) or small.value.value in ("True", "False", "None"))


class _Assigns(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: list[str] = []

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Name):
            self.names.append(node.target.value)


def _chain_flags(node: cst.Try) -> list[str]:
    found = _Assigns()
    node.visit(found)
    return list(dict.fromkeys(found.names))


def import_chain(node: cst.Try, roots: Iterable[str]) -> Optional[dict[str, list[str]]]:
    """For a ``try`` that is no guard: its body only imports modules under ``roots`` and
    every handler catches ImportError and only imports under ``roots`` too (FlashAttention-3,
    then FlashAttention-2) or raises. Each bound name → what it is bound to, in order.
    None for anything else (a handler with a fallback, ``else``/``finally``)."""
    if not node.handlers or node.orelse is not None or node.finalbody is not None:
        return None
    roots = tuple(roots)
    bodies = [node.body]
    for handler in node.handlers:
        if not _catches_import_error(handler):
            return None
        if not only_raises(handler.body):
            bodies.append(handler.body)
    chain: dict[str, list[str]] = {}
    for body in bodies:
        inner = body.body[0] if isinstance(body, cst.IndentedBlock) and len(body.body) == 1 else None
        if isinstance(inner, cst.Try):  # ``except ImportError:`` holding the next try
            nested = import_chain(inner, roots)
            if nested is None:
                return None
            for bound, quals in nested.items():
                chain.setdefault(bound, []).extend(quals)
            continue
        found = _imports(body)
        if not found or not all(under(q, roots) for _, q in found):
            return None
        for bound, qual in found:
            chain.setdefault(bound, []).append(qual)
    return chain


def module_chains(module: cst.Module, roots: Iterable[str]) -> dict[str, list[str]]:
    """The bindings of every top-level import chain (see :func:`import_chain`)."""
    found: dict[str, list[str]] = {}
    for stmt in module.body:
        if isinstance(stmt, cst.Try):
            found.update(import_chain(stmt, roots) or {})
    return found


def chain_alternatives(rule, node: cst.BaseExpression, chains: dict[str, list[str]]) -> Optional[list[str]]:
    """What ``node`` (a name or ``a.b`` chain) may mean, in the order the file tries it:
    one qualified name, or, for a name bound by an import chain, one per branch."""
    name = rule.qualname(node)
    if name is None or not isinstance(name, Ambiguous):
        return None if name is None else [name]
    base, rest = node, []
    while isinstance(base, cst.Attribute):
        rest.insert(0, base.attr.value)
        base = base.value
    if not isinstance(base, cst.Name) or base.value not in chains:
        return None
    options = [".".join([q, *rest]) for q in chains[base.value]]
    return options if sorted(options)[0] == str(name) else None  # bound by the chain alone


def uses(module: cst.CSTNode, names: Iterable[str], skip: cst.CSTNode) -> int:
    """How many Names in ``names`` ``module`` uses outside ``skip``, imports and
    attribute/keyword names (a field walk, porter.rulebase.walk: a visitor pass costs 15 times more)."""
    wanted, count = set(names), 0
    stack = [module]
    while stack:
        node = stack.pop()
        if node is skip or isinstance(node, (cst.Import, cst.ImportFrom)):
            continue
        if isinstance(node, (cst.Attribute, cst.Arg)):
            stack.append(node.value)
            continue
        if isinstance(node, cst.Name) and node.value in wanted:
            count += 1
        stack.extend(code_children(node))
    return count


def without(body: list, dropped: list) -> list:
    """``body`` without the statements in ``dropped``; a statement that moves up to the
    top of the block takes the leading lines (docstring spacing) of the first one dropped."""
    kept, top = [], None
    for stmt in body:
        if any(stmt is d for d in dropped):
            top = stmt.leading_lines if not kept and top is None else top
            continue
        if not kept and top is not None:
            stmt = stmt.with_changes(leading_lines=top)
        kept.append(stmt)
    return kept


def drop_dead_chains(rule, original: cst.Module, updated: cst.Module, roots: Iterable[str],
                     advice: str) -> cst.Module:
    """Remove each top-level import chain under ``roots`` whose names the rules' rewrites
    left unused (as a plain import goes away); report one whose names are still used:
    every branch needs CUDA, so it is no guard. Call from ``leave_Module``."""
    originals = [s for s in original.body if isinstance(s, cst.Try) and import_chain(s, roots)]
    dropped = []
    for stmt in updated.body:
        match = next((o for o in originals if isinstance(stmt, cst.Try) and o.deep_equals(stmt)), None)
        if match is None:
            continue
        originals.remove(match)
        chain = import_chain(match, roots) or {}
        modules = " / ".join(dict.fromkeys(q.rsplit(".", 1)[0] if q not in chain else q
                                           for qs in chain.values() for q in qs))
        flags = _chain_flags(match)
        if flags and uses(updated, chain, stmt) == 0:
            rule.flag(match, f"this try/except is no guard: every branch imports a CUDA-only module "
                      f"({modules}), so off CUDA it fails; its uses were ported, but it also sets "
                      f"{', '.join(f'`{f}`' for f in flags)}", suggestion="delete the imports and set "
                      + ", ".join(f"`{f}`" for f in flags) + " to the value that means \"neither library\"")
            continue
        if uses(updated, chain, stmt) == 0 and uses(original, chain, match) > 0 \
                and not rule.ctx.suppressed(match, rule.code):
            rule.ctx.record(rule, match, "rewrite", f"this try/except imports only CUDA-only modules "
                            f"({modules}); every use was ported, so it goes like a plain import")
            dropped.append(stmt)
            continue
        rule.flag(match, f"this try/except is no guard: every branch imports a CUDA-only module "
                  f"({modules}) or raises, so off CUDA it fails with ModuleNotFoundError", suggestion=advice)
    return updated.with_changes(body=without(list(updated.body), dropped)) if dropped else updated


class GuardTracker:
    """Mixin: ``self.guarded()`` is True inside the body of a ``try`` that guards an
    import: a handler catches ImportError and has a fallback (it neither re-raises nor
    only imports another CUDA-only module); ``self.flag_test()`` the test of the
    innermost enclosing ``if`` (or None). Handlers, ``else`` and ``finally`` are no
    longer guarded by their own ``try``."""

    #: Packages whose import in a handler is no fallback (another CUDA-only import).
    chain_roots: frozenset[str] = IMPORT_ROOTS

    def _stacks(self) -> tuple[list[bool], list[cst.If]]:
        if not hasattr(self, "_try_stack"):
            self._try_stack: list[bool] = []
            self._if_stack: list[cst.If] = []
            self._tails: list[bool] = []  # per function: after a guarding try whose handlers return
            self._in_else: list[bool] = []  # per enclosing if: in its else (or elif) part
        return self._try_stack, self._if_stack

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._stacks()
        self._tails.append(False)
        after = getattr(super(), "visit_FunctionDef", None)  # a mixin after this one (TypeCheckUses)
        if after is not None:
            after(node)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        self._tails.pop()
        after = getattr(super(), "leave_FunctionDef", None)
        return after(original, updated) if after is not None else updated

    def visit_Try(self, node: cst.Try) -> None:
        guards = any(_catches_import_error(h) and not only_raises(h.body) for h in node.handlers)
        self._stacks()[0].append(guards and import_chain(node, self.chain_roots) is None)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        self._stacks()[0][-1] = False  # the handlers (and else/finally after them) run unguarded

    def leave_Try(self, original: cst.Try, updated: cst.Try) -> cst.Try:
        self._stacks()[0].pop()
        if self._tails and _returns_on_failure(original, self.chain_roots):
            self._tails[-1] = True  # `except ImportError: return False`: the rest runs only with the import
        return updated

    def visit_If(self, node: cst.If) -> None:
        stack = self._stacks()[1]
        if stack and stack[-1].orelse is node:
            self._in_else[-1] = True  # an elif: no longer under the test above it
        stack.append(node)
        self._in_else.append(False)

    def visit_Else(self, node: cst.Else) -> None:
        if self._stacks()[1]:
            self._in_else[-1] = True  # (a loop's or try's else too: then the if counts as left, the safe side)

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        self._stacks()[1].pop()
        self._in_else.pop()
        return updated

    def guarded(self) -> bool:
        return any(self._stacks()[0]) or (bool(self._tails) and self._tails[-1]) or self._under_import_probe()

    def _under_import_probe(self) -> bool:
        """In the body of ``if is_flash_v2_installed():``, a call of one of the tree's import
        probes (porter.project.flags.import_probes), which holds only where the import does."""
        project = getattr(getattr(self, "ctx", None), "project", None)
        probes = project.import_probes if project is not None else ()
        return bool(probes) and any(not in_else and isinstance(node.test, cst.Call) and callee_name(node.test.func) in probes
                                    for node, in_else in zip(self._stacks()[1], self._in_else))

    def flag_test(self) -> Optional[cst.If]:
        stack = self._stacks()[1]
        return stack[-1] if stack else None


def _returns_on_failure(node: cst.Try, roots: frozenset[str]) -> bool:
    """A ``try`` that guards an import and whose every handler ends in ``return``: in the
    function, what follows it runs only where the import succeeded (llm-foundry's
    ``is_flash_v2_installed``: ``except: return False``, then ``flash_attn.__version__``)."""
    if not node.handlers or import_chain(node, roots) is not None:
        return False
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    if not any(isinstance(small, (cst.Import, cst.ImportFrom))
               for stmt in body if isinstance(stmt, cst.SimpleStatementLine) for small in stmt.body):
        return False  # no import tried: a handler's return says nothing about one
    for handler in node.handlers:
        last = handler.body.body[-1] if isinstance(handler.body, cst.IndentedBlock) and handler.body.body else None
        if not (_catches_import_error(handler) and isinstance(last, cst.SimpleStatementLine)
                and isinstance(last.body[-1], cst.Return)):
            return False
    return True


def _flag_test(test: cst.BaseExpression, flags: set[str]) -> Optional[str]:
    """The flag of ``not FLAG`` / ``FLAG is False`` / ``FLAG == False``."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) \
            and isinstance(test.expression, cst.Name) and test.expression.value in flags:
        return test.expression.value
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name) \
            and test.left.value in flags and isinstance(test.comparisons[0].operator, (cst.Is, cst.Equal)):
        value = test.comparisons[0].comparator
        return test.left.value if isinstance(value, cst.Name) and value.value == "False" else None
    return None


def _flag_raise(stmt: cst.CSTNode, flags: set[str]) -> Optional[str]:
    """The flag when ``stmt`` stops the program without xformers: ``if not FLAG: raise ...``
    or ``assert FLAG``."""
    if isinstance(stmt, cst.If) and stmt.orelse is None and only_raises(stmt.body):
        return _flag_test(stmt.test, flags)
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assert):
        test = stmt.body[0].test
        return test.value if isinstance(test, cst.Name) and test.value in flags else None
    return None


def without_stops(rule, original: Sequence[cst.CSTNode], updated: Sequence[cst.CSTNode], flags: set[str],
                  ported: bool, package: str) -> Sequence[cst.CSTNode]:
    """``updated`` (a block's statements) without those that stop the program on the
    module's own availability flag (``if not FLAG: raise``, ``assert FLAG``), when every
    use of ``package`` in the file was ported; otherwise each stop is reported."""
    if not flags or len(original) != len(updated):
        return updated
    dropped = []
    for old, new in zip(original, updated):
        flag = _flag_raise(old, flags)
        if flag is None:
            continue
        if not ported or len(original) == 1 or rule.ctx.suppressed(old, rule.code):
            rule.flag(old, f"stops when `{flag}` is False, which it is wherever {package} does not "
                      f"import (off CUDA); the ported {package} calls run there",
                      suggestion=f"drop this check once the remaining {package} uses are ported")
        else:
            rule.ctx.record(rule, old, "rewrite", f"`{flag}` is False off CUDA, but every {package} "
                            "call here now runs there (porter_runtime): the stop goes")
            dropped.append(new)
    return without(list(updated), dropped) if dropped else updated


def tries_import(stmt: cst.CSTNode, roots: tuple[str, ...]) -> bool:
    """Whether ``stmt`` is a ``try`` whose body imports under ``roots`` (directly, or under
    an ``if`` inside it: ``if ENABLED: from xformers.ops import ...``)."""
    return isinstance(stmt, cst.Try) and (any(under(q, roots) for _, q in _some_imports(stmt.body))
                                          or _nested_imports(stmt.body, roots))


def _nested_imports(body: cst.BaseSuite, roots: tuple[str, ...]) -> bool:
    """Whether an ``if`` inside ``body`` imports under ``roots`` (``if ENABLED: from
    xformers.ops import ...``)."""
    for line in body.body if isinstance(body, cst.IndentedBlock) else []:
        if isinstance(line, cst.If) and (any(under(q, roots) for _, q in _some_imports(line.body))
                                        or _nested_imports(line.body, roots)):
            return True
    return False
