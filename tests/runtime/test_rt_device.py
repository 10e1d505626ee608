"""Device resolution, PORTER_DEVICE, the info line, to_device and map_location."""
from __future__ import annotations

import collections
import dataclasses
import json
import subprocess
import sys
from typing import NamedTuple

import pytest
import torch

import porter_runtime


@pytest.mark.parametrize("machine", ["cuda", "mps", "cpu"])
def test_resolution_order(simulate, machine):
    simulate(machine)
    assert porter_runtime.device_type() == machine
    assert porter_runtime.is_accelerator_available() == (machine != "cpu")


def test_cuda_wins_over_mps(simulate, monkeypatch):
    simulate("cuda")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert porter_runtime.device_type() == "cuda"


def test_on_cuda_device_is_exactly_what_the_original_meant(simulate):
    simulate("cuda")
    assert porter_runtime.device() == torch.device("cuda")
    assert porter_runtime.device().index is None
    assert porter_runtime.device(1) == torch.device("cuda", 1)
    assert porter_runtime.device("cuda:1") == torch.device("cuda", 1)
    assert porter_runtime.device(torch.device("cuda", 0)) == torch.device("cuda", 0)
    assert porter_runtime.device("cuda") == torch.device("cuda")
    assert porter_runtime.device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("request_", [None, "cuda", torch.device("cuda")])
def test_on_mps_index_less_cuda_requests_map_to_mps_without_index(simulate, request_):
    simulate("mps")
    assert porter_runtime.device(request_) == torch.device("mps")


@pytest.mark.parametrize("request_", [0, 1, "cuda:0", "cuda:1", torch.device("cuda", 1)])
def test_on_mps_indexed_cuda_requests_are_mps_0_as_a_tensor_there_says(simulate, request_):
    """H2O's FlexGen: ``self.dev = torch.device("cuda:0")`` ... ``assert data.device ==
    self.dev``. On CUDA a tensor on cuda:0 says cuda:0; on a Mac one says mps:0, so the
    indexed request must be mps:0 for the assertion to keep holding."""
    simulate("mps")
    assert porter_runtime.device(request_) == torch.device("mps", 0)


@pytest.mark.parametrize("request_", [None, 1, "cuda:1"])
def test_on_cpu_cuda_requests_map_to_cpu(simulate, request_):
    simulate("cpu")
    assert porter_runtime.device(request_) == torch.device("cpu")


@pytest.mark.parametrize("machine", ["cuda", "mps", "cpu"])
def test_explicit_non_cuda_devices_are_unchanged(simulate, machine):
    simulate(machine)
    assert porter_runtime.device("cpu") == torch.device("cpu")
    assert porter_runtime.device("mps") == torch.device("mps")
    assert porter_runtime.device(torch.device("meta")) == torch.device("meta")


def test_porter_device_overrides_cuda_requests(simulate, monkeypatch):
    simulate("cuda")
    monkeypatch.setenv("PORTER_DEVICE", "cpu")
    porter_runtime._reset()
    assert porter_runtime.device() == torch.device("cpu")
    assert porter_runtime.device("cuda:1") == torch.device("cpu")
    monkeypatch.setenv("PORTER_DEVICE", "cuda:1")
    porter_runtime._reset()
    assert porter_runtime.device() == torch.device("cuda", 1)
    assert porter_runtime.device(0) == torch.device("cuda", 0)  # an explicit index is kept


def test_porter_device_never_fakes_a_missing_device(simulate, monkeypatch):
    simulate("cpu")
    monkeypatch.setenv("PORTER_DEVICE", "mps")
    with pytest.raises(RuntimeError, match="not available"):
        porter_runtime.device()
    monkeypatch.setenv("PORTER_DEVICE", "warp-drive")
    porter_runtime._reset()
    with pytest.raises(ValueError, match="PORTER_DEVICE"):
        porter_runtime.device()


def test_resolution_is_cached(simulate, monkeypatch):
    simulate("mps")
    assert porter_runtime.device_type() == "mps"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert porter_runtime.device_type() == "mps"
    porter_runtime._reset()
    assert porter_runtime.device_type() == "cpu"


def test_one_info_line_on_first_resolution(simulate, monkeypatch, capsys):
    monkeypatch.delenv("PORTER_QUIET")
    simulate("mps")
    porter_runtime.device()
    porter_runtime.device(1)
    err = capsys.readouterr().err
    assert err.count("porter_runtime: using mps (") == 1


def test_porter_quiet_silences_the_info_line(simulate, capsys):
    simulate("cpu")  # the autouse fixture sets PORTER_QUIET=1
    porter_runtime.device()
    assert capsys.readouterr().err == ""


class Pair(NamedTuple):
    x: torch.Tensor
    label: str


@dataclasses.dataclass(frozen=True)
class Batch:
    tokens: torch.Tensor
    extra: dict


def test_to_device_walks_nested_batches():
    batch = {"a": [torch.ones(1), (torch.zeros(2), "s")], "p": Pair(torch.ones(3), "y"),
             "d": Batch(torch.ones(2), collections.OrderedDict(m=torch.ones(1))), "n": 5}
    moved = porter_runtime.to_device(batch, non_blocking=True)
    assert isinstance(moved["p"], Pair) and moved["p"].label == "y"
    assert isinstance(moved["d"], Batch)
    assert isinstance(moved["d"].extra, collections.OrderedDict)
    assert moved["a"][1][1] == "s" and moved["n"] == 5
    assert moved["a"][0].device.type == "cpu"


def test_to_device_keeps_defaultdict_factory():
    data = collections.defaultdict(list, x=torch.ones(1))
    moved = porter_runtime.to_device(data)
    assert moved.default_factory is list


def test_to_device_uses_non_blocking_only_for_cuda(simulate, monkeypatch):
    simulate("mps")
    seen = []
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **kw: seen.append((a, kw)) or self)
    t64 = torch.ones(2, dtype=torch.float64)
    with pytest.warns(UserWarning, match="torch.float64.*no float64"):
        porter_runtime.to_device({"x": torch.ones(1), "y": t64}, non_blocking=True)
    assert seen[0] == ((torch.device("mps"),), {"dtype": torch.float32, "non_blocking": False})
    assert seen[1][1]["dtype"] == torch.float32  # float64 cannot live on MPS


def test_map_location_per_machine(simulate):
    simulate("cuda")
    assert porter_runtime.map_location() is None
    simulate("mps")
    assert porter_runtime.map_location() == torch.device("cpu")
    simulate("cpu")
    assert porter_runtime.map_location() == torch.device("cpu")


def test_mps_fallback_is_set_only_before_torch_and_never_over_the_user():
    env: dict[str, str] = {}
    assert porter_runtime._enable_mps_fallback(env, {}, "darwin")
    assert env == {"PYTORCH_ENABLE_MPS_FALLBACK": "1"}
    env = {"PYTORCH_ENABLE_MPS_FALLBACK": "0"}
    assert not porter_runtime._enable_mps_fallback(env, {}, "darwin")
    assert env["PYTORCH_ENABLE_MPS_FALLBACK"] == "0"
    env = {}
    assert not porter_runtime._enable_mps_fallback(env, {"torch": object()}, "darwin")
    assert not porter_runtime._enable_mps_fallback(env, {}, "linux") and env == {}


def test_import_is_cheap_and_self_contained():
    code = (
        "import sys, json, torch\n"
        "calls = []\n"
        "torch.cuda.is_available = lambda: calls.append('cuda') or False\n"
        "import porter_runtime\n"
        "heavy = [m for m in ('porter', 'libcst', 'click', 'rich', 'torch._dynamo') "
        "if m in sys.modules]\n"
        "print(json.dumps({'calls': calls, 'heavy': heavy}))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    report = json.loads(result.stdout)
    assert report == {"calls": [], "heavy": []}


def test_version_is_kept():
    assert porter_runtime.__version__ == "0.1.0"


def test_on_mps_without_the_fallback_variable_the_runtime_says_how_to_set_it(simulate, monkeypatch, capsys):
    """Ported files import torch before porter_runtime (isort order), too late for the
    runtime to set PYTORCH_ENABLE_MPS_FALLBACK: it says so once, on MPS only."""
    monkeypatch.delenv("PORTER_QUIET", raising=False)
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    simulate("mps")
    porter_runtime.device()
    porter_runtime.device()
    err = capsys.readouterr().err
    assert err.count("export PYTORCH_ENABLE_MPS_FALLBACK=1") == 1
    porter_runtime._reset()
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    porter_runtime.device()
    assert "PYTORCH_ENABLE_MPS_FALLBACK" not in capsys.readouterr().err
    porter_runtime._reset()
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK")
    simulate("cpu")
    porter_runtime.device()
    assert "PYTORCH_ENABLE_MPS_FALLBACK" not in capsys.readouterr().err


def test_on_cuda_the_port_says_nothing(simulate, monkeypatch, capsys):
    """The original code printed nothing about its device: nor does the port on CUDA."""
    monkeypatch.delenv("PORTER_QUIET")
    simulate("cuda")
    assert porter_runtime.device().type == "cuda"
    assert capsys.readouterr().err == ""


def test_a_default_argument_prints_nothing_at_import(simulate, monkeypatch, capsys, tmp_path):
    """``def f(device=porter_runtime.device())`` resolves while its module is imported:
    the line waits for the first call at run time."""
    import importlib.util

    monkeypatch.delenv("PORTER_QUIET")
    simulate("mps")
    path = tmp_path / "shared_memory.py"
    path.write_text("import porter_runtime\n\n\nclass SharedMemory:\n"
                    "    def __init__(self, device=porter_runtime.device()):\n        self.device = device\n")
    spec = importlib.util.spec_from_file_location("shared_memory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.SharedMemory().device.type == "mps"
    assert capsys.readouterr().err == ""
    porter_runtime.device()
    assert capsys.readouterr().err.count("porter_runtime: using mps (") == 1
