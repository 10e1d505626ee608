"""On a simulated CUDA machine, every ``porter_runtime`` call in a ported fixture repository
makes the choice the ORIGINAL code made on CUDA.

The fixtures are ported once (one ``porter migrate --write --report`` on a copy of
fixtures/repos). For each rewrite in the report, the original node is found in the
original file by the rewrite's line and column, and the rewrite's new code is walked side
by side with it to find what each ``porter_runtime`` call replaced. The oracle decides from
the original alone what that code did on CUDA: which torch function it called with which
arguments, or which value it gave. The runtime call, evaluated with CUDA simulated
(``torch.cuda.is_available`` True, two devices) and the torch functions it forwards to
replaced by recorders, must do the same. Arguments that are literals or torch attributes
(``torch.bfloat16``) are used as written; any other argument (a variable, ``args.seed``)
becomes a stand-in object, the same one for the same text in the original and the port,
that must reach torch unchanged.
"""
from __future__ import annotations

import importlib
import ast
import inspect
import json
import shutil
import types
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union
from unittest import mock

import pytest
import torch
import torch.distributed

import porter_runtime
from porter_test_utils import FIXTURES, run_porter

REPOS = ["multipkg", "chat_lm", "cifar_cnn", "llm_scratch", "act_probe", "hrm_reasoning", "mps_ready"]
_ENV = ("PORTER_DEVICE", "PORTER_COMPILE", "DISABLE_COMPILE", "PORTER_QUIET", "WORLD_SIZE")
ORIGINALS = FIXTURES / "repos"


@pytest.fixture(scope="module")
def ported(tmp_path_factory) -> tuple[Path, dict]:
    """The ported copy of the fixture repositories judged here and porter's JSON report on
    it. Only those: porter takes a root as one project, and another fixture's classes
    (flow_classes' `self.device = torch.cuda.current_device()`) would flow into these."""
    base = tmp_path_factory.mktemp("decisions")
    root, report = base / "repos", base / "report.json"
    for name in REPOS:
        shutil.copytree(ORIGINALS / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_porter("migrate", root, "--write", "-q", "--no-progress", "--report", report)
    assert result.returncode == 0, result.stderr.decode()
    return root, json.loads(report.read_text())


# -- the original code -----------------------------------------------------------------

class Opaque(mock.MagicMock):
    """A value only the run time knows (``args.seed``, ``model``)."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


class Original:
    """One original fixture file: its tree, each node's parent, and what its imports bind."""

    def __init__(self, path: Path) -> None:
        self.source = path.read_text()
        self.lines = self.source.splitlines()
        self.tree = ast.parse(self.source)
        self.parent = {child: node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)}
        self.imports: dict[str, str] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                        alias.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                self.imports.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})

    def node_at(self, line: int, column: int, before: str) -> ast.AST:
        """The node a rewrite names: it starts at (line, 1-based character column) and
        its source is the rewrite's ``before`` (the largest such node)."""
        text = self.lines[line - 1].encode()
        starting = [n for n in ast.walk(self.tree) if getattr(n, "lineno", None) == line
                    and len(text[:n.col_offset].decode()) + 1 == column
                    and not isinstance(n, ast.Expr)]  # the same source as its expression
        for node in sorted(starting, key=lambda n: (n.end_lineno, n.end_col_offset), reverse=True):
            if _one_line(ast.get_source_segment(self.source, node) or "") == before:
                return node
        pytest.fail(f"no node `{before}` at {line}:{column} of the original")

    def qualname(self, node: ast.AST) -> Optional[str]:
        """``torch.cuda.synchronize`` for ``t.cuda.synchronize`` after ``import torch as t``."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.imports:
            return None
        return ".".join([self.imports[node.id], *reversed(parts)])


def _torch_object(name: Optional[str]) -> Any:
    """The torch object a qualified name names, else None."""
    if name is None or not name.startswith("torch."):
        return None
    try:
        return reduce(getattr, name.split(".")[1:], torch)
    except AttributeError:
        return None


class Values:
    """Expressions as the code would see them: literals and torch attributes as written,
    anything else a stand-in, the same object for the same text (original and port)."""

    def __init__(self, original: Original, known: Optional[dict[str, Any]] = None) -> None:
        self.original = original
        self.known = dict(known or {})

    def __call__(self, node: ast.expr) -> Any:
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self(item) for item in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if not self.opaque(node):
            try:
                return ast.literal_eval(node)
            except (ValueError, TypeError, SyntaxError):
                return _torch_object(self.original.qualname(node))
        text = ast.unparse(node)
        return self.known.setdefault(text, Opaque(name=text))

    def opaque(self, node: ast.expr) -> bool:
        try:
            ast.literal_eval(node)
            return False
        except (ValueError, TypeError, SyntaxError):
            return _torch_object(self.original.qualname(node)) is None

    def call_args(self, call: ast.Call) -> tuple[list, dict]:
        return [self(a) for a in call.args], {k.arg: self(k.value) for k in call.keywords}


# -- what porter_runtime replaced --------------------------------------------------------

@dataclass(frozen=True)
class Absent:
    """A keyword the original call did not pass: it got the callee's default."""

    call: ast.Call
    keyword: str


def _runtime_name(node: ast.AST) -> Optional[str]:
    """``NAME`` for ``porter_runtime.NAME(...)`` and ``porter_runtime.NAME``."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "porter_runtime":
        return target.attr
    return None


def _is_method(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name


def replaced(was: ast.AST, new: ast.AST) -> Iterator[tuple[Union[ast.AST, Absent], ast.AST]]:
    """(what the original had, the ``porter_runtime`` code that took its place), found by
    walking the original node and the rewrite's new code side by side."""
    if _runtime_name(new) is not None:
        yield was, new
        return
    if not any(_runtime_name(n) is not None for n in ast.walk(new)):
        return
    if _is_method(was, "cuda") and _is_method(new, "to") and new.args and _runtime_name(new.args[0]):
        yield was, new.args[0]  # x.cuda(...) -> x.to(porter_runtime.device(...), ...)
        yield from replaced(was.func.value, new.func.value)
        return
    assert type(was) is type(new), f"cannot line up `{ast.unparse(was)}` with `{ast.unparse(new)}`"
    if isinstance(new, ast.Call):
        yield from _replaced_in_call(was, new)
        return
    for field in new._fields:
        old_value, new_value = getattr(was, field, None), getattr(new, field, None)
        if isinstance(new_value, list):
            assert len(old_value) == len(new_value), f"`{ast.unparse(was)}` and `{ast.unparse(new)}` differ"
            for a, b in zip(old_value, new_value):
                if isinstance(b, ast.AST):
                    yield from replaced(a, b)
        elif isinstance(new_value, ast.AST):
            yield from replaced(old_value, new_value)


def _replaced_in_call(was: ast.Call, new: ast.Call) -> Iterator[tuple[Union[ast.AST, Absent], ast.AST]]:
    yield from replaced(was.func, new.func)
    assert len(was.args) == len(new.args), f"`{ast.unparse(was)}` and `{ast.unparse(new)}` differ"
    for a, b in zip(was.args, new.args):
        yield from replaced(a, b)
    given = {k.arg: k.value for k in was.keywords}
    for keyword in new.keywords:
        if keyword.arg in given:
            yield from replaced(given[keyword.arg], keyword.value)
        elif _runtime_name(keyword.value) is not None:
            yield Absent(was, keyword.arg), keyword.value


def _as_call(original: Original, was, runtime: ast.AST) -> tuple[Any, ast.AST]:
    """A rewrite of a callee alone (``torch.compile`` -> ``porter_runtime.compile``) is
    judged on its call: the original's arguments go to both."""
    if isinstance(runtime, ast.Call):
        return was, runtime
    call = original.parent.get(was)
    assert isinstance(call, ast.Call) and call.func is was, f"`{ast.unparse(runtime)}` is not called"
    return call, ast.Call(func=runtime, args=call.args, keywords=call.keywords)


def _parse(code: str, where: str) -> ast.AST:
    if code.endswith("…"):
        pytest.fail(f"{where}: the report shortens the rewrite, so the oracle cannot read it")
    try:
        return ast.parse(code, mode="eval").body
    except SyntaxError:
        return ast.parse(code).body[0]


# -- what the original did on CUDA -------------------------------------------------------

def _bound(fn: Callable, args: list, kwargs: dict) -> dict:
    signature = inspect.signature(fn)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


#: Original CUDA calls -> (owner, name) of the torch function they are on CUDA, and the
#: arguments they pass before their own (``torch.cuda.amp.autocast(...)`` is
#: ``torch.autocast("cuda", ...)``).
FORWARDS: dict[str, tuple[Any, str, tuple]] = {
    **{f"torch.cuda.{name}": (torch.cuda, name, ()) for name in (
        "synchronize", "empty_cache", "manual_seed", "manual_seed_all", "set_device", "get_device_name",
        "max_memory_allocated", "memory_allocated", "reset_peak_memory_stats", "Event")},
    "torch.distributed.init_process_group": (torch.distributed, "init_process_group", ()),
    "torch.compile": (torch, "compile", ()),
    "torch.set_default_tensor_type": (torch, "set_default_tensor_type", ()),
    "torch.autocast": (torch, "autocast", ()),
    "torch.amp.autocast": (torch, "autocast", ()),
    "torch.cuda.amp.autocast": (torch, "autocast", ("cuda",)),
    "torch.amp.GradScaler": (torch.amp, "GradScaler", ()),
    "torch.cuda.amp.GradScaler": (torch.amp, "GradScaler", ("cuda",)),
}
ATTENTION = frozenset({"flash_attn.flash_attn_func", "flash_attn.flash_attn_interface.flash_attn_func"})
#: Tensor methods whose rewrite must call the tensor's own method on CUDA (`.to(dtype)`: PT608).
METHODS = frozenset({"double", "pin_memory", "to"})


def _cuda_device(device: Any = None) -> torch.device:
    """What ``torch.device(x)`` is on a CUDA machine (a bare index is a CUDA device)."""
    if device is None:
        return torch.device("cuda")
    return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)


def _storage_mover(node: ast.Lambda) -> torch.device:
    """The device a ``map_location=lambda storage, loc: storage.cuda(i)`` puts each
    storage on (torch.load calls it with each storage and its saved location)."""
    first = node.args.args[0].arg if node.args.args else None
    body = node.body
    assert (_is_method(body, "cuda") and isinstance(body.func.value, ast.Name) and body.func.value.id == first
            and not body.keywords and len(body.args) <= 1), f"no CUDA oracle for `{ast.unparse(node)}`"
    return _cuda_device(ast.literal_eval(body.args[0]) if body.args else None)


def cuda_value(original: Original, was: Union[ast.AST, Absent], values: Values) -> Any:
    """The value the original expression had on CUDA."""
    if isinstance(was, Absent):
        callee = original.qualname(was.call.func)
        function = _torch_object(callee)
        assert function is not None, f"no CUDA oracle for a default of {callee}"
        return inspect.signature(function).parameters[was.keyword].default
    if isinstance(was, ast.Lambda):
        return _storage_mover(was)
    if not isinstance(was, ast.Call):
        return values(was)  # a literal ("cuda", True), a torch attribute, a list
    args, kwargs = values.call_args(was)
    if original.qualname(was.func) == "torch.device":
        return _cuda_device(args[0]) if len(args) == 1 and not kwargs else torch.device(*args, **kwargs)
    if _is_method(was, "cuda"):  # x.cuda(device=None, non_blocking=False, ...)
        return _cuda_device(args[0] if args else kwargs.get("device"))
    if isinstance(was.func, ast.Attribute) and was.func.attr in METHODS:
        return getattr(values(was.func.value), was.func.attr)(*args, **kwargs)
    pytest.fail(f"no CUDA oracle for `{ast.unparse(was)}`")


def check_forward(original: Original, was: ast.Call, runtime: ast.Call, values: Values, monkeypatch) -> None:
    owner, attr, prefix = FORWARDS[original.qualname(was.func)]
    target = getattr(owner, attr)
    returns = inspect.signature(target).return_annotation
    result = {"str": "NVIDIA H100 80GB HBM3", str: "NVIDIA H100 80GB HBM3", "int": 123456789, int: 123456789}.get(
        returns, object())
    calls = []
    monkeypatch.setattr(owner, attr, lambda *a, **k: calls.append((a, k)) or result)
    args, kwargs = values.call_args(runtime)
    got = getattr(porter_runtime, _runtime_name(runtime))(*args, **kwargs)
    returns_none = returns in (None, "None")
    assert got is result or got == result or (got is None and returns_none), f"not what {attr} returns"
    assert len(calls) == 1, f"must call {attr} once"
    (got_args, got_kwargs), = calls
    was_args, was_kwargs = values.call_args(was)
    assert _bound(target, list(got_args), got_kwargs) == _bound(target, [*prefix, *was_args], was_kwargs)


def check_attention(was: ast.Call, runtime: ast.Call, values: Values, monkeypatch) -> None:
    """flash_attn_func itself, with the original's arguments (hrm runs attention in bf16)."""
    calls = []
    fake = types.SimpleNamespace(flash_attn_func=lambda *a, **k: calls.append((a, k)) or "out")
    attention = importlib.import_module("porter_runtime.attn.attention")  # imported on first use, maybe not yet
    monkeypatch.setattr(attention, "flash_attn_module", lambda: fake)
    was_args, was_kwargs = values.call_args(was)
    for arg in was_args:
        arg.dtype = torch.bfloat16
    args, kwargs = values.call_args(runtime)
    assert porter_runtime.attention(*args, **kwargs) == "out"
    assert calls == [(tuple(was_args), was_kwargs)]


#: What a device read at run time (``torch.device(config.device)``) may hold on CUDA:
#: the fixtures' configs and defaults say "cuda"; a user may pass any of the others.
RUN_TIME_DEVICES = ["cuda", "cuda:1", 1, "cpu", torch.device("cuda", 0)]


def check_value(original: Original, was, runtime: ast.Call) -> None:
    """The runtime call gives the original's value; a device read at run time is tried
    with each value it may hold."""
    read = [ast.unparse(a) for a in (was.args + [k.value for k in was.keywords])
            if Values(original).opaque(a)] if _is_device_call(original, was) else []
    for value in RUN_TIME_DEVICES if read else [None]:
        values = Values(original, {text: value for text in read})
        expected = cuda_value(original, was, values)
        args, kwargs = values.call_args(runtime)
        got = getattr(porter_runtime, _runtime_name(runtime))(*args, **kwargs)
        if isinstance(got, torch.device) or isinstance(expected, torch.device):
            got, expected = _cuda_device(got), _cuda_device(expected)
            got, expected = (got.type, got.index), (expected.type, expected.index)
        held = f" when it holds {value!r}" if read else ""
        assert got == expected, f"gives {got!r}{held}; the original gave {expected!r}"


def _is_device_call(original: Original, was) -> bool:
    return isinstance(was, ast.Call) and original.qualname(was.func) == "torch.device"


def check(original: Original, was, runtime: ast.AST, monkeypatch) -> None:
    """``runtime`` does on CUDA what ``was`` (the original it replaced) did."""
    name = original.qualname(was.func) if isinstance(was, ast.Call) else None
    if name in FORWARDS:
        check_forward(original, was, runtime, Values(original), monkeypatch)
    elif name in ATTENTION:
        check_attention(was, runtime, Values(original), monkeypatch)
    else:
        check_value(original, was, runtime)


# -- the test ------------------------------------------------------------------------------

@pytest.fixture
def cuda(monkeypatch):
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PORTER_QUIET", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    porter_runtime._reset()
    yield monkeypatch
    porter_runtime._reset()


def rewrites(report: dict, repo: str) -> Iterator[tuple[str, dict]]:
    for file in report["files"]:
        if file["path"].startswith(f"{repo}/") and file["path"].endswith(".py"):
            yield from ((file["path"], rewrite) for rewrite in file["rewrites"])


def _runtime_code(tree: ast.AST) -> set[str]:
    """Each ``porter_runtime`` call (or name not called) in a tree, as text."""
    found = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Call, ast.Attribute)) and _runtime_name(n)}
    called = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call) and _runtime_name(n)}
    return found - called


def ported_runtime_code(root: Path, repo: str) -> set[tuple[str, str]]:
    found = set()
    for path in sorted((root / repo).rglob("*.py")):
        rel = path.relative_to(root)
        if "porter_runtime" not in rel.parts:
            found |= {(rel.as_posix(), code) for code in _runtime_code(ast.parse(path.read_text()))}
    return found


def _original_code(was: Union[ast.AST, Absent]) -> str:
    if isinstance(was, Absent):
        return f"{ast.unparse(was.call)} (no {was.keyword}=)"
    return ast.unparse(was)


@pytest.mark.parametrize("name", REPOS)
def test_runtime_calls_make_the_original_cuda_choice(name, ported, cuda):
    root, report = ported
    originals: dict[str, Original] = {}
    checked: set[tuple[str, str, str]] = set()
    for path, rewrite in rewrites(report, name):
        original = originals.setdefault(path, Original(ORIGINALS / path))
        where = f"{path}:{rewrite['line']}"
        node = original.node_at(rewrite["line"], rewrite["column"], rewrite["before"])
        for was, runtime in replaced(node, _parse(rewrite["after"], where)):
            was, runtime = _as_call(original, was, runtime)
            key = (path, _original_code(was), ast.unparse(runtime))
            if key in checked:
                continue  # the same code, already judged (a rewrite nested in another)
            checked.add(key)
            with cuda.context() as patch:
                porter_runtime._reset()
                try:
                    check(original, was, runtime, patch)
                except AssertionError as exc:
                    raise AssertionError(f"{where}: `{key[1]}` -> `{key[2]}`: {exc}") from exc
    assert checked, f"{name}: no porter_runtime call in the port"
    # Every porter_runtime call in the port came from a rewrite the oracle judged.
    judged = {(path, runtime) for path, _, runtime in checked}
    assert ported_runtime_code(root, name) <= judged
