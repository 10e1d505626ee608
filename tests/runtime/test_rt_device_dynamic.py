"""PT006 rewrites ``torch.device(value)`` to ``porter_runtime.device(value)`` for values
known only at run time (a config's ``device: cuda``, ``--device cuda:1``, a rank). That
is exact only if, on CUDA, the runtime returns ``torch.device(value)`` for every value
torch accepts and fails where torch fails."""
from __future__ import annotations

import pytest
import torch

import porter_runtime

# torch.device(i) with an int means the current accelerator (CUDA on a CUDA machine);
# a CPU-only torch can't build that reference, so it is spelled out.
ACCEPTED = [
    ("cuda", torch.device("cuda")),
    ("cuda:0", torch.device("cuda", 0)),
    ("cuda:1", torch.device("cuda", 1)),
    ("cpu", torch.device("cpu")),
    ("cpu:0", torch.device("cpu", 0)),
    ("mps", torch.device("mps")),
    ("meta", torch.device("meta")),
    (0, torch.device("cuda", 0)),
    (1, torch.device("cuda", 1)),
    (torch.device("cuda"), torch.device("cuda")),
    (torch.device("cuda", 1), torch.device("cuda", 1)),
    (torch.device("cpu"), torch.device("cpu")),
]


@pytest.mark.parametrize("value,expected", ACCEPTED, ids=[repr(v) for v, _ in ACCEPTED])
def test_on_cuda_runtime_device_equals_torch_device(simulate, value, expected):
    simulate("cuda")
    got = porter_runtime.device(value)
    assert got == expected
    assert (got.type, got.index) == (expected.type, expected.index)
    if not isinstance(value, int):
        assert got == torch.device(value)


@pytest.mark.parametrize("value", ["gpu", "cuda:x", "cuda:-1", ""])
def test_on_cuda_values_torch_rejects_are_rejected_alike(simulate, value):
    simulate("cuda")
    with pytest.raises(RuntimeError) as theirs:
        torch.device(value)
    with pytest.raises(RuntimeError) as ours:
        porter_runtime.device(value)
    assert str(ours.value) == str(theirs.value)


def test_on_cuda_the_device_works_as_a_context_manager(simulate):
    simulate("cuda")
    with porter_runtime.device("cpu"):  # `with torch.device(config.device):`
        assert torch.empty(1).device == torch.device("cpu")


@pytest.mark.parametrize("machine,expected", [("mps", "mps"), ("cpu", "cpu")])
@pytest.mark.parametrize("value", ["cuda", "cuda:1", 1, torch.device("cuda")])
def test_off_cuda_config_cuda_values_map_to_the_resolved_device(simulate, machine, expected, value):
    simulate(machine)
    indexed = not isinstance(value, str) or ":" in value
    indexed = indexed and not (isinstance(value, torch.device) and value.index is None)
    expected = f"{expected}:0" if machine == "mps" and indexed else expected
    assert porter_runtime.device(value) == torch.device(expected)


@pytest.mark.parametrize("machine", ["mps", "cpu"])
def test_off_cuda_other_values_are_kept(simulate, machine):
    simulate(machine)
    assert porter_runtime.device("cpu") == torch.device("cpu")
    assert porter_runtime.device("meta") == torch.device("meta")
