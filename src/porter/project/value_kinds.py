"""The lattice of device values (porter.project.value_flow) and the syntax that gives a value its kind.

A kind comes from where a value is made (``source_kind``: ``rank % torch.cuda.device_count()``,
``torch.cuda.current_device()``, ``int(os.environ["LOCAL_RANK"])``) or from a use that
proves it (``evidence``: ``torch.cuda.set_device(i)``, ``torch.device("cuda", i)``,
``f"cuda:{i}"``, ``device_ids=[i]``). Plain picklable facts, read by rules through
porter.project.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator, Optional


class Kind(str, Enum):
    INDEX = "cuda-index"
    INDEX_LIST = "cuda-index-list"
    CUDA_STR = "cuda-string"
    DEVICE = "device"
    UNKNOWN = "unknown"


def join(a: Optional[Kind], b: Optional[Kind]) -> Optional[Kind]:
    """None is "no information"; two different kinds give UNKNOWN."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    return Kind.UNKNOWN


Scope = tuple[str, str]  # (file, function qualname; "" for the module)


@dataclass(frozen=True)
class Callee:
    """A function of the repository as a call site sees it."""

    scope: Scope
    params: tuple[str, ...]
    method: bool  # defined in a class: the first parameter is bound by the call
    #: parameters whose every read is a device use (``device=p``, ``.to(p)``, ``p is None``)
    device_only: frozenset[str] = frozenset()


@dataclass
class FlowFacts:
    #: (file, qualname) -> name -> kind, for names whose kind is known
    names: dict[Scope, dict[str, Kind]] = field(default_factory=dict)
    #: attribute name -> kind (``self.gpu_ids``, ``opt.gpu_ids``)
    attrs: dict[str, Kind] = field(default_factory=dict)
    #: simple name (function, method, or class for its ``__init__``) -> its definitions
    callees: dict[str, tuple[Callee, ...]] = field(default_factory=dict)
    #: the files the model followed values through (the only ones its rules can act in)
    files: frozenset[str] = frozenset()

    def name_kind(self, scope: Scope, name: str) -> Optional[Kind]:
        found = self.names.get(scope, {}).get(name)
        return found if found is not None else self.names.get((scope[0], ""), {}).get(name)


#: A file that can make or prove a CUDA index: where the walk starts.
def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _env_local_rank(node: ast.AST) -> bool:
    """``os.environ["LOCAL_RANK"]``, ``os.environ.get("LOCAL_RANK")``, ``os.getenv("LOCAL_RANK")``,
    and each of them ``or 0`` (``int(os.environ.get("LOCAL_RANK") or 0)``)."""
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        node = node.values[0]
    if isinstance(node, ast.Subscript):
        key = node.slice
    elif isinstance(node, ast.Call) and node.args:
        key = node.args[0]
    else:
        return False
    return isinstance(key, ast.Constant) and key.value == "LOCAL_RANK"


#: CUDA's own calls only (``torch.neuron.current_device()`` is another accelerator's).
_CURRENT = frozenset({"torch.cuda.current_device", "cuda.current_device", "porter_runtime.current_device"})
_COUNT = frozenset({"torch.cuda.device_count", "cuda.device_count", "porter_runtime.device_count"})


def source_kind(node: ast.AST) -> Optional[Kind]:
    """The kind an expression has by itself, whatever its scope."""
    if isinstance(node, ast.Constant):  # an int literal is an index only where a sink says so
        if isinstance(node.value, str) and re.fullmatch(r"cuda(:\d+)?", node.value):
            return Kind.CUDA_STR
        return None
    if isinstance(node, ast.Call):
        name = dotted(node.func)
        if name in _CURRENT:
            return Kind.INDEX
        if name == "int" and len(node.args) == 1 and _env_local_rank(node.args[0]):
            return Kind.INDEX
        if name in ("torch.device", "porter_runtime.device"):
            return Kind.DEVICE
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.right, ast.Call):
        return Kind.INDEX if dotted(node.right.func) in _COUNT else None
    return None


_SET_DEVICE = ("torch.cuda.set_device", "cuda.set_device", "set_device")


def evidence(call: ast.Call) -> Iterator[tuple[ast.AST, Kind]]:
    """Expressions a call uses as a CUDA index (or a list of them): proof of their kind."""
    name = dotted(call.func)
    if name in _SET_DEVICE and call.args:
        yield call.args[0], Kind.INDEX
    if name == "torch.device" and len(call.args) == 2:
        first = call.args[0]
        if isinstance(first, ast.Constant) and first.value == "cuda":
            yield call.args[1], Kind.INDEX
    if isinstance(call.func, ast.Attribute) and call.func.attr == "cuda" and call.args:
        yield call.args[0], Kind.INDEX
    if isinstance(call.func, ast.Attribute) and call.func.attr == "format" and len(call.args) == 1:
        text = call.func.value
        if isinstance(text, ast.Constant) and isinstance(text.value, str) and re.fullmatch(r"cuda:\{\w*(:d)?\}", text.value):
            yield call.args[0], Kind.INDEX
    for keyword in call.keywords:
        if keyword.arg == "device_ids":
            value = keyword.value
            if isinstance(value, (ast.List, ast.Tuple)):
                yield from ((e, Kind.INDEX) for e in value.elts)
            else:
                yield value, Kind.INDEX_LIST


def string_evidence(node: ast.AST) -> Iterator[tuple[ast.AST, Kind]]:
    """``f"cuda:{i}"`` and ``"cuda:%d" % i``."""
    if isinstance(node, ast.JoinedStr) and len(node.values) == 2:
        head, value = node.values
        if isinstance(head, ast.Constant) and head.value == "cuda:" and isinstance(value, ast.FormattedValue):
            yield value.value, Kind.INDEX
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str) and re.fullmatch(r"cuda:%[di]", node.left.value):
        yield node.right, Kind.INDEX
