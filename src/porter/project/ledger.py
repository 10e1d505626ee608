"""The ledger: every CUDA touchpoint of a file, each in exactly one state.

Independently of the rules, the ledger finds with the stdlib ``ast`` what ties a file
to CUDA (the *touchpoints*): imports of CUDA-only modules (porter.rulebase.cuda_packages),
imports that resolve nowhere (porter.project.known_modules), ``torch.cuda.*``, ``.cuda()``,
``"cuda"`` / ``"nccl"`` strings, ``cpp_extension`` builds, ``is_cuda`` tests, DDP's
``device_ids`` / ``output_device``, and CUDA environment variables. Then it accounts
for each, in the first state that applies:

- **rewritten** / **reported**: a rule's rewrite or finding covers it (by position:
  the finding starts on the touchpoint, inside it, or on the expression or statement
  around it);
- **guarded**: it only runs where CUDA is present (porter.rulebase.conditions.guards); the guard's line
  is recorded;
- **inert**: it can't fail off CUDA (a message, a docstring, a comparison, a
  ``torch.cuda`` call that answers without CUDA); the reason is recorded;
- **unaccounted**: anything else. Each gets a finding of the catch-all code PT999
  saying what was seen and why it may fail off CUDA.

The ledger reads the file's bytes, never the pre-filter's results, so it is the same
whether or not the pre-filter ran; a byte check first keeps the parse to the files
that can hold a touchpoint.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Iterable, Iterator, Optional, Sequence

from porter.project import selectors
from porter.project.known_modules import KNOWN, is_standard
from porter.rulebase.codeview import code_view, prefilter_enabled
from porter.rulebase.cuda_packages import (
    advice_for,
    is_cuda_only_module,
    looks_compiled,
)
from porter.rulebase.conditions.guards import (
    GuardFinder,
    Region,
    child_blocks,
    guard_ported,
    parse,
)
from porter.rulebase.matching import ast_dotted_name
from porter.rulebase.rule import Finding, one_line
from porter.rulebase.conditions.test_gates import mocks_cuda

CODE, NAME = "PT999", "cuda-touchpoint"
STATES = ("rewritten", "reported", "guarded", "inert", "unaccounted")


@dataclass(frozen=True)
class Touchpoint:
    """One CUDA touchpoint and how the port accounts for it. Plain, picklable data."""

    line: int
    column: int  # 1-based, as a Finding's
    kind: str
    what: str
    state: str
    #: the rule code (rewritten, reported), "line N" (guarded), the reason (inert),
    #: or why it may fail off CUDA (unaccounted)
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TreeContext:
    """What the whole scanned tree tells about imports (porter.project.known_modules)."""

    local: frozenset[str] = frozenset()
    declared: frozenset[str] = frozenset()
    #: The tree's root and its Python sources and notebooks (relative, "/" separators):
    #: where porter.edits.probes looks for another module reading a flag. Empty: one file alone.
    root: str = ""
    sources: frozenset[str] = frozenset()
    #: Extension modules the tree's own build compiles (CUDAExtension / CppExtension names).
    extensions: frozenset[str] = frozenset()

    def is_local(self, root: str) -> bool:
        return root in self.local

    def resolves(self, root: str) -> bool:
        return root in self.local or root in self.declared or root in KNOWN or is_standard(root) \
            or root == "porter_runtime"


def counts(touchpoints: Iterable[Touchpoint]) -> dict[str, int]:
    found = dict.fromkeys(STATES, 0)
    for t in touchpoints:
        found[t.state] += 1
    return found


# -- which files can hold a touchpoint --------------------------------------

#: What a touchpoint looks like in bytes: the ledger parses only files with one of these
#: (or an import that may not resolve), and looks only at the statements on their lines.
_WORDS = re.compile(rb"cuda|CUDA|nccl|NCCL|device_ids|output_device")
#: The same words, each found at C speed (an alternation is tried at every position):
#: most files hold none, and ``_WORDS`` then need not run.
_WORD_LITERALS = (b"cuda", b"CUDA", b"nccl", b"NCCL", b"device_ids", b"output_device")
_TRIGGER = re.compile(rb"\.cuda\b|\bcuda\.|[\"']cuda\b|[\"']nccl\b|(?:CUDA|NCCL)_[A-Z_]+|is_cuda|CUDAExtension"
                      rb"|device_ids|output_device")
#: Names imported from torch.cuda or cpp_extension are used on lines that don't say so:
#: then every statement of the file is looked at.
_WHOLE_FILE = (
    re.compile(rb"from[ \t]+torch\.(?:cuda|utils\.cpp_extension)\b"),
    re.compile(rb"import[ \t]+torch\.(?:cuda|utils\.cpp_extension)[ \t]+as\b"),
    re.compile(rb"from[ \t]+torch(?:\.utils)?[ \t]+import[^\n]*\b(?:cuda|cpp_extension)\b"),
)
#: Import statements: ``from X import`` (X may be relative) or ``import a.b as c, d``;
#: each pattern starts with its keyword, so that it is searched for at C speed.
_FROM_IMPORT = re.compile(rb"from(?<=\bfrom)[ \t]+(\.*[\w.]*)[ \t]+import\b")
_PLAIN_IMPORT = re.compile(rb"import(?<=\bimport)[ \t]+([^\n#;]+)")


@lru_cache(maxsize=8192)
def _touches(context: TreeContext, root: bytes) -> bool:
    """Whether an import of ``root`` may be a touchpoint (CUDA-only, or resolving nowhere)."""
    name = root.decode("ascii", "replace")
    return bool(name) and not context.is_local(name) and (is_cuda_only_module(name) or not context.resolves(name))


def _import_roots(data: bytes) -> set[bytes]:
    roots = set()
    for module, names in _imports(data):
        if module:
            roots.add(module.split(b".")[0])
        else:
            for part in names.strip(b"()\\ \t\r").split(b","):
                words = part.split()
                if words:
                    roots.add(words[0].split(b".")[0])
    return roots


def _imports(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(module of a ``from`` import, names of a plain import) of each import statement,
    left to right, no match inside an earlier one's text (``from x import`` is no
    plain import of the names after it)."""
    if b"import" not in data:
        return
    matches = sorted([*_FROM_IMPORT.finditer(data), *_PLAIN_IMPORT.finditer(data)], key=lambda m: m.start())
    end = 0
    for match in matches:
        if match.start() >= end:
            end = match.end()
            yield (match.group(1), b"") if match.re is _FROM_IMPORT else (b"", match.group(1))


def trigger_lines(data: bytes, context: TreeContext) -> list[int]:
    """The lines where ``data`` may hold a touchpoint, all of them when names from
    torch.cuda are imported (cheap: substring and regex searches in the bytes)."""
    offsets = []
    for hit in _WORDS.finditer(data) if any(w in data for w in _WORD_LITERALS) else ():
        start, end = data.rfind(b"\n", 0, hit.start()) + 1, data.find(b"\n", hit.end())
        if _TRIGGER.search(data, max(start, hit.start() - 2), end if end >= 0 else len(data)):
            offsets.append(hit.start())
    if offsets and any(p.search(data) for p in _WHOLE_FILE):
        return list(range(1, data.count(b"\n") + 2))
    wanted = [r for r in _import_roots(data) if _touches(context, r)]
    if wanted:
        pattern = re.compile(rb"\b(?:from|import)[ \t]+(?:[^\n#;]*[ \t,])?(?:" + b"|".join(
            re.escape(r) for r in wanted) + rb")\b")
        offsets += [m.start() for m in pattern.finditer(data)]
    if not offsets:
        return []
    newlines = [m.start() for m in _NEWLINE.finditer(data)]
    return sorted({bisect.bisect_left(newlines, o) + 1 for o in offsets})


_NEWLINE = re.compile(rb"\n")


def _triggered_in_code(data: bytes, context: TreeContext) -> bool:
    """Whether a trigger is left once comments and prose strings are out
    (``porter.rulebase.codeview``): no touchpoint is ever in one, so the file needs no parse."""
    if not prefilter_enabled():
        return True
    code = code_view(data)
    return code is None or code is data or bool(trigger_lines(code, context))


# -- finding them ------------------------------------------------------------

_CUDA_WORD = re.compile(r"cuda|nccl", re.I)
#: A device or backend spelled in a string: "cuda", "cuda:1", "cuda:{}", "nccl".
_DEVICE_SPEC = re.compile(r"^\s*(cuda(:(\d+|\{\w*\}|%[ds]))?|nccl)\s*$")
_ENV = re.compile(r"^(CUDA_\w+|NCCL_\w+|PYTORCH_CUDA_ALLOC_CONF|PYTORCH_NO_CUDA_MEMORY_CACHING|TORCH_CUDA_ARCH_LIST)$")
#: torch.cuda functions that answer without CUDA (checked on a CPU build of torch 2.13)
_SAFE_CUDA = frozenset({
    "is_available", "device_count", "is_initialized", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "is_bf16_supported", "is_tf32_supported", "get_arch_list", "get_rng_state_all",
    "amp.autocast", "amp.GradScaler", "amp.custom_fwd", "amp.custom_bwd", "amp", "OutOfMemoryError",
})
_MESSAGE_CALLS = frozenset({
    "print", "warn", "warning", "warnings", "info", "debug", "error", "exception", "critical", "log",
    "warning_once", "info_once", "write", "echo", "secho", "set_description", "set_postfix_str",
    "add_text", "logger", "format", "join", "deprecate", "warn_once",
})
_MESSAGE_KEYWORDS = frozenset({"help", "description", "msg", "message", "metavar", "epilog", "desc", "doc", "title"})
_COMPARING = frozenset({"startswith", "endswith", "find", "count", "index", "rfind", "match", "search", "fullmatch"})
_ENV_READS = frozenset({"get", "getenv", "setdefault", "pop", "putenv", "unsetenv"})
_STOP = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)


class _Scanner:
    def __init__(self, tree: ast.Module, data: bytes, context: TreeContext) -> None:
        self.tree = tree
        self.context = context
        self.finder = GuardFinder(tree, data.splitlines(), self._cuda_module)
        self.names = self.finder.names
        self.parents: dict[ast.AST, ast.AST] = {}
        self.found: list[tuple[ast.AST, str, str, str, Optional[str]]] = []
        self._functions: Optional[dict] = None  # the module's functions, when a default needs them

    def _cuda_module(self, name: str) -> bool:
        root = name.split(".")[0]
        return not self.context.is_local(root) and (is_cuda_only_module(name) or not self.context.resolves(root))

    def _add(self, node: ast.AST, kind: str, what: str, why: str, inert: Optional[str] = None) -> None:
        self.found.append((node, kind, what, why, inert))

    def scan(self, lines: Sequence[int]) -> None:
        """Look at the statements that span one of ``lines`` (where the bytes show a
        trigger), and at every node inside them."""
        self._statements(self.tree, self.tree.body, sorted(lines))

    def _statements(self, parent: ast.AST, body: Sequence[ast.AST], lines: Sequence[int]) -> None:
        for stmt in body:
            first = bisect.bisect_left(lines, stmt.lineno)  # type: ignore[attr-defined]
            if first == len(lines) or lines[first] > stmt.end_lineno:  # type: ignore[attr-defined]
                continue
            self.parents[stmt] = parent
            for child in ast.iter_child_nodes(stmt):
                self.parents[child] = stmt
                if isinstance(child, ast.stmt):
                    continue
                if isinstance(child, (ast.ExceptHandler, ast.match_case)):
                    self._handler(child, lines)
                else:
                    self._walk(child)
            for block in child_blocks(stmt, nested=False):
                self._statements(stmt, block, lines)
            self._node(stmt)

    def _handler(self, handler: ast.AST, lines: Sequence[int]) -> None:
        for child in ast.iter_child_nodes(handler):
            self.parents[child] = handler
            if not isinstance(child, ast.stmt):
                self._walk(child)
        self._statements(handler, handler.body, lines)  # type: ignore[attr-defined]

    def _walk(self, top: ast.AST) -> None:
        """Every node under an expression (no statements there)."""
        self._node(top)
        for node in ast.walk(top):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
                self._node(child)

    def _node(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            self._import(node)
        elif isinstance(node, (ast.Attribute, ast.Name)):
            self._reference(node)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _CUDA_WORD.search(node.value):
            self._string(node)
        elif isinstance(node, ast.JoinedStr) and node.values and _is_cuda_prefix(node.values[0]):
            self._add(node, "string", "f'cuda:{...}'", "names a CUDA device: CUDA-only where it is used",
                      self._string_use(node, ""))

    # -- imports
    def _import(self, node: ast.AST) -> None:
        if isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                return
            modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            modules = [a.name for a in node.names]
        if self.context.is_local(modules[0].split(".")[0]):
            return  # the repository's own module (a local adam_atan2.py shadows the package)
        for module in modules:
            if is_cuda_only_module(module):
                self._add(node, "cuda-import", f"import {module}",
                          "a CUDA-only module: ModuleNotFoundError (or a CUDA error) where CUDA is absent",
                          self._type_checking(node))
                return
        for module in modules[:1] if isinstance(node, ast.ImportFrom) else modules:
            root = module.split(".")[0]
            if not self.context.resolves(root):
                self._unresolved(node, module, root)
                return

    def _unresolved(self, node: ast.AST, module: str, root: str) -> None:
        """An import that resolves nowhere is a CUDA touchpoint only with CUDA evidence:
        a compiled extension's name, or an extension the tree's own setup.py compiles. Any
        other is a dependency the repository does not declare (a pip package, most
        often): no CUDA claim, and so no finding for a human."""
        what = f"import {module}"
        why = "resolves to no module of the tree, the standard library or the declared dependencies"
        if looks_compiled(root) or root in self.context.extensions:
            likely = ("a compiled CUDA extension by its name" if looks_compiled(root)
                      else "a CUDA extension the repository's own build compiles")
            self._add(node, "unresolved-import", what, f"{why} ({likely}): ModuleNotFoundError off CUDA",
                      self._type_checking(node) or self._optional(node))
        else:
            self._add(node, "undeclared-import", what, why,
                      self._type_checking(node) or self._optional(node)
                      or "not installed and not declared, with no sign of CUDA: a dependency to add to the "
                         "requirements, not a CUDA blocker")

    def _optional(self, node: ast.AST) -> Optional[str]:
        """An optional dependency imported behind its own availability test
        (``if is_torchcodec_available():``, ``if _APEX_AVAILABLE:``)."""
        child = node
        for parent in self._ancestors(node):
            if isinstance(parent, ast.If) and _AVAILABILITY.search(ast.unparse(parent.test)):
                return f"an optional dependency, imported behind `if {_short(ast.unparse(parent.test))}:`"
            for block in child_blocks(parent):
                if child in block:
                    check = next((s for s in block[:block.index(child)] if self._requires(s)), None)
                    if check is not None:
                        return f"an optional dependency, checked first at line {check.lineno}"
            child = parent
        return None

    def _requires(self, stmt: ast.stmt) -> bool:
        """``if not is_x_available(): raise ...`` or ``requires_backends(...)``: a check
        that stops with a clear message where an optional dependency is missing."""
        if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], ast.Raise):
            return bool(_AVAILABILITY.search(ast.unparse(stmt.test)))
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            name = ast_dotted_name(stmt.value.func) or ""
            return "require" in name.rsplit(".", 1)[-1]
        return False

    def _type_checking(self, node: ast.AST) -> Optional[str]:
        for parent in self._ancestors(node):
            if isinstance(parent, ast.If) and (self.names.qualname(parent.test) or ast.unparse(parent.test)).endswith(
                    "TYPE_CHECKING"):
                return "only imported for type checking"
        return None

    # -- torch.cuda.*, cpp_extension, is_cuda
    def _reference(self, node: ast.AST) -> None:
        if isinstance(node, ast.Attribute) and node.attr == "is_cuda":
            if isinstance(node.ctx, ast.Load):
                self._add(node, "is-cuda", "x.is_cuda", "", "a test: False off CUDA")
            return
        parent = self.parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return  # not the end of the chain
        name = self.names.qualname(node)
        if name is None:
            return
        if name.startswith("torch.cuda.") or name == "torch.cuda":
            self._torch_cuda(node, name[len("torch.cuda."):], parent)
        elif name.startswith("torch.utils.cpp_extension."):
            self._extension(node, name.rsplit(".", 1)[-1], parent)

    def _torch_cuda(self, node: ast.AST, rest: str, parent: Optional[ast.AST]) -> None:
        called = isinstance(parent, ast.Call) and parent.func is node
        what = f"torch.cuda.{rest}" + ("()" if called else "")
        why = "needs CUDA: it raises (or returns nothing usable) where CUDA is absent"
        inert = None
        if rest in _SAFE_CUDA or rest.split(".")[0] in ("is_available", "device_count"):
            inert = "answers without CUDA (checked on a CPU build of torch)"
        elif not called and self._type_test(node):
            inert = "a type or exception test"
        elif not called and self._annotation(node):
            inert = "a type annotation: the name exists without CUDA"
        elif not called and isinstance(parent, ast.Dict) and node in parent.values and any(
                isinstance(k, ast.Constant) and isinstance(k.value, str) for k in parent.keys):
            inert = "a value in a table keyed by name (called where that name applies)"
        elif not called and isinstance(parent, ast.Call) and node in parent.args and (
                self.names.qualname(parent.func) or "").startswith("porter_runtime."):
            # porter's own rewrite: porter_runtime.set_default_tensor_type(torch.cuda.HalfTensor)
            inert = f"handed to `{self.names.qualname(parent.func)}`, which maps it off CUDA"
        what = what.rstrip(".")
        self._add(node, "torch.cuda", what, why, inert)

    def _annotation(self, node: ast.AST) -> bool:
        child = node
        for parent in self._ancestors(node):
            if isinstance(parent, (ast.arg, ast.AnnAssign)) and parent.annotation is child:
                return True
            if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent.returns is child:
                return True
            if isinstance(parent, ast.stmt):
                return False
            child = parent
        return False

    def _type_test(self, node: ast.AST) -> bool:
        for parent in self._ancestors(node):
            if isinstance(parent, ast.ExceptHandler):
                return True
            if isinstance(parent, ast.Call) and getattr(parent.func, "id", None) in ("isinstance", "issubclass"):
                return True
            if isinstance(parent, ast.stmt):
                return False
        return False

    def _extension(self, node: ast.AST, last: str, parent: Optional[ast.AST]) -> None:
        if last == "CUDAExtension":
            self._add(node, "cpp-extension", "CUDAExtension", "needs nvcc and a CUDA toolkit to build")
        elif last in ("load", "load_inline") and isinstance(parent, ast.Call) and parent.func is node:
            if last == "load_inline" and not any(k.arg == "cuda_sources" for k in parent.keywords):
                return
            if last == "load" and not self._cuda_sources(parent):
                return
            self._add(node, "cpp-extension", f"cpp_extension.{last}()",
                      "builds CUDA sources at run time: needs nvcc and a CUDA GPU")

    @staticmethod
    def _cuda_sources(call: ast.Call) -> bool:
        """A ``load`` call with a ``.cu`` source, or with sources porter can't read."""
        sources = call.args[1:2] + [k.value for k in call.keywords if k.arg == "sources"]
        for source in sources:
            strings = [n.value for n in ast.walk(source) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            if any(s.endswith((".cu", ".cuh")) for s in strings) or not strings:
                return True
        return False

    # -- .cuda(), DDP's devices
    def _call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "cuda" and self.names.qualname(func) is None:
            self._add(node, "cuda-method", ".cuda()", "moves to a CUDA device: raises where CUDA is absent")
        for kw in node.keywords:
            if kw.arg in ("device_ids", "output_device"):
                none = isinstance(kw.value, ast.Constant) and kw.value.value is None
                ported = isinstance(kw.value, ast.Call) and (self.names.qualname(kw.value.func) or "").startswith(
                    "porter_runtime.")
                self._add(kw.value, "ddp-device", f"{kw.arg}=",
                          "names CUDA devices: DistributedDataParallel raises with device_ids off CUDA",
                          "None: no device named" if none else "porter_runtime picks it per device" if ported else None)

    # -- strings
    def _string(self, node: ast.Constant) -> None:
        """A CUDA device or backend name, or a CUDA environment variable's name. Other
        text that mentions CUDA (messages, keys, file names) is no touchpoint."""
        value = node.value
        if _ENV.match(value):
            self._add(node, "env", value, "read with [] it raises KeyError where it is unset",
                      self._env_use(node))
        elif _DEVICE_SPEC.match(value) and not isinstance(self.parents.get(node), ast.JoinedStr):
            self._add(node, "string", repr(value), "names a CUDA device or the NCCL backend: CUDA-only where "
                      "it is used", self._string_use(node, value))

    def _ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def _env_use(self, node: ast.AST) -> Optional[str]:
        parent = self.parents.get(node)
        if isinstance(parent, ast.Subscript):
            return "sets the variable: no effect without CUDA" if not isinstance(parent.ctx, ast.Load) else None
        reason = self._string_use(node, "")
        if reason is not None:
            return reason
        if isinstance(parent, ast.Call) and isinstance(parent.func, (ast.Attribute, ast.Name)):
            last = parent.func.attr if isinstance(parent.func, ast.Attribute) else parent.func.id
            if last in _ENV_READS:
                return "read with a default: no error where it is unset"
        return "names the variable only (no read with [])"

    def _string_use(self, node: ast.AST, value: str) -> Optional[str]:
        child = node
        for parent in self._ancestors(node):
            reason = self._use_in(parent, child)
            if reason is not None:
                return reason
            if isinstance(parent, ast.stmt):
                if isinstance(parent, ast.Expr) and parent.value is node:
                    return "a docstring or bare string"
                if isinstance(parent, (ast.Raise, ast.Assert)):
                    return "message text"
                break
            child = parent
        if value and " " in value.strip() and not _DEVICE_SPEC.match(value.strip()):
            return "prose, not a device, backend or variable name"
        return None

    def _selects_by_name(self, arguments: ast.arguments, default: ast.AST) -> bool:
        """A parameter default only compared by name (porter.project.selectors)."""
        function = self.parents.get(arguments)
        param = selectors.defaulted_parameter(arguments, default)
        if param is None or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        if self._functions is None:
            self._functions = selectors.module_functions(self.tree)
        return selectors.only_compared(function, param.arg, self._functions)

    def _lookalike(self, func: ast.AST) -> bool:
        """``torch.device(...)`` where ``torch`` is imported from something else."""
        spelled, name = ast_dotted_name(func), self.names.qualname(func)
        return spelled is not None and name is not None and spelled.split(".")[0] == "torch" \
            and name.split(".")[0] != "torch"

    def _use_in(self, parent: ast.AST, child: ast.AST) -> Optional[str]:
        if isinstance(parent, ast.Compare):
            return "compared with: a comparison can't fail off CUDA"
        if isinstance(parent, ast.arguments) and self._selects_by_name(parent, child):
            return "the default of a parameter that is only compared by name (`impl == 'cuda'`), never a device"
        if isinstance(parent, ast.keyword) and parent.arg in _MESSAGE_KEYWORDS:
            return "message text"
        if isinstance(parent, ast.keyword) and parent.arg == "choices":
            return "one of the choices offered"
        if isinstance(parent, ast.Dict) and child in parent.keys:
            return "a dictionary key"
        if isinstance(parent, ast.Dict) and any(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                for k in parent.keys):
            return "a value in a table keyed by name"
        if isinstance(parent, (ast.List, ast.Tuple, ast.Set)) and sum(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in parent.elts) > 1:
            return "one of several names listed"
        if isinstance(parent, ast.Call) and getattr(parent.func, "id", None) in ("getattr", "hasattr", "setattr") \
                and len(parent.args) > 1 and parent.args[1] is child:
            return "an attribute name"
        if isinstance(parent, ast.Call) and child is not parent.func:
            func = parent.func
            last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if last in _MESSAGE_CALLS or "log" in last.lower():
                return "message text"
            if last in _COMPARING:
                return "compared with: a comparison can't fail off CUDA"
            if (self.names.qualname(func) or "").startswith("porter_runtime."):
                return f"handed to `{self.names.qualname(func)}`, which maps it off CUDA"
            if self._lookalike(func):
                return f"`{ast_dotted_name(func)}` here is `{self.names.qualname(func)}`, not PyTorch"
        if isinstance(parent, ast.Call) and child is parent.func and isinstance(parent.func, ast.Attribute):
            return None
        return None


# -- accounting --------------------------------------------------------------

_AVAILABILITY = re.compile(r"available|installed|enabled|has_\w+", re.I)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_cuda_prefix(part: ast.AST) -> bool:
    return isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value.lower() in ("cuda:", "cuda")


def account(
    data: bytes,
    path: str,
    findings: Sequence[Finding],
    context: TreeContext = TreeContext(),
    ignores: Optional[dict[int, frozenset[str]]] = None,
    new: Optional[bytes] = None,
) -> list[Touchpoint]:
    """Every touchpoint of one Python file, each in exactly one state. ``new``: the
    migrated bytes, when they differ (an import whose every use a rule rewrote is gone
    from them: the port removed it)."""
    lines = trigger_lines(data, context)
    if not lines or not _triggered_in_code(data, context):
        return []
    tree = parse(data)
    if tree is None:
        return []
    scanner = _Scanner(tree, data, context)
    scanner.scan(lines)
    if not scanner.found:
        return []
    regions = scanner.finder.find(expressions=False)
    for node, *_ in scanner.found:
        for parent in scanner._ancestors(node):
            scanner.finder.expression(parent)
    rewrites = [(f.line, f.column - 1) for f in findings if f.action == "rewrite"]
    open_regions = [r for r in regions if not (r.kind == "device" and guard_ported(r, rewrites))]
    by_start: dict[tuple[int, int], list[Finding]] = {}
    for f in findings:
        if f.code != CODE:
            by_start.setdefault((f.line, f.column - 1), []).append(f)
    starts = _Starts(findings)
    out = []
    for node, kind, what, why, inert in scanner.found:
        start, end = scanner.finder.start(node), scanner.finder.end(node)
        state, detail = _state(scanner, node, (start, end), by_start, starts, open_regions, inert, ignores)
        if state == "unaccounted" and new is not None and kind.endswith("import"):
            state, detail = _removed(node, what.split()[-1], new, findings) or (state, detail)
        if state == "unaccounted" and what == "'nccl'":
            state, detail = _backend_ported(findings, data) or (state, detail)
        if state == "unaccounted":
            state, detail = _mocked(scanner, node) or (state, detail)
        out.append(Touchpoint(start[0], start[1] + 1, kind, what, state, detail if state != "unaccounted" else why))
    out.sort(key=lambda t: (t.line, t.column, t.kind))
    return out


class _Starts:
    """The findings (other than the ledger's own) sorted by where they start, so that
    those inside one span are found by bisection: a scan of every finding for each
    touchpoint made a file with 8,000 rewrites quadratic."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.entries = sorted(((f.line, f.column - 1), i, f) for i, f in enumerate(findings) if f.code != CODE)
        self.keys = [key for key, _, _ in self.entries]

    def within(self, start, end) -> list[Finding]:
        """The findings starting in [start, end), in the order they were made."""
        chosen = self.entries[bisect.bisect_left(self.keys, start):bisect.bisect_left(self.keys, end)]
        return [f for _, _, f in sorted(chosen, key=lambda entry: entry[1])]


def _state(scanner, node, span, by_start, findings, regions: Sequence[Region], inert, ignores) -> tuple[str, str]:
    found = _covering(scanner, node, span, by_start, findings)
    rewrite = next((f for f in found if f.action == "rewrite"), None)
    if rewrite is not None:
        return "rewritten", rewrite.code
    if found:
        return "reported", found[0].code
    guard = next((r for r in regions if r.encloses(span)), None)
    if guard is not None:
        return "guarded", f"line {guard.guard_line}"
    if inert is not None:
        return "inert", inert
    codes = (ignores or {}).get(span[0][0])
    if codes is not None and (not codes or any(CODE.startswith(c) for c in codes)):
        return "inert", "silenced by a `# porter: ignore` comment"
    return "unaccounted", ""


def _mocked(scanner: _Scanner, node: ast.AST) -> Optional[tuple[str, str]]:
    """("inert", why) for a touchpoint in a test that mocks CUDA or the process group
    (porter.rulebase.conditions.test_gates.mocks_cuda): what it hands CUDA reaches the mock."""
    for parent in scanner._ancestors(node):
        line = mocks_cuda(parent) if isinstance(parent, ast.stmt) else None
        if line is not None:
            return "inert", f"handed to a mock: the test mocks CUDA or the process group (line {line})"
    return None


def _backend_ported(findings: Sequence[Finding], data: bytes) -> Optional[tuple[str, str]]:
    """A backend name matters only where the process group starts: when the file's
    ``init_process_group`` is (or became) the runtime's (gloo off CUDA), "nccl" is handled."""
    for f in findings:
        if f.action == "rewrite" and "porter_runtime.init_process_group" in f.after:
            return "rewritten", f.code
    if b"porter_runtime.init_process_group(" in data:
        return "inert", "the process group starts through porter_runtime.init_process_group (gloo off CUDA)"
    return None


def _removed(node: ast.AST, module: str, new: bytes, findings: Sequence[Finding]) -> Optional[tuple[str, str]]:
    """("rewritten", the code of a rewrite of its names) when the port removed the import."""
    if re.search(rb"\b(?:import|from)[ \t]+" + re.escape(module.encode()) + rb"\b", new):
        return None
    names = [a.asname or a.name.split(".")[0] for a in node.names]  # type: ignore[attr-defined]
    rewrites = [f for f in findings if f.action == "rewrite"]
    by_name = [f for f in rewrites if any(n in f.before for n in names)]
    chosen = (by_name or rewrites)[:1]
    return ("rewritten", chosen[0].code) if chosen else None


def _covering(scanner: _Scanner, node: ast.AST, span, by_start, starts: _Starts) -> list[Finding]:
    """The findings that cover a touchpoint: starting inside it, or on an enclosing
    expression or statement (a review only up to the touchpoint's own statement; a
    rewrite up to the enclosing function, since it replaced all of the node)."""
    start, end = span
    found = starts.within(start, end)
    in_statement = True
    child = node
    for parent in scanner._ancestors(node):
        if isinstance(parent, _STOP):
            break
        if isinstance(parent, ast.arguments):  # a default: a rewrite of it starts on the parameter's name
            child, parent = parent, selectors.defaulted_parameter(parent, child) or parent
        else:
            child = parent
        if not hasattr(parent, "lineno"):
            continue  # withitem, comprehension, arguments: no position of their own
        for f in by_start.get(scanner.finder.start(parent), ()):
            if in_statement or f.action == "rewrite":
                found.append(f)
        if isinstance(parent, ast.stmt):
            in_statement = False
    return found


def finding_for(path: str, touchpoint: Touchpoint, source_line: str) -> Finding:
    """The catch-all finding of an unaccounted touchpoint."""
    return Finding(
        code=CODE, rule=NAME, path=path, line=touchpoint.line, column=touchpoint.column, action="review",
        message=f"CUDA touchpoint `{touchpoint.what}` that no rule ported or named: {touchpoint.detail}",
        before=one_line(source_line), suggestion=_suggestion(touchpoint),
    )


def _suggestion(touchpoint: Touchpoint) -> str:
    if touchpoint.kind in ("cuda-import", "unresolved-import"):
        return advice_for(touchpoint.what.split()[-1])
    return {
        "torch.cuda": "guard it with `if torch.cuda.is_available():` or use the porter_runtime equivalent",
        "cuda-method": "`.to(porter_runtime.device())`",
        "string": "porter_runtime.device() for a device, porter_runtime.distributed_backend() for a backend",
        "env": "os.environ.get(...) with a default",
        "cpp-extension": "build the extension only where CUDA is present and keep a PyTorch path",
        "ddp-device": "device_ids only where the device is CUDA (None elsewhere)",
    }.get(touchpoint.kind, "")


def scan_failure(path: str, exc: Exception) -> Finding:
    """The finding that says the ledger could not account for a file (a porter bug)."""
    return Finding(code=CODE, rule=NAME, path=path, line=1, column=1, action="review",
                   message=f"porter's ledger could not scan this file ({type(exc).__name__}: {exc}); "
                           "its CUDA touchpoints are not accounted for")


def catch_all(path: str, data: bytes, touchpoints: Sequence[Touchpoint]) -> list[Finding]:
    """One PT999 finding per unaccounted touchpoint."""
    lines = data.decode("utf-8", "replace").splitlines()
    return [finding_for(path, t, lines[t.line - 1] if t.line <= len(lines) else "")
            for t in touchpoints if t.state == "unaccounted"]
