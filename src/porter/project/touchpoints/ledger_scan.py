"""Finding a file's CUDA touchpoints with the stdlib ``ast``, and which of them are inert
(porter.project.touchpoints.ledger accounts for each)."""

from __future__ import annotations

import ast
import bisect
import re
from typing import Iterator, Optional, Sequence

from porter.project import selectors
from porter.project.touchpoints.callees import only_selects
from porter.project.touchpoints.ledger_data import TreeContext
from porter.rulebase.conditions.guards import GuardFinder, child_blocks
from porter.rulebase.cuda_packages import is_cuda_only_module, looks_compiled
from porter.rulebase.matching import ast_dotted_name

_CUDA_WORD = re.compile(r"cuda|nccl", re.I)
#: A device or backend spelled in a string: "cuda", "cuda:1", "cuda:{}", "nccl".
_DEVICE_SPEC = re.compile(r"^\s*(cuda(:(\d+|\{\w*\}|%[ds]))?|nccl)\s*$")
#: A specification that starts with a CUDA device and goes on with a precision: rwkv's strategy
#: strings (``"cuda fp16"``, ``"cuda fp16i8 *10 -> cpu fp32"``), whose reader takes the first word
#: for the device (ChatRWKV, blind round 17).
_DEVICE_WORDS = re.compile(r"^\s*cuda(:\d+)?\s+(fp|bf|int|float|half|bfloat)\w*(\s|$)")
_ENV = re.compile(r"^(CUDA_\w+|NCCL_\w+|PYTORCH_CUDA_ALLOC_CONF|PYTORCH_NO_CUDA_MEMORY_CACHING|TORCH_CUDA_ARCH_LIST)$")
#: torch.cuda functions that answer without CUDA (checked on a CPU build of torch 2.13)
_SAFE_CUDA = frozenset({
    "is_available", "device_count", "is_initialized", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "empty_cache", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
    "memory_stats", "is_bf16_supported", "is_tf32_supported", "get_arch_list", "get_rng_state_all",
    "amp.autocast", "amp.GradScaler", "amp.custom_fwd", "amp.custom_bwd", "amp", "OutOfMemoryError",
    "_initialized",  # a plain bool, False where CUDA was never initialised (EasyContext's RNG-state save)
    "default_generators",  # a tuple, one generator per CUDA device: empty without CUDA (LLaMA-Adapter)
})
_MESSAGE_CALLS = frozenset({
    "print", "warn", "warning", "warnings", "info", "debug", "error", "exception", "critical", "log",
    "warning_once", "info_once", "write", "echo", "secho", "set_description", "set_postfix_str",
    "add_text", "logger", "format", "join", "deprecate", "warn_once",
})
_MESSAGE_KEYWORDS = frozenset({"help", "description", "msg", "message", "metavar", "epilog", "desc", "doc", "title"})
#: Names of a parameter or keyword that picks an implementation, not a device: S4's
#: ``backend: str = 'cuda'`` (its Cauchy kernel, else pykeops, else naive PyTorch),
#: flash-linear-attention's ``conv_backend="cuda"`` (causal-conv1d's kernels), StyleGAN's ``impl='cuda'``.
_IMPLEMENTATION = re.compile(r"^(?:\w+_)?(?:backend|impl|implementation|kernel)$")
_COMPARING = frozenset({"startswith", "endswith", "find", "count", "index", "rfind", "match", "search", "fullmatch"})
_ENV_READS = frozenset({"get", "getenv", "setdefault", "pop", "putenv", "unsetenv"})



_AVAILABILITY = re.compile(r"available|installed|enabled|has_\w+", re.I)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _is_cuda_prefix(part: ast.AST) -> bool:
    return isinstance(part, ast.Constant) and isinstance(part.value, str) and part.value.lower() in ("cuda:", "cuda")



class Scanner:
    def __init__(self, tree: ast.Module, data: bytes, context: TreeContext) -> None:
        self.tree = tree
        self.context = context
        self.finder = GuardFinder(tree, data.splitlines(), self._cuda_module, context.probes)
        self.names = self.finder.names
        self.parents: dict[ast.AST, ast.AST] = {}
        self.found: list[tuple[ast.AST, str, str, str, Optional[str]]] = []
        self._functions: Optional[dict] = None  # the module's functions, when a default needs them

    def _cuda_module(self, name: str) -> bool:
        root = name.split(".")[0]
        return not self.context.is_local(root) and (is_cuda_only_module(name) or not self.context.resolves(root))

    def _in_method(self, node: ast.AST, name: str) -> bool:
        """Whether the innermost function around ``node`` is named ``name``."""
        here = self.parents.get(node)
        while here is not None and not isinstance(here, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            here = self.parents.get(here)
        return isinstance(here, (ast.FunctionDef, ast.AsyncFunctionDef)) and here.name == name

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
        if name is None or self._parameter_root(node):
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
        elif not called and isinstance(parent, ast.Call) and parent.args and parent.args[0] is node \
                and getattr(parent.func, "id", None) == "hasattr":
            inert = "an attribute test: hasattr never raises"  # H2O's vendored DeepSpeed, blind round 17
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
            own = "inside a method named `cuda`: the class's own move, which its callers' `.cuda()` reaches" \
                if self._in_method(node, "cuda") else None
            self._add(node, "cuda-method", ".cuda()", "moves to a CUDA device: raises where CUDA is absent", own)
        called = (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) or ""
        for kw in node.keywords:
            if kw.arg in ("device_ids", "output_device") and "DataParallel" in called \
                    and "Distributed" not in called:  # DataParallel (mmcv's too) drops them without CUDA
                self._add(kw.value, "ddp-device", f"{kw.arg}=", "",
                          "DataParallel keeps the module as it is where CUDA is absent, whatever devices it names")
            elif kw.arg in ("device_ids", "output_device"):
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
        elif _DEVICE_WORDS.match(value) and not isinstance(self.parents.get(node), ast.JoinedStr):
            self._add(node, "device-words", repr(value), "starts with a CUDA device, then a precision (a strategy "
                      "string): what reads the device from its first word gets CUDA", self._string_use(node, ""))

    def _parameter_root(self, node: ast.AST) -> bool:
        """Whether the chain's first name is a parameter of a function around it
        (``def f(torch): torch.cuda.synchronize()``): the caller's object, not the module."""
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return False
        for ancestor in self._ancestors(node):
            if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                a = ancestor.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
                if any(p.arg == root.id for p in params):
                    return True
        return False

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

    def _implementation_name(self, parent: ast.AST, child: ast.AST) -> Optional[str]:
        """The name of the parameter (by its default) or keyword that ``child``, a
        ``"cuda"`` string, is given to, where that name picks an implementation
        (``backend``, ``impl``, ``conv_backend``, ...); None otherwise, and for ``"nccl"``."""
        if not isinstance(child, ast.Constant) or child.value.strip() == "nccl":
            return None
        if isinstance(parent, ast.keyword):
            name = parent.arg
        elif isinstance(parent, ast.arguments):
            param = selectors.defaulted_parameter(parent, child)
            name = param.arg if param is not None else None
        else:
            return None
        return name if name and _IMPLEMENTATION.match(name) else None

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
        picked = self._implementation_name(parent, child)
        if picked is not None:
            return f"`{picked}` picks an implementation (CUDA's kernel or another), not a device"
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
            if not (self.names.qualname(func) or "").startswith("torch."):
                return only_selects(self.tree, self.context, parent, child)  # porter.project.touchpoints.callees
        if isinstance(parent, ast.Call) and child is parent.func and isinstance(parent.func, ast.Attribute):
            return None
        return None

