"""Code that only runs where CUDA is present, found with the stdlib ``ast``.

A *region* is a span of a file that runs only when a CUDA test passed: the body of
``if torch.cuda.is_available():``, ``if x.is_cuda:``, ``if device.type == "cuda":``,
the rest of a function after ``if not torch.cuda.is_available(): return``, the CUDA
arm of a ternary, what follows ``torch.cuda.is_available() and``, the ``else`` of a
negated test, and the body of ``try: import flash_attn`` whose ``except ImportError:``
is a real fallback (one that neither re-raises nor imports another CUDA-only module),
with the availability flags such a ``try`` sets (``HAS_FLASH = True`` / ``False``).

Three kinds: ``"device"`` regions hang on a test of the device (porter can port such a
guard, and then its body must be ported too); ``"import"`` regions hang on a CUDA-only
import succeeding; ``"test"`` regions are tests skipped off CUDA (porter.rulebase.conditions.test_gates:
``@unittest.skipIf(not torch.cuda.is_available(), ...)``, ``@skip_if_lt_x_gpu(4)``); ``"gpus"``
regions run only with several GPUs (``if opts.num_gpus > 1:``, a ported
``porter_runtime.device_count() >= 2``), which a Mac never has: porter.engine.stages.notes
lists what is found there, and rewrites stay. Positions: 1-based lines, 0-based character
columns, as LibCST counts them (``ast`` counts UTF-8 bytes)."""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Sequence

from porter.rulebase.cuda_packages import IMPORT_ROOTS, is_cuda_only_module
from porter.rulebase.matching import ast_dotted_name
from porter.rulebase.conditions.names import Names, child_blocks, statements  # noqa: F401 (re-exported)
from porter.rulebase.conditions.test_gates import gated_definition, gated_module, several_count, several_gpus

Position = tuple[int, int]  # (line, column)
Span = tuple[Position, Position]


@dataclass(frozen=True)
class Region:
    """Code that runs only where CUDA is present."""

    span: Span
    guard_line: int
    kind: str  # "device" | "import" | "test" | "gpus" (run only with several GPUs)
    #: the guard's own code (its test, and the definition of a flag it reads): a rule
    #: that rewrote something here ported the guard.
    guard_spans: tuple[Span, ...]

    def contains(self, position: Position) -> bool:
        return self.span[0] <= position < self.span[1]

    def encloses(self, span: Span) -> bool:
        """Whether all of ``span`` lies in the region (a ternary's whole rewrite starts
        where its CUDA arm does, yet is not inside it)."""
        return self.span[0] <= span[0] and span[1] <= self.span[1]


def within(spans: Iterable[Span], position: Position) -> bool:
    return any(start <= position < end for start, end in spans)


_CUDA_STRING = re.compile(r"^cuda(:\d+)?$")
#: Values that are truthy only in a CUDA build with CUDA present: the CUDA version of the
#: build (None in CPU and MPS builds), torch's own test flags.
_CUDA_VALUES = frozenset({"torch.version.cuda", "torch.testing._internal.common_cuda.TEST_CUDA",
                          "torch.testing._internal.common_cuda.TEST_MULTIGPU",
                          "torch.testing._internal.common_utils.TEST_CUDA"})
#: Calls that answer True only where CUDA is: NCCL exists only in CUDA builds (a Mac's
#: and a CPU build's torch answer False).
_CUDA_CALLS = frozenset({"torch.cuda.is_available", "torch.cuda.is_initialized",
                         "torch.distributed.is_nccl_available"})
_AVAILABLE = re.compile(r"^(?:is_|has_)?(\w+?)_(?:is_)?available$")
_EXIT_CALLS = {"sys.exit", "exit", "quit", "os._exit"}


#: torch.cuda's sequences with one entry per CUDA device, empty without CUDA (checked on a CPU
#: build of torch 2.13): ``len(torch.cuda.default_generators) > 0`` tests for CUDA (LLaMA-Adapter's
#: gorilla/finetune, blind round 18).
_PER_DEVICE = frozenset({"torch.cuda.default_generators"})


def _is_cuda_string(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_CUDA_STRING.match(node.value))


class GuardFinder:
    """Finds the CUDA-only regions of one parsed file."""

    def __init__(self, tree: ast.Module, lines: Sequence[bytes],
                 cuda_module: Callable[[str], bool] = is_cuda_only_module, probes: frozenset = frozenset()) -> None:
        self.tree = tree
        self.lines = lines
        self.names = Names(tree)
        self.cuda_module = cuda_module
        #: the tree's import probes, by name (porter.project.flags.import_probes)
        self.probes = probes
        #: name or dotted target → (polarity, kind, the span of its definition)
        self.flags: dict[str, tuple[bool, str, Span]] = {}
        self.regions: list[Region] = []

    # -- positions ---------------------------------------------------------
    def _column(self, line: int, offset: int) -> int:
        if 0 < line <= len(self.lines):
            text = self.lines[line - 1]
            if not text.isascii():
                return len(text[:offset].decode("utf-8", "replace"))
        return offset

    def start(self, node: ast.AST) -> Position:
        return (node.lineno, self._column(node.lineno, node.col_offset))  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> Position:
        return (node.end_lineno, self._column(node.end_lineno, node.end_col_offset))  # type: ignore[attr-defined]

    def span(self, first: ast.AST, last: Optional[ast.AST] = None) -> Span:
        return (self.start(first), self.end(last or first))

    # -- tests -------------------------------------------------------------
    def polarity(self, test: ast.AST) -> Optional[tuple[bool, str, tuple[Span, ...]]]:
        """(True: holds only with CUDA / False: only without, the kind, the spans of
        the flags it reads) for a test expression; None when it says nothing of CUDA."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.polarity(test.operand)
            return None if inner is None else (not inner[0], inner[1], inner[2])
        if isinstance(test, ast.BoolOp):
            values = test.values
            if isinstance(test.op, ast.Or) and any(not self._environment(v) for v in values):
                # `os.environ.get("FORCE_CUDA") or torch.cuda.is_available()` (Mask2Former's op
                # build): a switch that forces the CUDA build on a machine without it, which a
                # Mac never sets; the test is the CUDA part
                values = [v for v in values if not self._environment(v)]
            parts = [self.polarity(v) for v in values]
            want = isinstance(test.op, ast.And)  # `a and b` holds only with CUDA if one part does
            for part in parts:
                if part is not None and part[0] is want:
                    return part
            if all(p is not None and p[0] is (not want) for p in parts):
                return parts[0]
            return None
        return self._atom(test)

    def _atom(self, test: ast.AST) -> Optional[tuple[bool, str, tuple[Span, ...]]]:
        if isinstance(test, ast.Call):
            return self._call_test(test)
        if isinstance(test, ast.Attribute) and test.attr == "is_cuda":
            return True, "device", ()
        if self.names.qualname(test) in _CUDA_VALUES:
            return True, "device", ()
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return self._compare_test(test.left, test.ops[0], test.comparators[0])
        key = ast_dotted_name(test)
        if key is not None and key in self.flags:
            polarity, kind, where = self.flags[key]
            return polarity, kind, (where,)
        if isinstance(test, ast.Name) and test.id in self.probes and self.names.qualname(test) is not None:
            return True, "import", ()  # `from megatron.core.utils import HAVE_TE`: another module's flag
        return None

    def _call_test(self, call: ast.Call) -> Optional[tuple[bool, str, tuple[Span, ...]]]:
        name = self.names.qualname(call.func)
        if name in _CUDA_CALLS and not call.args:
            return True, "device", ()
        if (isinstance(call.func, ast.Attribute) and call.func.attr == "startswith" and len(call.args) == 1
                and isinstance(call.args[0], ast.Constant) and call.args[0].value in ("cuda", "cuda:")):
            return True, "device", ()
        if isinstance(call.func, ast.Name) and not call.args:
            key = call.func.id + "()"
            if key in self.flags:
                polarity, kind, where = self.flags[key]
                return polarity, kind, (where,)
        last = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
        if last in self.probes:
            return True, "import", ()  # llm-foundry's is_flash_v2_installed(), from another module
        match = _AVAILABLE.match(last)
        if match and any(root in match.group(1) for root in IMPORT_ROOTS if len(root) > 3):
            return True, "import", ()  # is_flash_attn_2_available(), is_xformers_available(), ...
        return None

    def _compare_test(self, left: ast.AST, op: ast.cmpop, right: ast.AST) -> Optional[tuple[bool, str, tuple]]:
        if isinstance(op, (ast.Eq, ast.NotEq)) and (_is_cuda_string(left) or _is_cuda_string(right)):
            if self._environment(right if _is_cuda_string(left) else left):
                return None  # picotron's `os.getenv("DEVICE", "cuda") == "cuda"`: a setting, CUDA or not
            return isinstance(op, ast.Eq), "device", ()
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(left, ast.Constant) and left.value == "cuda":
            return isinstance(op, ast.In), "device", ()
        if isinstance(op, (ast.IsNot, ast.Is)) and isinstance(right, ast.Constant) and right.value is None:
            key = ast_dotted_name(left)
            if key is not None and key in self.flags and self.flags[key][1] == "import":
                return isinstance(op, ast.IsNot), "import", (self.flags[key][2],)
        several = several_gpus(left, op, right)
        if several is not None:
            return several, "gpus", ()
        counted = self.names.qualname(left.func) if isinstance(left, ast.Call) else None
        if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "len" \
                and len(left.args) == 1 and self.names.qualname(left.args[0]) in _PER_DEVICE:
            counted = "torch.cuda.device_count"  # one per CUDA device: empty without CUDA
        if counted == "porter_runtime.device_count" and isinstance(right, ast.Constant):  # PT104's: 1 off CUDA
            several = several_count(op, right.value) if type(right.value) is int else None
            return None if several is None else (several, "gpus", ())
        if counted == "torch.cuda.device_count" and isinstance(right, ast.Constant) and isinstance(right.value, int):
            n = right.value
            positive = {ast.Gt: n >= 0, ast.GtE: n >= 1, ast.NotEq: n == 0}
            negative = {ast.Eq: n == 0, ast.Lt: n <= 1, ast.LtE: n == 0}
            if positive.get(type(op)):
                return True, "device", ()
            if negative.get(type(op)):
                return False, "device", ()
        return None

    def _environment(self, node: ast.AST) -> bool:
        """Whether ``node`` reads an environment variable (``os.getenv(...)``,
        ``os.environ.get(...)``, ``os.environ[...]``): a setting the program or its
        launcher chose, which says "cuda" on a Mac too when that is its default, so a
        test of it is no test of CUDA."""
        if isinstance(node, ast.Call):
            return self.names.qualname(node.func) in ("os.getenv", "os.environ.get")
        return isinstance(node, ast.Subscript) and self.names.qualname(node.value) == "os.environ"

    # -- the walk ----------------------------------------------------------
    def find(self, expressions: bool = True) -> list[Region]:
        """The regions; with ``expressions`` False, only those of statements (the caller
        asks :meth:`expression` for the ternaries and ``and`` around what it cares about)."""
        self._import_guards(self.tree)
        self._flags()
        self._tests()
        self._block(self.tree.body)
        if expressions:
            for node in ast.walk(self.tree):
                self.expression(node)
        return self.regions

    def _tests(self) -> None:
        """Tests skipped off CUDA (porter.rulebase.conditions.test_gates): a decorated class or
        function from its first decorator on, or the whole module under its ``pytestmark``."""
        marker = gated_module(self.tree, self.polarity)
        if marker is not None:
            self.regions.append(Region(self.span(self.tree.body[0], self.tree.body[-1]), marker.lineno, "test",
                                       (self.span(marker),)))
            return
        for node in statements(self.tree):
            found = gated_definition(node, self.polarity)
            if found is not None:
                first = node.decorator_list[0]  # type: ignore[attr-defined]
                self.regions.append(Region(self.span(first, node), first.lineno, "test", (self.span(first),)))

    def expression(self, node: ast.AST) -> None:
        if isinstance(node, ast.IfExp):
            self._ternary(node)
        elif isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            self._and(node)

    def _add(self, first: ast.AST, last: ast.AST, guard: ast.AST, found: tuple[bool, str, tuple],
             statement: Optional[ast.stmt] = None) -> None:
        """A region from ``first`` to ``last``; ``statement``: the ``if`` / ``assert`` whose
        test ``guard`` is (a rewrite of the whole statement, such as PT903's
        ``porter_runtime.require_device(...)``, ports the guard too)."""
        spans = (self.span(guard),) + tuple(found[2])
        if statement is not None:
            line, column = self.start(statement)
            spans += (((line, column), (line, column + 1)),)
        self.regions.append(Region(self.span(first, last), guard.lineno, found[1], spans))  # type: ignore[attr-defined]

    def _block(self, body: Sequence[ast.stmt]) -> None:
        for index, stmt in enumerate(body):
            if isinstance(stmt, ast.If):
                self._if(stmt, body[index + 1:])
            elif isinstance(stmt, ast.Assert):
                found = self.polarity(stmt.test)
                if found is not None and found[0] and index + 1 < len(body):
                    self._add(body[index + 1], body[-1], stmt.test, found, stmt)
            for child in child_blocks(stmt):
                self._block(child)

    def _if(self, stmt: ast.If, rest: Sequence[ast.stmt]) -> None:
        found = self.polarity(stmt.test)
        if found is None:
            return
        if found[0]:
            self._add(stmt.body[0], stmt.body[-1], stmt.test, found, stmt)
        elif stmt.orelse:
            self._add(stmt.orelse[0], stmt.orelse[-1], stmt.test, found, stmt)
        elif rest and _exits(stmt.body, self.names):
            self._add(rest[0], rest[-1], stmt.test, found, stmt)

    def _ternary(self, node: ast.IfExp) -> None:
        found = self.polarity(node.test)
        if found is not None:
            arm = node.body if found[0] else node.orelse
            self._add(arm, arm, node.test, found)

    def _and(self, node: ast.BoolOp) -> None:
        for index, value in enumerate(node.values[:-1]):
            found = self.polarity(value)
            if found is not None and found[0]:
                self._add(node.values[index + 1], node.values[-1], value, found)
                return

    # -- try: import ... except ImportError -----------------------------------
    def _import_guards(self, tree: ast.AST) -> None:
        for node in statements(tree):
            if isinstance(node, ast.Try) and self.is_import_guard(node):
                body = node.body + node.orelse
                spans = (self.span(node.body[0], node.body[-1]),)
                self.regions.append(Region(self.span(body[0], body[-1]), node.lineno, "import", spans))
                self._try_flags(node)
                tail = _probe_tail(self.tree, node)
                if tail:  # `except ImportError: return False`, then the function uses the import
                    self.regions.append(Region(self.span(tail[0], tail[-1]), node.lineno, "import", spans))

    def imports_cuda(self, stmts: Sequence[ast.stmt]) -> bool:
        return any(self.cuda_module(name) for name in _imported_modules(stmts))

    def is_import_guard(self, node: ast.Try) -> bool:
        """A ``try`` importing a CUDA-only module with an ``except ImportError`` that is a
        real fallback: it neither raises nor only imports another CUDA-only module."""
        if not self.imports_cuda(node.body):
            return False
        return any(_catches_import_error(h) and self._falls_back(h.body) for h in node.handlers)

    def _falls_back(self, body: Sequence[ast.stmt]) -> bool:
        if body and (isinstance(body[-1], ast.Raise) or (_exits(body, self.names, loops=False)
                                                      and not isinstance(body[-1], ast.Return))):
            return False  # re-raises or exits: a guard that raises is no guard
        if all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) for s in body) and self.imports_cuda(body):
            return False  # FlashAttention-3, else FlashAttention-2: needs CUDA either way
        nested = [s for s in body if isinstance(s, ast.Try)]
        return all(self.is_import_guard(t) or not self.imports_cuda(t.body) for t in nested)

    def _try_flags(self, node: ast.Try) -> None:
        handler_values = {}
        for handler in node.handlers:
            for stmt in handler.body:
                for key, value in _constant_assignments(stmt):
                    handler_values[key] = value
        where = self.span(node)
        for stmt in _flat(node.body + node.orelse):
            for key, value in _constant_assignments(stmt):
                if value is True and handler_values.get(key) is False:
                    self.flags[key] = (True, "import", where)
        for name, value in handler_values.items():
            if value is None:
                self.flags[name] = (True, "import", where)  # `flash_attn_func = None`: `is not None` holds with CUDA
        owner = _enclosing_function(self.tree, node)
        if owner is not None and all(_returns(h.body, False) for h in node.handlers) \
                and (_returns(node.body, None) or _returns(_probe_tail(self.tree, node), None)):
            self.flags[owner.name + "()"] = (True, "import", where)

    def _flags(self) -> None:
        """Names (and ``args.use_cuda``-like targets) assigned exactly once, from a CUDA test."""
        assigned: dict[str, list[ast.Assign]] = {}
        for node in statements(self.tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                key = ast_dotted_name(node.targets[0])
                if key is not None:
                    assigned.setdefault(key, []).append(node)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                key = ast_dotted_name(node.target)
                if key is not None:
                    assigned.setdefault(key, []).append(node)  # type: ignore[arg-type]
        for _ in range(2):  # flags defined from flags
            for key, nodes in assigned.items():
                if key in self.flags or len(nodes) != 1 or not isinstance(nodes[0], ast.Assign):
                    continue
                found = self.polarity(nodes[0].value)
                if found is not None:
                    self.flags[key] = (found[0], found[1], self.span(nodes[0].value))


def _exits(body: Sequence[ast.stmt], names: Names, loops: bool = True) -> bool:
    """The block ends by leaving (return, raise, sys.exit(), and with ``loops`` continue/break)."""
    if not body:
        return False
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)) or (loops and isinstance(last, (ast.Continue, ast.Break))):
        return True
    if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
        func = last.value.func
        return (names.qualname(func) or ast_dotted_name(func) or "") in _EXIT_CALLS
    return False


def _flat(stmts: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """``stmts`` and the statements of the ``if`` blocks among them (``try: if ENABLED:
    from xformers.ops import ...`` is still the ``try``'s import)."""
    for stmt in stmts:
        yield stmt
        if isinstance(stmt, ast.If):
            yield from _flat(stmt.body)
            yield from _flat(stmt.orelse)


def _imported_modules(stmts: Sequence[ast.stmt]) -> Iterator[str]:
    for stmt in _flat(stmts):
        if isinstance(stmt, ast.Import):
            yield from (alias.name for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level:
            yield stmt.module
            yield from (f"{stmt.module}.{alias.name}" for alias in stmt.names)


#: Exception names whose handler catches a failed import (the LibCST rules read the same set).
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException", "OSError"}


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((ast_dotted_name(k) or "").rsplit(".", 1)[-1] in IMPORT_ERRORS for k in kinds)


def _constant_assignments(stmt: ast.stmt) -> Iterator[tuple[str, object]]:
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value in (True, False, None):
        for target in stmt.targets:
            key = ast_dotted_name(target)
            if key is not None:
                yield key, stmt.value.value


def _returns(body: Sequence[ast.stmt], value: Optional[bool]) -> bool:
    """``value`` None: anything that can be true (``version.parse(...) >= ...`` once imported)."""
    if value is None:
        return any(isinstance(s, ast.Return) and s.value is not None
                   and not (isinstance(s.value, ast.Constant) and not s.value.value) for s in body)
    return any(isinstance(s, ast.Return) and isinstance(s.value, ast.Constant) and s.value.value is value
               for s in body)


def _probe_tail(tree: ast.AST, node: ast.Try) -> list[ast.stmt]:
    """The statements after ``node`` in the function whose body it is, where every handler
    of ``node`` returns: they run only when its import succeeded (llm-foundry's
    ``is_flash_v2_installed``: ``try: import flash_attn`` / ``except: return False`` /
    ``return version.parse(flash_attn.__version__) >= ...``)."""
    if not node.handlers or not all(h.body and isinstance(h.body[-1], ast.Return) for h in node.handlers):
        return []
    owner = _enclosing_function(tree, node)
    if owner is None:
        return []
    return owner.body[owner.body.index(node) + 1:]


def probe_functions(tree: ast.Module, data: bytes, cuda_module: Callable[[str], bool] = is_cuda_only_module) -> list[str]:
    """The names of the module's functions that return False when their ``try`` import of
    a CUDA-only package fails, and of its flags such a ``try`` sets True: the ``name()``
    and ``name`` flags the guard pass sets (porter.project.flags.import_probes)."""
    finder = GuardFinder(tree, data.splitlines(), cuda_module)
    finder.find(expressions=False)
    return [key[:-2] if key.endswith("()") else key for key, (holds, kind, _) in finder.flags.items()
            if holds and kind == "import" and "." not in key]


def _enclosing_function(tree: ast.AST, target: ast.AST) -> Optional[ast.FunctionDef]:
    for node in statements(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and target in node.body:
            return node  # type: ignore[return-value]
    return None


#: The last bytes parsed and their tree. The pre-filter, the guard pass and the ledger
#: each parse the file in turn, and ``ast.parse`` costs as much as a tenth of LibCST's
#: parse; nothing changes a tree once made.
_last: tuple[Optional[bytes], Optional[ast.Module]] = (None, None)


def parse(data: bytes) -> Optional[ast.Module]:
    """The file's ``ast``, or None where this Python can't parse it (no warnings printed)."""
    global _last
    if _last[0] is not None and _last[0] == data:
        return _last[1]
    tree = parse_uncached(data)
    _last = (data, tree)
    return tree


def parse_uncached(data: bytes) -> Optional[ast.Module]:
    """``ast.parse`` without its warnings; None where Python can't parse the file. For a
    pass over many files, which would only churn ``parse``'s one-entry cache."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def cuda_regions(tree: ast.Module, data: bytes, cuda_module: Callable[[str], bool] = is_cuda_only_module) -> list[Region]:
    """Every CUDA-only region of a parsed file (``data``: its bytes, for columns)."""
    return GuardFinder(tree, data.splitlines(), cuda_module).find()


def guard_ported(region: Region, rewrites: Iterable[Position]) -> bool:
    """Whether a rewrite (by its start) lies in the guard's own code."""
    return any(within(region.guard_spans, p) for p in rewrites)
