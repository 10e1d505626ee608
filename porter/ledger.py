"""The ledger: every CUDA touchpoint of a file, each in exactly one state.

Independently of the rules, the ledger finds with the stdlib ``ast`` what ties a file
to CUDA (the *touchpoints*): imports of CUDA-only modules (porter.cuda_packages),
imports that resolve nowhere (porter.known_modules), ``torch.cuda.*``, ``.cuda()``,
``"cuda"`` / ``"nccl"`` strings, ``cpp_extension`` builds, ``is_cuda`` tests, DDP's
``device_ids`` / ``output_device``, and CUDA environment variables. Then it accounts
for each, in the first state that applies:

- **rewritten** / **reported**: a rule's rewrite or finding covers it (by position:
  the finding starts on the touchpoint, inside it, or on the expression or statement
  around it);
- **guarded**: it only runs where CUDA is present (porter.guards); the guard's line
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
import re
import warnings
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator, Optional, Sequence

from porter.cuda_packages import advice_for, is_cuda_only_module, looks_compiled
from porter.guards import GuardFinder, Region, dotted, guard_ported
from porter.known_modules import KNOWN, is_standard
from porter.rule import Finding

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
    """What the whole scanned tree tells about imports (porter.known_modules)."""

    local: frozenset[str] = frozenset()
    declared: frozenset[str] = frozenset()

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

_TRIGGER = re.compile(rb"(?i:cuda|nccl)|device_ids|output_device")
_IMPORT_LINE = re.compile(rb"^[ \t]*(?:from[ \t]+(\.*)([A-Za-z_]\w*)|import[ \t]+([^\n#;]+))", re.M)


def may_touch(data: bytes, context: TreeContext) -> bool:
    """Whether ``data`` can hold a touchpoint (cheap: a byte search, and the top-level
    names of its import lines against the modules known to resolve)."""
    if _TRIGGER.search(data):
        return True
    for match in _IMPORT_LINE.finditer(data):
        if match.group(1):
            continue  # relative import
        roots = [match.group(2)] if match.group(2) else [
            p.split()[0].split(b".")[0] for p in match.group(3).strip(b"()\\ \t\r").split(b",") if p.split()]
        if any(not context.resolves(r.decode("ascii", "replace")) for r in roots if r):
            return True
    return False


# -- finding them ------------------------------------------------------------

class _Seen(dict):
    """node → (kind, what, why it may fail, inert reason or None)"""


_CUDA_WORD = re.compile(r"cuda|nccl", re.I)
#: A device or backend spelled in a string: "cuda", "cuda:1", "cuda:{}", "nccl".
_DEVICE_SPEC = re.compile(r"^\s*(cuda(:(\d+|\{\w*\}|%[ds]))?|nccl)\s*$", re.I)
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

    def _cuda_module(self, name: str) -> bool:
        root = name.split(".")[0]
        return not self.context.is_local(root) and (is_cuda_only_module(name) or not self.context.resolves(root))

    def _add(self, node: ast.AST, kind: str, what: str, why: str, inert: Optional[str] = None) -> None:
        self.found.append((node, kind, what, why, inert))

    def scan(self) -> None:
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
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
                likely = "a compiled CUDA extension by its name" if looks_compiled(root) else \
                    "often a compiled CUDA extension built by a setup script"
                self._add(node, "unresolved-import", f"import {module}",
                          f"resolves to no module of the tree, the standard library or the declared "
                          f"dependencies ({likely}): ModuleNotFoundError off CUDA", self._type_checking(node))
                return

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
        self._add(node, "torch.cuda", what, why, inert)

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
                self._add(kw.value, "ddp-device", f"{kw.arg}=",
                          "names CUDA devices: DistributedDataParallel raises with device_ids off CUDA",
                          "None: no device named" if none else None)

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
                if isinstance(parent, ast.Expr) and parent.value is child:
                    return "a docstring or bare string"
                if isinstance(parent, (ast.Raise, ast.Assert)):
                    return "message text"
                break
            child = parent
        if value and " " in value.strip() and not _DEVICE_SPEC.match(value.strip()):
            return "prose, not a device, backend or variable name"
        return None

    def _lookalike(self, func: ast.AST) -> bool:
        """``torch.device(...)`` where ``torch`` is imported from something else."""
        spelled, name = dotted(func), self.names.qualname(func)
        return spelled is not None and name is not None and spelled.split(".")[0] == "torch" \
            and name.split(".")[0] != "torch"

    def _use_in(self, parent: ast.AST, child: ast.AST) -> Optional[str]:
        if isinstance(parent, ast.Compare):
            return "compared with: a comparison can't fail off CUDA"
        if isinstance(parent, ast.keyword) and parent.arg in _MESSAGE_KEYWORDS:
            return "message text"
        if isinstance(parent, ast.keyword) and parent.arg == "choices":
            return "one of the choices offered"
        if isinstance(parent, ast.Dict) and child in parent.keys:
            return "a dictionary key"
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
                return f"`{dotted(func)}` here is `{self.names.qualname(func)}`, not PyTorch"
        if isinstance(parent, ast.Call) and child is parent.func and isinstance(parent.func, ast.Attribute):
            return None
        return None


# -- accounting --------------------------------------------------------------

def _is_cuda_prefix(part: ast.AST) -> bool:
    return isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value.lower() in ("cuda:", "cuda")


def _parse(data: bytes) -> Optional[ast.Module]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ast.parse(data)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


def account(
    data: bytes,
    path: str,
    findings: Sequence[Finding],
    context: TreeContext = TreeContext(),
    ignores: Optional[dict[int, frozenset[str]]] = None,
) -> list[Touchpoint]:
    """Every touchpoint of one Python file, each in exactly one state."""
    if not may_touch(data, context):
        return []
    tree = _parse(data)
    if tree is None:
        return []
    scanner = _Scanner(tree, data, context)
    scanner.scan()
    if not scanner.found:
        return []
    regions = scanner.finder.find()
    rewrites = [(f.line, f.column - 1) for f in findings if f.action == "rewrite"]
    open_regions = [r for r in regions if not (r.kind == "device" and guard_ported(r, rewrites))]
    by_start: dict[tuple[int, int], list[Finding]] = {}
    for f in findings:
        if f.code != CODE:
            by_start.setdefault((f.line, f.column - 1), []).append(f)
    out = []
    for node, kind, what, why, inert in scanner.found:
        start, end = scanner.finder.start(node), scanner.finder.end(node)
        state, detail = _state(scanner, node, (start, end), by_start, findings, open_regions, inert, ignores)
        out.append(Touchpoint(start[0], start[1] + 1, kind, what, state, detail if state != "unaccounted" else why))
    out.sort(key=lambda t: (t.line, t.column, t.kind))
    return out


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


def _covering(scanner: _Scanner, node: ast.AST, span, by_start, findings: Sequence[Finding]) -> list[Finding]:
    """The findings that cover a touchpoint: starting inside it, or on an enclosing
    expression or statement (a review only up to the touchpoint's own statement; a
    rewrite up to the enclosing function, since it replaced all of the node)."""
    start, end = span
    found = [f for f in findings if f.code != CODE and start <= (f.line, f.column - 1) < end]
    in_statement = True
    for parent in scanner._ancestors(node):
        if isinstance(parent, _STOP):
            break
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
        before=_one_line(source_line), suggestion=_suggestion(touchpoint),
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


def _one_line(code: str, limit: int = 160) -> str:
    text = " ".join(code.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
