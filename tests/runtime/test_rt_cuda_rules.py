"""What the PT1xx-PT4xx rewrites rely on: each rewritten expression gives, on a
simulated CUDA machine, exactly what the original gave, and a working value elsewhere.

The rules keep the caller's argument list when they swap `torch.cuda.X` for its
twin, so every twin must take the same parameters, by name and position, as the
torch.cuda function it replaces.
"""
from __future__ import annotations

import inspect

import pytest
import torch

import porter_runtime

calls = pytest.importorskip("porter.rules.cuda_device_calls")
queries = pytest.importorskip("porter.rules.cuda_device_queries")
events = pytest.importorskip("porter.rules.cuda_events_nvtx")

TWIN_RULES = [calls.CudaSynchronize, calls.CudaEmptyCache, calls.CudaManualSeed, queries.CudaDeviceQuery,
              calls.CudaSetDevice, queries.CudaMemoryStats, queries.CudaBf16Supported, events.CudaEvent,
              events.CudaNvtx]
TABLE = sorted({(q, twin) for rule in TWIN_RULES for q, twin in rule.table.items()})


def _resolve(qualname: str):
    obj = torch
    for part in qualname.split(".")[1:]:
        obj = getattr(obj, part)
    return obj


def _params(fn, unsupported=frozenset()):
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values() if p.name not in unsupported]


@pytest.mark.parametrize("qualname,twin", TABLE)
def test_twin_takes_the_same_parameters(qualname, twin):
    unsupported = {"external"} if twin == "Event" else set()  # PT108 reports calls that use it
    assert _params(getattr(porter_runtime, twin)) == _params(_resolve(qualname), unsupported)


def test_availability_idioms_give_the_original_values_on_cuda(simulate):
    simulate("cuda")
    assert str(porter_runtime.device()) == "cuda"  # "cuda" if is_available() else "cpu"
    assert str(porter_runtime.device(1)) == "cuda:1"
    assert porter_runtime.device(0) == torch.device("cuda:0")
    assert porter_runtime.device() == torch.device("cuda")
    assert porter_runtime.is_accelerator_available() is True  # == torch.cuda.is_available()


@pytest.mark.parametrize("machine,expected", [("mps", "mps"), ("cpu", "cpu")])
def test_availability_idioms_pick_the_best_device_elsewhere(simulate, machine, expected):
    simulate(machine)
    assert str(porter_runtime.device()) == expected
    assert porter_runtime.is_accelerator_available() is (machine == "mps")


def test_porter_device_cpu_turns_the_guard_off(simulate, monkeypatch):
    simulate("cuda")
    monkeypatch.setenv("PORTER_DEVICE", "cpu")
    porter_runtime._reset()
    assert porter_runtime.is_accelerator_available() is False


@pytest.mark.parametrize("value", [True, 1, "yes", False, 0, None])
def test_pin_memory_keeps_the_truth_of_any_value_on_cuda(simulate, value):
    simulate("cuda")
    assert porter_runtime.pin_memory(value) is bool(value)
    assert porter_runtime.pin_memory() is True  # pin_memory=True / torch.cuda.is_available()
    assert porter_runtime.pin_memory_device("cuda:1") == "cuda:1"


@pytest.mark.parametrize("machine", ["mps", "cpu"])
def test_pin_memory_is_off_elsewhere(simulate, machine):
    simulate(machine)
    assert porter_runtime.pin_memory() is False
    assert porter_runtime.pin_memory_device("cuda") == ""


def test_ddp_and_barrier_arguments_are_the_originals_on_cuda(simulate):
    simulate("cuda")
    rank = object()
    assert porter_runtime.ddp_device_ids(rank) == [rank]  # device_ids=[rank]
    assert porter_runtime.ddp_output_device(rank) is rank
    ids = [rank]
    assert porter_runtime.barrier_device_ids(ids) is ids


def test_init_process_group_keeps_every_argument_on_cuda(simulate):
    machine = simulate("cuda")
    import torch.distributed as dist

    recorder = machine.record(dist, "init_process_group")
    porter_runtime.init_process_group("nccl", init_method="env://", world_size=2, rank=1)
    porter_runtime.init_process_group(backend=None, world_size=1, rank=0)
    assert recorder.calls == [
        ((), {"backend": "nccl", "init_method": "env://", "world_size": 2, "rank": 1}),
        ((), {"backend": None, "world_size": 1, "rank": 0}),
    ]


def test_cuda_out_of_memory_error_needs_no_rewrite():
    # `except torch.cuda.OutOfMemoryError:` is left alone: it exists on every build.
    assert torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
