"""Distributed and DataLoader decisions per machine."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import porter_runtime

SRC = str(Path(porter_runtime.__file__).resolve().parents[1])

EXPECTED = {
    "cuda": {"backend": "nccl", "ids": [3], "out": 3, "barrier": [0], "pin": True,
             "pin_device": "cuda"},
    "mps": {"backend": "gloo", "ids": None, "out": None, "barrier": None, "pin": False,
            "pin_device": ""},
    "cpu": {"backend": "gloo", "ids": None, "out": None, "barrier": None, "pin": False,
            "pin_device": ""},
}


@pytest.mark.parametrize("machine", ["cuda", "mps", "cpu"])
def test_each_machine_makes_its_choice(simulate, machine):
    simulate(machine)
    want = EXPECTED[machine]
    assert porter_runtime.dist_backend() == want["backend"]
    assert porter_runtime.dist_backend("nccl") == want["backend"]
    assert porter_runtime.dist_backend("gloo") == "gloo"
    assert porter_runtime.ddp_device_ids(3) == want["ids"]
    assert porter_runtime.ddp_output_device(3) == want["out"]
    assert porter_runtime.barrier_device_ids([0]) == want["barrier"]
    assert porter_runtime.pin_memory() is want["pin"]
    assert porter_runtime.pin_memory(False) is False
    assert porter_runtime.pin_memory_device() == want["pin_device"]


def test_mixed_backend_strings_lose_nccl_off_cuda(simulate):
    simulate("cpu")
    assert porter_runtime.dist_backend("cpu:gloo,cuda:nccl") == "gloo"
    assert porter_runtime.dist_backend("mpi") == "mpi"
    simulate("cuda")
    assert porter_runtime.dist_backend("cpu:gloo,cuda:nccl") == "cpu:gloo,cuda:nccl"


def test_init_process_group_on_cuda_forwards_unchanged(simulate):
    machine = simulate("cuda")
    recorder = machine.record(dist, "init_process_group")
    porter_runtime.init_process_group(init_method="env://", world_size=4, rank=1)
    porter_runtime.init_process_group("nccl", rank=0)
    assert recorder.calls == [((), {"backend": None, "init_method": "env://", "world_size": 4,
                                    "rank": 1}),
                              ((), {"backend": "nccl", "rank": 0})]


def test_init_process_group_off_cuda_uses_gloo(simulate):
    machine = simulate("cpu")
    recorder = machine.record(dist, "init_process_group")
    porter_runtime.init_process_group("nccl", world_size=2, rank=0)
    assert recorder.calls == [((), {"backend": "gloo", "world_size": 2, "rank": 0})]


def test_device_id_is_kept_on_cuda_and_left_out_elsewhere(simulate):
    """modded-nanogpt: init_process_group(backend="cuda:nccl,cpu:gloo", device_id=device)
    raised off CUDA ("device_id parameter must be an accelerator with an index")."""
    machine = simulate("cuda")
    recorder = machine.record(dist, "init_process_group")
    porter_runtime.init_process_group("cuda:nccl,cpu:gloo", device_id=torch.device("cuda", 1))
    machine = simulate("cpu")
    recorder_cpu = machine.record(dist, "init_process_group")
    porter_runtime.init_process_group("cuda:nccl,cpu:gloo", device_id=torch.device("cpu"), rank=0)
    assert recorder.calls == [((), {"backend": "cuda:nccl,cpu:gloo", "device_id": torch.device("cuda", 1)})]
    assert recorder_cpu.calls == [((), {"backend": "gloo", "rank": 0})]


def test_real_gloo_group_with_a_cpu_device_id(tmp_path):
    porter_runtime.init_process_group("nccl", init_method=f"file://{tmp_path}/store", world_size=1, rank=0,
                                      device_id=torch.device("cpu"))
    try:
        assert dist.get_backend() == "gloo"
    finally:
        dist.destroy_process_group()


def test_multi_process_mps_launch_is_a_clear_error(simulate, monkeypatch):
    """Only PORTER_DEVICE=mps keeps a Mac's process group on MPS; a multi-process one is
    then refused. Without it the group makes the runtime choose the CPU."""
    machine = simulate("mps")
    recorder = machine.record(dist, "init_process_group")
    monkeypatch.setenv("PORTER_DEVICE", "mps")
    with pytest.raises(RuntimeError, match="2-process launch resolved to mps.*PORTER_DEVICE=cpu"):
        porter_runtime.init_process_group("nccl", world_size=2, rank=0)
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(RuntimeError, match="4-process"):
        porter_runtime.init_process_group()
    monkeypatch.setenv("WORLD_SIZE", "1")
    porter_runtime.init_process_group()
    assert recorder.calls == [((), {"backend": "gloo"})]
    assert porter_runtime.device() == torch.device("mps")


def test_a_torchrun_launch_on_a_mac_runs_each_process_on_the_cpu(simulate, monkeypatch):
    """torchrun --nproc_per_node 2 on a Mac: WORLD_SIZE is 2 before the device is first
    asked for, so the runtime picks the CPU (Gloo can't communicate MPS tensors) and says
    why, instead of a model on MPS that the first collective refuses. PORTER_DEVICE=mps
    still insists, and the launch is then refused."""
    machine = simulate("mps")
    recorder = machine.record(dist, "init_process_group")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert porter_runtime.device() == torch.device("cpu")
    assert "2-process launch" in porter_runtime._device.resolve().reason
    porter_runtime.init_process_group("nccl")
    assert recorder.calls == [((), {"backend": "gloo"})]
    porter_runtime._reset()
    monkeypatch.setenv("PORTER_DEVICE", "mps")
    assert porter_runtime.device() == torch.device("mps")
    with pytest.raises(RuntimeError, match="2-process launch resolved to mps"):
        porter_runtime.init_process_group("nccl")


def test_real_single_process_gloo_group_on_this_cpu(tmp_path):
    porter_runtime.init_process_group("nccl", init_method=f"file://{tmp_path}/store",
                                      world_size=1, rank=0)
    try:
        assert dist.get_backend() == "gloo"
        t = torch.ones(2)
        dist.all_reduce(t)
        assert torch.equal(t, torch.ones(2))
    finally:
        dist.destroy_process_group()


def test_pin_tensor(simulate):
    machine = simulate("cuda")
    t = torch.ones(2)
    pinned = torch.zeros(2)
    machine.monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: pinned)
    assert porter_runtime.pin_tensor(t) is pinned
    simulate("mps")
    assert porter_runtime.pin_tensor(t) is t


def test_dataloader_kwargs_on_cuda_keep_pinning(simulate):
    simulate("cuda")
    kwargs = porter_runtime.dataloader_kwargs(batch_size=4, num_workers=2, pin_memory=True,
                                              pin_memory_device="cuda:1",
                                              persistent_workers=True, prefetch_factor=4)
    assert kwargs == {"batch_size": 4, "num_workers": 2, "pin_memory": True,
                      "pin_memory_device": "cuda:1", "persistent_workers": True,
                      "prefetch_factor": 4}


@pytest.mark.parametrize("machine", ["mps", "cpu"])
def test_dataloader_kwargs_off_cuda_drop_pinning(simulate, machine):
    simulate(machine)
    kwargs = porter_runtime.dataloader_kwargs(num_workers=2, pin_memory=True,
                                              pin_memory_device="cuda", prefetch_factor=2)
    assert kwargs == {"num_workers": 2, "pin_memory": False, "prefetch_factor": 2}


def test_dataloader_kwargs_valid_for_zero_workers_on_this_cpu():
    kwargs = porter_runtime.dataloader_kwargs(pin_memory=True, persistent_workers=True,
                                              prefetch_factor=2, shuffle=False)
    assert kwargs == {"pin_memory": False, "shuffle": False}
    loader = torch.utils.data.DataLoader(torch.arange(4), batch_size=2, **kwargs)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3]]


@pytest.mark.parametrize("machine", ["cuda", "mps", "cpu"])
def test_mpi_workers_are_dropped_only_where_a_spawned_worker_cannot_init_mpi(simulate, machine, monkeypatch, capsys):
    """What PT405 writes into a DataLoader in a module that imports mpi4py
    (improved-diffusion's ``num_workers=1``). The launch is simulated the way devices
    are: MPICH's Hydra gives each rank ``PMI_FD``, Open MPI does not; the process has
    imported mpi4py (a module object stands for it in ``sys.modules``)."""
    import sys
    import types

    from porter_runtime import _data

    simulate(machine)
    monkeypatch.delenv("PORTER_QUIET")  # the info line is checked
    monkeypatch.setitem(sys.modules, "mpi4py", types.ModuleType("mpi4py"))
    monkeypatch.setenv("PMI_FD", "11")
    monkeypatch.setattr(_data, "_start_method", lambda: "spawn")
    dropped = machine != "cuda"  # on CUDA the workers stay, whatever the platform does
    assert porter_runtime.mpi_workers(1) == (0 if dropped else 1)
    assert porter_runtime.mpi_workers(0) == 0
    assert ("loads in the main process" in capsys.readouterr().err) is dropped
    for kept in ("fork", "no PMI", "no mpi4py"):  # Linux; Open MPI; nothing imported MPI
        with monkeypatch.context() as m:
            if kept == "fork":
                m.setattr(_data, "_start_method", lambda: "fork")
            elif kept == "no PMI":
                m.delenv("PMI_FD")
            else:
                m.delitem(sys.modules, "mpi4py")
            assert porter_runtime.mpi_workers(4) == 4
    monkeypatch.delenv("PMI_FD")
    monkeypatch.setenv("PMI_PORT", "host:4242")  # Intel MPI / MPICH over a port
    assert porter_runtime.mpi_workers("2") == ("2" if machine == "cuda" else 0)


class _Generator(torch.nn.Module):  # BigGAN's G(z, G.shared(y)), sampled through data_parallel
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, z, y, scale=1.0):
        return self.linear(z + y) * scale


def test_data_parallel_calls_the_module_off_cuda_and_torchs_function_on_cuda(simulate, monkeypatch):
    """torch.nn.parallel.data_parallel raises off CUDA ("device type could not be determined"
    on a CPU); the twin calls the module there, with torch's handling of a lone input."""
    G, z, y = _Generator(), torch.randn(2, 4), torch.randn(2, 4)
    simulate("cpu")
    with pytest.raises(RuntimeError, match="device type could not be determined"):
        torch.nn.parallel.data_parallel(G, (z, y))
    assert torch.equal(porter_runtime.data_parallel(G, (z, y)), G(z, y))
    assert torch.equal(porter_runtime.data_parallel(G, (z, y), module_kwargs={"scale": 2.0}), G(z, y, scale=2.0))
    lone = torch.nn.Linear(4, 3)
    assert torch.equal(porter_runtime.data_parallel(lone, z, device_ids=[0, 1]), lone(z))
    simulate("cuda")
    seen = []
    monkeypatch.setattr(torch.nn.parallel, "data_parallel", lambda *args: seen.append(args) or "torch's")
    assert porter_runtime.data_parallel(G, (z,), [0, 1], 0, 0, {"y": y}) == "torch's"
    assert seen == [(G, (z,), [0, 1], 0, 0, {"y": y})]


SYNC_BN = '''
import os, sys
import torch
import torch.distributed as dist
import porter_runtime

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
dist.init_process_group("gloo", rank=0, world_size=1)
def net():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())


try:
    torch.nn.parallel.DistributedDataParallel(torch.nn.SyncBatchNorm.convert_sync_batchnorm(net()))
except ValueError as error:
    print("torch:", error)
model = torch.nn.parallel.DistributedDataParallel(porter_runtime.convert_sync_batchnorm(net()))
model(torch.randn(2, 3, 8, 8)).sum().backward()
norm = porter_runtime.SyncBatchNorm(4)
out = norm(torch.randn(2, 4, 5))
print("twins:", type(model.module[1]).__name__, isinstance(norm, torch.nn.SyncBatchNorm),
      bool(torch.allclose(out.mean((0, 2)), torch.zeros(4), atol=1e-5)), norm.num_batches_tracked.item())
dist.destroy_process_group()
'''


def test_sync_batchnorm_twins_train_in_a_gloo_group_off_cuda(tmp_path):
    """SwAV (blind round 15) converts its ResNet with nn.SyncBatchNorm.convert_sync_batchnorm
    before DDP: off CUDA DDP refuses it. The twins leave BatchNorm as it is (convert) or build
    a SyncBatchNorm that normalises with the process's own batch."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PORTER_QUIET": "1", "PYTHONPATH": SRC, "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", SYNC_BN, str(port)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.stdout.splitlines() == ["torch: SyncBatchNorm layers only work with GPU modules",
                                       "twins: BatchNorm2d True True 1"], out.stderr


def test_sync_batchnorm_twins_are_torchs_on_cuda(simulate, monkeypatch):
    seen = []
    simulate("cuda")
    monkeypatch.setattr(torch.nn.SyncBatchNorm, "convert_sync_batchnorm",
                        classmethod(lambda cls, module, group=None: seen.append((module, group)) or "converted"))
    net = torch.nn.BatchNorm1d(3)
    assert porter_runtime.convert_sync_batchnorm(net, "group") == "converted" and seen == [(net, "group")]
    assert type(porter_runtime.SyncBatchNorm(3, momentum=0.2)) is torch.nn.SyncBatchNorm
