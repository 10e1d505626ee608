"""On a simulated CUDA machine, every ``porter_runtime`` call in a ported fixture repository
makes the choice the original code made on CUDA.

The fixtures are ported once (one ``porter migrate --write`` on a copy of
fixtures/repos). Each distinct ``porter_runtime.NAME(...)`` call of the ported sources is
then evaluated with CUDA simulated (``torch.cuda.is_available`` True, two devices) and the
torch functions the runtime forwards to replaced by recorders. Arguments that are literals
or torch attributes (``torch.bfloat16``) are used as written; any other argument (a
variable, ``args.seed``) becomes a stand-in object that must reach torch unchanged.
"""
from __future__ import annotations

import ast
import inspect
import shutil
import types
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import pytest
import torch
import torch.distributed

import porter_runtime
from porter_test_utils import FIXTURES, run_porter

REPOS = ["multipkg", "chat_lm", "cifar_cnn", "llm_scratch", "act_probe", "hrm_reasoning", "mps_ready"]
_ENV = ("PORTER_DEVICE", "PORTER_COMPILE", "DISABLE_COMPILE", "PORTER_QUIET", "WORLD_SIZE")


@pytest.fixture(scope="module")
def ported(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("decisions") / "repos"
    shutil.copytree(FIXTURES / "repos", root, ignore=shutil.ignore_patterns("__pycache__"))
    result = run_porter("migrate", root, "--write", "-q", "--no-progress")
    assert result.returncode == 0, result.stderr.decode()
    return root


# -- the calls of a ported repository ---------------------------------------------------

class Opaque(mock.MagicMock):
    """A value only the run time knows (``args.seed``, ``model``)."""


def _value(node: ast.expr, torch_names: frozenset = frozenset({"torch"})) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    text = ast.unparse(node)
    path = []
    while isinstance(node, ast.Attribute):
        path.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in torch_names and path:
        value: Any = torch
        for attr in reversed(path):
            value = getattr(value, attr)
        return value
    return Opaque(name=text)


def runtime_calls(repo: Path) -> dict[str, tuple[str, list, dict]]:
    """Source text -> (runtime function, args, kwargs) of every distinct call."""
    found = {}
    for path in sorted(repo.rglob("*.py")):
        if "porter_runtime" in path.relative_to(repo).parts:
            continue
        tree = ast.parse(path.read_text())
        names = frozenset(alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                          for alias in node.names if alias.name == "torch")
        for node in ast.walk(tree):
            func = node.func if isinstance(node, ast.Call) else None
            if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.value.id == "porter_runtime"):
                text = ast.unparse(node)
                args = [_value(a, names) for a in node.args]
                kwargs = {k.arg: _value(k.value, names) for k in node.keywords}
                found.setdefault(text, (func.attr, args, kwargs))
    return found


# -- what the original did on CUDA -----------------------------------------------------

def _bound(fn: Callable, args: list, kwargs: dict) -> dict:
    signature = inspect.signature(fn)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


#: Runtime twins -> (owner, name) of the torch function the original called on CUDA,
#: and the arguments the original passed before the call's own ("cuda" for amp).
FORWARDS: dict[str, tuple[Any, str, tuple]] = {
    "synchronize": (torch.cuda, "synchronize", ()),
    "empty_cache": (torch.cuda, "empty_cache", ()),
    "manual_seed": (torch.cuda, "manual_seed", ()),
    "manual_seed_all": (torch.cuda, "manual_seed_all", ()),
    "set_device": (torch.cuda, "set_device", ()),
    "device_name": (torch.cuda, "get_device_name", ()),
    "max_memory_allocated": (torch.cuda, "max_memory_allocated", ()),
    "memory_allocated": (torch.cuda, "memory_allocated", ()),
    "reset_peak_memory_stats": (torch.cuda, "reset_peak_memory_stats", ()),
    "Event": (torch.cuda, "Event", ()),
    "init_process_group": (torch.distributed, "init_process_group", ()),
    "compile": (torch, "compile", ()),
    "set_default_tensor_type": (torch, "set_default_tensor_type", ()),
    "autocast": (torch, "autocast", ("cuda",)),
    "GradScaler": (torch.amp, "GradScaler", ("cuda",)),
}


def _cuda_device(*args: Any) -> torch.device:
    if not args:
        return torch.device("cuda")
    return torch.device("cuda", args[0]) if isinstance(args[0], int) else torch.device(args[0])


#: Runtime functions that return a value -> the value the original used on CUDA.
VALUES: dict[str, Callable[..., Any]] = {
    "device": _cuda_device,
    "device_str": lambda *args: str(_cuda_device(*args)),
    "pin_memory": lambda requested=True: requested,
    "pin_memory_device": lambda requested="cuda": requested,
    "map_location": lambda requested=None: requested,
    "supported_dtype": lambda dtype: dtype,
    "ddp_device_ids": lambda rank: [rank],
    "ddp_output_device": lambda rank: rank,
    "barrier_device_ids": lambda ids: ids,
    "pin_tensor": lambda t: t.pin_memory(),
    "double": lambda t: t.double(),
    "require_device": lambda message=None: torch.device("cuda"),  # the assertion held
    "load_state_dict": lambda obj, *args, **kwargs: obj.load_state_dict(*args, **kwargs),
}


def check_forward(name: str, args: list, kwargs: dict, monkeypatch) -> None:
    owner, attr, prefix = FORWARDS[name]
    original = getattr(owner, attr)
    returns = inspect.signature(original).return_annotation
    result = {"str": "NVIDIA H100 80GB HBM3", str: "NVIDIA H100 80GB HBM3", "int": 123456789, int: 123456789}.get(
        returns, object())
    calls = []
    monkeypatch.setattr(owner, attr, lambda *a, **k: calls.append((a, k)) or result)
    got = getattr(porter_runtime, name)(*args, **kwargs)
    returns_none = returns in (None, "None")
    assert got is result or got == result or (got is None and returns_none), f"{name}: not what {attr} returns"
    assert len(calls) == 1, f"{name} must call {attr} once"
    (got_args, got_kwargs), = calls
    assert _bound(original, list(got_args), got_kwargs) == _bound(original, [*prefix, *args], kwargs)


#: What a device read at run time (``torch.device(config.device)``) may hold on CUDA:
#: the fixtures' configs and defaults say "cuda"; a user may pass any of the others.
RUN_TIME_DEVICES = ["cuda", "cuda:1", 1, "cpu", torch.device("cuda", 0)]


def check_value(name: str, args: list, kwargs: dict) -> None:
    if name == "device" and args and isinstance(args[0], Opaque):
        for value in RUN_TIME_DEVICES:
            check_value(name, [value], kwargs)
        return
    got = getattr(porter_runtime, name)(*args, **kwargs)
    expected = VALUES[name](*args, **kwargs)
    if isinstance(expected, torch.device):
        assert (got.type, got.index) == (expected.type, expected.index)
    else:
        assert got == expected


def check_attention(args: list, kwargs: dict, monkeypatch) -> None:
    """flash_attn_func itself, with the same arguments (hrm runs attention in bf16)."""
    calls = []
    fake = types.SimpleNamespace(flash_attn_func=lambda *a, **k: calls.append((a, k)) or "out")
    monkeypatch.setattr(porter_runtime._attention, "flash_attn_module", lambda: fake)
    for arg in args:
        arg.dtype = torch.bfloat16
    assert porter_runtime.attention(*args, **kwargs) == "out"
    assert calls == [(tuple(args), kwargs)]


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


@pytest.mark.parametrize("name", REPOS)
def test_runtime_calls_make_the_original_cuda_choice(name, ported, cuda):
    calls = runtime_calls(ported / name)
    assert calls, f"{name}: no porter_runtime call in the port"
    for text, (function, args, kwargs) in calls.items():
        with cuda.context() as patch:
            porter_runtime._reset()
            if function in FORWARDS:
                check_forward(function, args, kwargs, patch)
            elif function == "attention":
                check_attention(args, kwargs, patch)
            else:
                assert function in VALUES, f"{name}: no CUDA oracle for {text}"
                check_value(function, args, kwargs)
