"""autocast, GradScaler, custom_fwd/bwd, supported_dtype and is_bf16_supported."""
from __future__ import annotations

import warnings

import pytest
import torch

import porter_runtime
from porter_runtime import _compat


def test_cuda_autocast_is_exactly_torch_autocast_cuda(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch, "autocast", "cm")
    assert porter_runtime.autocast() == "cm"
    porter_runtime.autocast(torch.bfloat16, enabled=False, cache_enabled=True)
    assert recorder.calls == [
        (("cuda",), {"dtype": None, "enabled": True, "cache_enabled": None}),
        (("cuda",), {"dtype": torch.bfloat16, "enabled": False, "cache_enabled": True}),
    ]


@pytest.mark.parametrize("torch_version", [(2, 8), (2, 13)])
def test_mps_autocast_keeps_cuda_fp16_where_mps_has_a_scaler(simulate, monkeypatch, torch_version):
    machine = simulate("mps")
    monkeypatch.setattr(_compat, "mps_bf16_supported", lambda: True)
    monkeypatch.setattr(_compat, "at_least", lambda a, b: torch_version >= (a, b))
    recorder = machine.record(torch, "autocast", "cm")
    scaler = machine.record(torch.amp, "GradScaler", "scaler")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        porter_runtime.autocast()
        porter_runtime.GradScaler()
    assert recorder.calls[0] == (("mps",), {"dtype": torch.float16, "enabled": True,
                                            "cache_enabled": None})
    assert scaler.calls == [(("mps",), {})]


def test_mps_before_2_8_uses_bf16_with_one_warning(simulate, monkeypatch):
    machine = simulate("mps")
    monkeypatch.setattr(_compat, "mps_bf16_supported", lambda: True)
    monkeypatch.setattr(_compat, "at_least", lambda a, b: (2, 7) >= (a, b))
    recorder = machine.record(torch, "autocast", "cm")
    with pytest.warns(UserWarning, match="bfloat16.*float16.*no GradScaler for mps.*loss scaling"):
        porter_runtime.autocast()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        porter_runtime.autocast(dtype=torch.float16)  # warned once already
    assert recorder.calls[0] == (("mps",), {"dtype": torch.bfloat16, "enabled": True,
                                            "cache_enabled": None})
    assert recorder.calls[1][1]["dtype"] == torch.bfloat16


def test_porter_amp_dtype_asks_for_bf16_off_cuda_only(simulate, monkeypatch):
    monkeypatch.setenv("PORTER_AMP_DTYPE", "bfloat16")
    machine = simulate("cpu")
    recorder = machine.record(torch, "autocast", "cm")
    with pytest.warns(UserWarning, match="bfloat16 on cpu.*PORTER_AMP_DTYPE"):
        porter_runtime.autocast()
    assert recorder.calls[-1][1]["dtype"] == torch.bfloat16
    simulate("cuda")
    porter_runtime.autocast()
    assert recorder.calls[-1] == (("cuda",), {"dtype": None, "enabled": True, "cache_enabled": None})


def test_mps_without_bf16_or_scaler_turns_autocast_off(simulate, monkeypatch):
    machine = simulate("mps")
    monkeypatch.setattr(_compat, "mps_bf16_supported", lambda: False)
    monkeypatch.setattr(_compat, "at_least", lambda a, b: (2, 7) >= (a, b))
    recorder = machine.record(torch, "autocast", "cm")
    with pytest.warns(UserWarning, match="autocast is disabled on mps"):
        porter_runtime.autocast()
    assert recorder.calls[0][1]["enabled"] is False


def test_mps_without_bf16_but_with_scaler_keeps_fp16(simulate, monkeypatch):
    machine = simulate("mps")
    monkeypatch.setattr(_compat, "mps_bf16_supported", lambda: False)
    autocast = machine.record(torch, "autocast", "cm")
    scaler = machine.record(torch.amp, "GradScaler", "scaler")
    porter_runtime.autocast()
    porter_runtime.GradScaler(init_scale=1024.0)
    assert autocast.calls[0][1]["dtype"] == torch.float16
    assert scaler.calls == [(("mps",), {"init_scale": 1024.0})]


def test_explicit_other_dtypes_pass_through(simulate):
    machine = simulate("cpu")
    recorder = machine.record(torch, "autocast", "cm")
    porter_runtime.autocast(dtype=torch.float32)
    assert recorder.calls[0][1]["dtype"] == torch.float32


def test_cpu_autocast_really_runs_cuda_fp16():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctx = porter_runtime.autocast()
    with ctx:
        out = torch.ones(2, 2) @ torch.ones(2, 2)
    assert out.dtype == torch.float16
    assert out.numpy().dtype.name == "float16"  # bfloat16 would raise here

    @porter_runtime.autocast()
    def decorated() -> torch.Tensor:
        return torch.ones(2, 2) @ torch.ones(2, 2)

    assert decorated().dtype == torch.float16


@pytest.mark.parametrize("args,kwargs,expected", [
    ((), {}, {}),
    ((1024.0, 3.0), {"enabled": False}, {"init_scale": 1024.0, "growth_factor": 3.0,
                                         "enabled": False}),
    (("cuda",), {"growth_interval": 10}, {"growth_interval": 10}),  # torch.amp form
    ((), {"device": "cuda", "init_scale": 8.0}, {"init_scale": 8.0}),
])
def test_cuda_grad_scaler_is_the_real_cuda_scaler(simulate, args, kwargs, expected):
    machine = simulate("cuda")
    recorder = machine.record(torch.amp, "GradScaler", "scaler")
    assert porter_runtime.GradScaler(*args, **kwargs) == "scaler"
    assert recorder.calls == [(("cuda",), expected)]


def test_cuda_grad_scaler_under_a_torch_without_torch_amp_grad_scaler_is_the_cuda_one(simulate, monkeypatch):
    machine = simulate("cuda")
    monkeypatch.delattr(torch.amp, "GradScaler")  # torch < 2.3, as llama2.c pins (2.0.1)
    recorder = machine.record(torch.cuda.amp, "GradScaler", "scaler")
    assert porter_runtime.GradScaler(enabled=False, init_scale=4.0) == "scaler"
    assert recorder.calls == [((), {"enabled": False, "init_scale": 4.0})]


def test_grad_scaler_function_form(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch.amp, "GradScaler", "scaler")
    porter_runtime.grad_scaler(enabled=False, init_scale=2.0)
    assert recorder.calls == [(("cuda",), {"enabled": False, "init_scale": 2.0})]


def test_cpu_grad_scaler_is_a_real_cpu_scaler():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = porter_runtime.GradScaler(init_scale=1024.0)
    assert scaler.is_enabled() is True
    with porter_runtime.autocast():
        loss = model(torch.ones(1, 2)).float().sum()
    scaler.scale(loss).backward()
    before = model.weight.detach().clone()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(before, model.weight)
    assert scaler.state_dict()["scale"] == 1024.0


@pytest.mark.filterwarnings("ignore:porter_runtime")
def test_scaler_the_runtime_disabled_is_an_honest_passthrough(monkeypatch):
    monkeypatch.setenv("PORTER_AMP_DTYPE", "bf16")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = porter_runtime.GradScaler()
    assert scaler.is_enabled() is False
    loss = model(torch.ones(1, 2)).sum()
    assert scaler.scale(loss) is loss
    scaler.scale(loss).backward()
    before = model.weight.detach().clone()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(before, model.weight)
    assert scaler.get_scale() == 1.0


def test_custom_fwd_and_bwd_on_cuda_use_device_type_cuda(simulate):
    machine = simulate("cuda")
    fwd = machine.record(torch.amp, "custom_fwd", "f")
    bwd = machine.record(torch.amp, "custom_bwd", "b")
    fn = lambda ctx, x: x
    porter_runtime.custom_fwd(fn, cast_inputs=torch.float16)
    porter_runtime.custom_fwd(cast_inputs=torch.float32)
    porter_runtime.custom_bwd(fn)
    assert fwd.calls == [((fn,), {"device_type": "cuda", "cast_inputs": torch.float16}),
                         ((None,), {"device_type": "cuda", "cast_inputs": torch.float32})]
    assert bwd.calls == [((fn,), {"device_type": "cuda"})]


@pytest.mark.filterwarnings("ignore:porter_runtime")
def test_custom_fwd_on_cpu_casts_to_the_autocast_dtype():
    seen = {}

    class Double(torch.autograd.Function):
        @staticmethod
        @porter_runtime.custom_fwd(cast_inputs=torch.float16)
        def forward(ctx, x):
            seen["dtype"] = x.dtype
            return x * 2

        @staticmethod
        @porter_runtime.custom_bwd
        def backward(ctx, grad):
            return grad * 2

    x = torch.ones(2, requires_grad=True)
    with porter_runtime.autocast():
        Double.apply(x).sum().backward()
    assert seen["dtype"] == torch.float16 and torch.equal(x.grad, torch.full((2,), 2.0))


@pytest.mark.parametrize("machine", ["cuda", "cpu"])
def test_supported_dtype_is_identity_on_cuda_and_cpu(simulate, machine):
    simulate(machine)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dt in (torch.float64, torch.bfloat16, torch.float16, torch.complex128):
            assert porter_runtime.supported_dtype(dt) == dt


def test_supported_dtype_on_mps_warns_once_naming_dtype_and_reason(simulate, monkeypatch):
    simulate("mps")
    monkeypatch.setattr(_compat, "mps_bf16_supported", lambda: True)
    with pytest.warns(UserWarning, match="torch.float32 instead of torch.float64.*no float64"):
        assert porter_runtime.supported_dtype(torch.float64) == torch.float32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert porter_runtime.supported_dtype(torch.float64) == torch.float32
        assert porter_runtime.supported_dtype(torch.bfloat16) == torch.bfloat16
        assert porter_runtime.supported_dtype(torch.float16) == torch.float16
    with pytest.warns(UserWarning, match="complex128"):
        assert porter_runtime.supported_dtype(torch.complex128) == torch.complex64


def test_supported_dtype_bf16_on_old_macos(simulate, monkeypatch):
    simulate("mps")
    monkeypatch.setattr(_compat, "mps_bf16_supported", lambda: False)
    with pytest.warns(UserWarning, match="torch.bfloat16.*macOS 14"):
        assert porter_runtime.supported_dtype(torch.bfloat16) == torch.float32


def test_supported_dtype_for_an_explicit_device(simulate):
    simulate("cpu")
    with pytest.warns(UserWarning, match="float64"):
        assert porter_runtime.supported_dtype(torch.float64, "mps") == torch.float32


def test_is_bf16_supported_per_machine(simulate, monkeypatch):
    simulate("cpu")
    assert porter_runtime.is_bf16_supported() is True
    simulate("mps")
    monkeypatch.setattr(_compat, "at_least", lambda a, b: (2, 8) >= (a, b))
    monkeypatch.setattr(torch.backends.mps, "is_macos_or_newer", lambda a, b: False)
    assert porter_runtime.is_bf16_supported() is False
    monkeypatch.setattr(_compat, "at_least", lambda a, b: (2, 9) >= (a, b))
    assert porter_runtime.is_bf16_supported() is True
