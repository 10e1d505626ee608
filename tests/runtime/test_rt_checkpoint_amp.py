"""The runtime calls that PT5xx/PT6xx rewrites produce: exact on CUDA, safe elsewhere."""
from __future__ import annotations

import pytest
import torch

import porter_runtime


def test_map_location_keeps_the_requested_location_on_cuda(simulate):
    simulate("cuda")
    dev = torch.device("cuda", 1)
    assert porter_runtime.map_location() is None
    assert porter_runtime.map_location("cuda:0") == "cuda:0"
    assert porter_runtime.map_location(dev) is dev


def test_map_location_sends_cuda_requests_to_cpu_on_mps(simulate):
    simulate("mps")
    # float64 storages can't go to MPS, so checkpoints load to the CPU first.
    for requested in (None, "cuda", "cuda:1", torch.device("cuda", 0), porter_runtime.device()):
        assert porter_runtime.map_location(requested) == torch.device("cpu")


def test_map_location_leaves_other_requests_alone_off_cuda(simulate):
    simulate("mps")
    location = {"cuda:0": "cpu"}
    assert porter_runtime.map_location(location) is location
    assert porter_runtime.map_location("cpu") == "cpu"


def test_map_location_on_cpu(simulate):
    simulate("cpu")
    assert porter_runtime.map_location("cuda:0") == torch.device("cpu")


def test_cuda_grad_scaler_forms_construct_the_cuda_scaler(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch.amp, "GradScaler", "scaler")
    # torch.cuda.amp.GradScaler(2.0 ** 12, growth_interval=100) after PT503:
    porter_runtime.GradScaler(2.0 ** 12, growth_interval=100)
    # torch.amp.GradScaler("cuda", enabled=False) after PT503:
    porter_runtime.GradScaler(enabled=False)
    assert recorder.calls == [
        (("cuda",), {"init_scale": 2.0 ** 12, "growth_interval": 100}),
        (("cuda",), {"enabled": False}),
    ]


def test_custom_fwd_bwd_forward_to_torch_amp_with_cuda(simulate):
    machine = simulate("cuda")
    fwd = machine.record(torch.amp, "custom_fwd", "f")
    bwd = machine.record(torch.amp, "custom_bwd", "b")
    porter_runtime.custom_fwd(cast_inputs=torch.float32)
    porter_runtime.custom_bwd(len)
    assert fwd.calls == [((None,), {"device_type": "cuda", "cast_inputs": torch.float32})]
    assert bwd.calls == [((len,), {"device_type": "cuda"})]


def test_sdpa_kernel_forwards_both_forms_on_cuda(simulate):
    machine = simulate("cuda")
    old = machine.record(torch.backends.cuda, "sdp_kernel", "old")
    assert porter_runtime.sdpa_kernel(enable_flash=False) == "old"
    assert old.calls == [((), {"enable_flash": False})]


def test_sdpa_kernel_on_mps_keeps_only_math(simulate):
    simulate("mps")
    with pytest.warns(UserWarning, match="restricts nothing here"):
        with porter_runtime.sdpa_kernel(enable_math=False):
            assert torch.backends.cuda.math_sdp_enabled()
    with porter_runtime.sdpa_kernel(enable_flash=False, enable_math=True):
        assert torch.backends.cuda.math_sdp_enabled()
        assert not torch.backends.cuda.mem_efficient_sdp_enabled()


class _Castable:
    def __init__(self):
        self.calls = []

    def double(self):
        self.calls.append("double")
        return self

    def float(self):
        self.calls.append("float")
        return self


def test_double_is_the_method_on_cuda_and_cpu(simulate):
    for kind in ("cuda", "cpu"):
        simulate(kind)
        obj = _Castable()
        assert porter_runtime.double(obj) is obj and obj.calls == ["double"]


def test_double_is_float_on_mps_with_a_warning(simulate):
    simulate("mps")
    with pytest.warns(UserWarning, match="float32 instead of torch.float64 on mps"):
        obj = porter_runtime.double(_Castable())
    assert obj.calls == ["float"]
    module = porter_runtime.double(torch.nn.Linear(2, 2))
    assert module.weight.dtype == torch.float32
