"""The runtime pieces of issue 13's distributed and AMP classes: a launcher's processes,
FSDP's sync_module_states, ShardedGradScaler and the legacy autocast class as a value."""
from __future__ import annotations

import functools

import pytest
import torch
import torch.distributed as dist
import torch.distributed.fsdp.sharded_grad_scaler as sgs

import porter_runtime


@pytest.mark.parametrize("value,expected", [(None, False), ("1", False), ("2", True), ("x", False)])
def test_multiprocess_launch_reads_world_size(monkeypatch, value, expected):
    if value is not None:
        monkeypatch.setenv("WORLD_SIZE", value)
    assert porter_runtime.is_multiprocess_launch() is expected


def test_sync_module_states_is_fsdps_on_cuda(simulate):
    machine = simulate("cuda")
    broadcast = machine.record(dist, "broadcast")
    model = torch.nn.Linear(2, 2)
    assert porter_runtime.fsdp_sync_module_states(model, True) is True
    assert porter_runtime.fsdp_sync_module_states(model, False) is False
    assert broadcast.calls == []


def test_sync_module_states_off_cuda_broadcasts_from_rank_0(simulate, monkeypatch):
    machine = simulate("cpu")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    broadcast = machine.record(dist, "broadcast")
    model = torch.nn.BatchNorm1d(3)  # parameters and buffers
    assert porter_runtime.fsdp_sync_module_states(model, True) is False
    tensors = [*model.parameters(), *model.buffers()]
    assert len(broadcast.calls) == len(tensors)
    assert all(kwargs == {"src": 0} and args[0].data_ptr() == t.data_ptr()
               for (args, kwargs), t in zip(broadcast.calls, tensors))
    assert porter_runtime.fsdp_sync_module_states(model, False) is False
    assert len(broadcast.calls) == len(tensors)


def test_fsdp_bound_by_partial_is_fsdp_itself_on_cuda(simulate):
    simulate("cuda")
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    assert porter_runtime.fsdp_syncing(FSDP) is FSDP


def test_fsdp_bound_by_partial_syncs_the_module_it_is_called_with_off_cuda(simulate, monkeypatch):
    machine = simulate("cpu")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    broadcast = machine.record(dist, "broadcast")
    made = []

    def fsdp(module, **kwargs):
        made.append((module, kwargs))
        return "sharded"

    wrap = functools.partial(porter_runtime.fsdp_syncing(fsdp), device_id=torch.device("cpu"),
                             sync_module_states=True, use_orig_params=True)
    model = torch.nn.BatchNorm1d(3)
    assert wrap(model) == "sharded"
    assert made == [(model, {"device_id": torch.device("cpu"), "sync_module_states": False, "use_orig_params": True})]
    states = len([*model.parameters(), *model.buffers()])
    assert len(broadcast.calls) == states
    assert wrap(module=model, sync_module_states=False) == "sharded" and made[-1][1]["sync_module_states"] is False
    assert len(broadcast.calls) == states  # no second broadcast where the call turns the sync off


def test_sharded_scaler_forwards_on_cuda(simulate):
    machine = simulate("cuda")
    made = machine.record(sgs, "ShardedGradScaler", result="scaler")
    assert porter_runtime.ShardedGradScaler("cuda", 1024.0, enabled=True) == "scaler"
    assert made.calls == [((), {"device": "cuda", "init_scale": 1024.0, "enabled": True})]


def test_sharded_scaler_off_cuda_follows_autocast(simulate):
    simulate("cpu")
    scaler = porter_runtime.ShardedGradScaler(enabled=True)
    assert isinstance(scaler, sgs.ShardedGradScaler)
    assert scaler.is_enabled()  # fp16 autocast on CPU, as on CUDA: loss scaling


@pytest.mark.filterwarnings("ignore:porter_runtime")
def test_sharded_scaler_the_runtime_disabled_keeps_its_state(simulate, monkeypatch):
    monkeypatch.setenv("PORTER_AMP_DTYPE", "bfloat16")
    simulate("cpu")
    scaler = porter_runtime.ShardedGradScaler(init_scale=1024.0)
    assert isinstance(scaler, sgs.ShardedGradScaler)
    assert not scaler.is_enabled()  # bf16 autocast: no loss scaling
    assert scaler.get_scale() == 1.0 and scaler.state_dict()["scale"] == 1024.0


def test_legacy_autocast_value_keeps_the_class_signature(simulate):
    machine = simulate("cuda")
    made = machine.record(torch, "autocast", result="ctx")
    assert porter_runtime.cuda_amp_autocast() == "ctx"
    assert porter_runtime.cuda_amp_autocast(False, torch.bfloat16) == "ctx"
    assert made.calls == [(("cuda",), {"dtype": torch.float16, "enabled": True, "cache_enabled": True}),
                          (("cuda",), {"dtype": torch.bfloat16, "enabled": False, "cache_enabled": True})]


def test_legacy_autocast_value_off_cuda_autocasts_here(simulate):
    simulate("cpu")
    ctx = porter_runtime.cuda_amp_autocast(dtype=torch.float16)
    with ctx:
        out = torch.nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype == torch.float16
