"""PT306's stand-ins on a real Gloo group of one process: what raises on Gloo runs, and
on a simulated CUDA machine the original call is made unchanged."""
from __future__ import annotations

import socket

import pytest
import torch
import torch.distributed as dist

import porter_runtime


@pytest.fixture
def gloo_group():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_gathering_an_input_that_requires_grad_runs_through_the_runtime_on_gloo(simulate, gloo_group):
    """Gloo raises "modified inplace" on some of these calls and not others (a race with
    its worker thread: about half of them on this CPU build, none on another machine),
    so the test does not count on the original raising: it asserts that through the
    runtime no call raises, and that what the original raises, when it does, is that."""
    simulate("cpu")
    shard = torch.arange(4.0, requires_grad=True)
    for _ in range(20):
        try:
            dist.all_gather_into_tensor(torch.empty(4), shard)
        except RuntimeError as error:
            assert "modified inplace" in str(error)
    for _ in range(100):
        out = torch.empty(4)
        dist.all_gather_into_tensor(out, porter_runtime.collective_input(shard))
        assert torch.equal(out, shard.detach())
    assert shard.requires_grad


def test_on_cuda_the_gather_input_is_the_callers_tensor(simulate):
    simulate("cuda")
    shard = torch.arange(4.0, requires_grad=True)
    assert porter_runtime.collective_input(shard) is shard


def test_a_reduce_scatter_future_is_completed_by_the_runtime_on_gloo(simulate, gloo_group):
    simulate("cpu")
    out, grads = torch.empty(4), torch.arange(4.0)
    with pytest.raises(RuntimeError, match="getFuture not implemented"):
        dist.reduce_scatter_tensor(torch.empty(4), grads, async_op=True).get_future()
    fut = porter_runtime.work_future(dist.reduce_scatter_tensor(out, grads, async_op=True), out)
    assert fut.done() and fut.value()[0] is out and torch.equal(out, grads)
    assert torch.equal(fut.then(lambda f: f.value()[0] * 2).wait(), grads * 2)


def test_a_backend_with_futures_keeps_its_own(simulate, gloo_group):
    for machine in ("cpu", "cuda"):
        simulate(machine)
        work = dist.all_reduce(torch.ones(4), async_op=True)
        fut = porter_runtime.work_future(work, None)
        assert torch.equal(fut.wait()[0], torch.ones(4))


def test_on_cuda_a_missing_future_raises_as_in_the_original(simulate, gloo_group):
    simulate("cuda")
    with pytest.raises(RuntimeError, match="getFuture not implemented"):
        porter_runtime.work_future(dist.reduce_scatter_tensor(torch.empty(4), torch.ones(4), async_op=True))
