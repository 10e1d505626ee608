"""Stand-ins keep the structure CUDA code relies on (issue 26): the original call
under simulated CUDA and the port on CPU / simulated MPS give the same types,
attributes, state-dict keys and dtypes."""
from __future__ import annotations

import io

import pytest
import torch
from torch._dynamo.utils import counters

import porter_runtime


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


# -- compile --------------------------------------------------------------------

@pytest.mark.parametrize("machine", ["cpu", "mps"])
def test_compile_off_cuda_has_the_structure_torch_compile_gives(simulate, machine):
    simulate("cuda")
    on_cuda = porter_runtime.compile(_net())  # torch.compile itself: lazy, nothing compiled yet
    simulate(machine)
    model = _net()
    with pytest.warns(UserWarning, match="torch.compile is not used"):
        ported = porter_runtime.compile(model)
    assert type(ported) is type(on_cuda)
    assert ported._orig_mod is model
    assert list(ported.state_dict()) == list(on_cuda.state_dict())
    assert list(ported.state_dict())[0] == "_orig_mod.0.weight"


def test_compile_checkpoints_cross_between_cuda_and_cpu(simulate):
    simulate("cuda")
    on_cuda = porter_runtime.compile(_net())
    simulate("cpu")
    ported = porter_runtime.compile(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(),
                                                        torch.nn.Linear(3, 2)))
    buffer = io.BytesIO()
    torch.save(on_cuda.state_dict(), buffer)
    buffer.seek(0)
    ported.load_state_dict(torch.load(buffer))  # strict: every key matches
    ported._orig_mod.load_state_dict(on_cuda._orig_mod.state_dict())
    assert torch.equal(ported._orig_mod[0].weight, on_cuda._orig_mod[0].weight)


def test_compile_off_cuda_calls_the_model_without_dynamo(simulate):
    simulate("cpu")
    model = _net()
    ported = porter_runtime.compile(model)
    before = sum(counters["frames"].values())
    for rows in (1, 5, 9):  # new shapes would each make Dynamo trace again
        x = torch.randn(rows, 4)
        assert torch.equal(ported(x), model(x))
    ported(torch.randn(2, 4)).sum().backward()
    assert model[0].weight.grad is not None
    assert sum(counters["frames"].values()) == before
