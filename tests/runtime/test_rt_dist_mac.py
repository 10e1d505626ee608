"""A process group on a Mac: Gloo, macOS's only backend, cannot communicate MPS tensors
(`ProcessGroupGloo::broadcast: invalid tensor type`), not even in a group of one process
(dit, improved-diffusion and dino under torchrun --nproc_per_node=1 or a plain launch), so
the runtime resolves a Mac that uses one to the CPU. CUDA is chosen as before."""
from __future__ import annotations

import gc

import torch
import torch.distributed as dist

import porter_runtime


def test_a_one_process_torchrun_launch_on_a_mac_resolves_to_the_cpu(simulate, monkeypatch):
    simulate("mps")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert porter_runtime.device() == torch.device("cpu")
    assert "WORLD_SIZE=1" in porter_runtime._device.resolve().reason


def test_a_group_made_after_the_device_resolved_moves_the_device_to_the_cpu(simulate, monkeypatch):
    """dino launched plainly: require_device resolves MPS, then init_process_group(world_size=1)."""
    machine = simulate("mps")
    recorder = machine.record(dist, "init_process_group")
    assert porter_runtime.device() == torch.device("mps")
    porter_runtime.init_process_group("nccl", init_method="env://", world_size=1, rank=0)
    assert recorder.calls == [((), {"backend": "gloo", "init_method": "env://", "world_size": 1, "rank": 0})]
    assert porter_runtime.device() == torch.device("cpu")
    assert porter_runtime.device_type() == "cpu"
    assert "a process group" in porter_runtime._device.resolve().reason


def test_a_group_made_before_the_device_is_asked_for(simulate, monkeypatch):
    """improved-diffusion: setup_dist() sets WORLD_SIZE from MPI and calls init_process_group;
    dev() asks for the device after."""
    machine = simulate("mps")
    machine.record(dist, "init_process_group")
    porter_runtime.init_process_group("gloo", init_method="env://")
    assert porter_runtime.device("cuda:0") == torch.device("cpu")


def test_cuda_keeps_its_device_with_a_group(simulate, monkeypatch):
    machine = simulate("cuda")
    recorder = machine.record(dist, "init_process_group")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert porter_runtime.device() == torch.device("cuda")
    porter_runtime.init_process_group("nccl")
    assert recorder.calls == [((), {"backend": "nccl"})]
    assert porter_runtime.device(0) == torch.device("cuda", 0)
    assert porter_runtime.device_type() == "cuda"


def test_a_plain_mac_without_a_group_keeps_mps(simulate):
    simulate("mps")
    assert porter_runtime.device() == torch.device("mps")


def test_porter_device_mps_is_kept_with_a_one_process_group(simulate, monkeypatch):
    machine = simulate("mps")
    machine.record(dist, "init_process_group")
    monkeypatch.setenv("PORTER_DEVICE", "mps")
    porter_runtime.init_process_group("nccl", world_size=1, rank=0)
    assert porter_runtime.device() == torch.device("mps")


def test_ddp_over_a_real_one_process_gloo_group_on_a_mac(simulate, tmp_path):
    """The run that failed: DDP's construction broadcasts the module over Gloo. With the
    device the runtime resolves for a Mac that made a group, it trains (real Gloo, CPU)."""
    simulate("mps")
    assert porter_runtime.device_type() == "mps"  # asked before the group, as dino does
    porter_runtime.init_process_group("nccl", init_method=f"file://{tmp_path}/store", world_size=1, rank=0)
    try:
        model = torch.nn.Linear(3, 2).to(porter_runtime.device())
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=porter_runtime.ddp_device_ids(0))
        ddp(torch.ones(4, 3, device=porter_runtime.device())).sum().backward()
        assert model.weight.grad is not None and model.weight.device.type == "cpu"
    finally:
        dist.destroy_process_group()


def test_a_group_the_code_made_itself_is_seen(simulate, tmp_path):
    simulate("mps")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", world_size=1, rank=0)
    try:
        assert porter_runtime.device() == torch.device("cpu")
    finally:
        dist.destroy_process_group()


def test_under_mps_emulation_a_group_resolves_to_the_cpu_as_on_a_mac(monkeypatch):
    monkeypatch.setenv("PORTER_EMULATE", "mps")
    porter_runtime._reset()
    assert porter_runtime.device_type() == "mps"
    porter_runtime._device.note_process_group()
    assert porter_runtime.device() == torch.device("cpu")
    assert porter_runtime.device_type() == "cpu"
    porter_runtime._reset()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert porter_runtime.device_type() == "cpu"


def test_a_group_made_by_torch_after_mps_resolved_moves_the_device_and_its_string(simulate, tmp_path):
    """detectron2 (blind round 9): `_C.MODEL.DEVICE = porter_runtime.device_str()` is read
    at import, before launch() spawns the workers and each calls torch's own
    init_process_group over Gloo; build_model then moves the model to
    `porter_runtime.device(cfg.MODEL.DEVICE)`, and DDP broadcast its MPS parameters over
    Gloo. The runtime now sees the group at the next call, and the "mps" it handed out
    resolves with it; DDP trains on the CPU."""
    simulate("mps")
    configured = porter_runtime.device_str()
    assert configured == "mps"
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", world_size=1, rank=0)
    try:
        assert porter_runtime.device(configured) == torch.device("cpu")
        assert porter_runtime.device() == torch.device("cpu")
        model = torch.nn.Linear(3, 2).to(porter_runtime.device(configured))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        ddp(torch.ones(4, 3, device=porter_runtime.device(configured))).sum().backward()
        assert model.weight.grad is not None
        del ddp  # its Reducer goes before the group (the group is torch's own, not the runtime's)
        gc.collect()
    finally:
        dist.destroy_process_group()


def test_an_explicit_mps_stays_without_a_group_or_with_porter_device(simulate, tmp_path, monkeypatch):
    simulate("mps")
    assert porter_runtime.device("mps") == torch.device("mps")
    monkeypatch.setenv("PORTER_DEVICE", "mps")
    porter_runtime._reset()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", world_size=1, rank=0)
    try:
        assert porter_runtime.device("mps") == torch.device("mps")
        assert porter_runtime.device() == torch.device("mps")
    finally:
        dist.destroy_process_group()


def test_under_mps_emulation_a_group_made_by_torch_is_seen_after_the_device_resolved(monkeypatch, tmp_path):
    monkeypatch.setenv("PORTER_EMULATE", "mps")
    porter_runtime._reset()
    configured = porter_runtime.device_str()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", world_size=1, rank=0)
    try:
        assert porter_runtime.device(configured) == torch.device("cpu")
        assert porter_runtime.device_type() == "cpu"
    finally:
        dist.destroy_process_group()
        porter_runtime._reset()
