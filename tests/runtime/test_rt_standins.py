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


# -- autocast -------------------------------------------------------------------

def _mps_torch(monkeypatch, version: tuple[int, int]) -> None:
    monkeypatch.setattr(porter_runtime._compat, "mps_bf16_supported", lambda: True)
    monkeypatch.setattr(porter_runtime._compat, "at_least", lambda a, b: version >= (a, b))


@pytest.mark.parametrize("call", [lambda: porter_runtime.autocast(),
                                  lambda: porter_runtime.autocast(dtype=torch.float16),
                                  lambda: porter_runtime.cuda_amp_autocast()])
def test_autocast_keeps_cuda_float16_on_cpu_and_mps(simulate, monkeypatch, call):
    simulate("cuda")
    on_cuda = call()  # torch.autocast("cuda"), the original's context
    assert on_cuda.device == "cuda" and on_cuda.fast_dtype == torch.float16
    simulate("mps")
    _mps_torch(monkeypatch, (2, 8))
    on_mps = call()
    assert (on_mps.device, on_mps.fast_dtype, on_mps._enabled) == ("mps", torch.float16, True)
    simulate("cpu")
    with call():
        out = torch.nn.Linear(4, 2)(torch.randn(3, 4))
    assert out.dtype == on_cuda.fast_dtype
    assert out.detach().cpu().numpy().dtype.name == "float16"  # bfloat16 raises here


def test_autocast_says_once_where_it_cannot_keep_float16(simulate, monkeypatch):
    simulate("mps")
    _mps_torch(monkeypatch, (2, 7))  # no GradScaler for mps before torch 2.8
    with pytest.warns(UserWarning, match="torch.bfloat16 on mps instead of CUDA's torch.float16"):
        assert porter_runtime.autocast().fast_dtype == torch.bfloat16


# -- GradScaler -----------------------------------------------------------------

def _enabled_state() -> dict:
    """What an enabled scaler's state_dict() holds (one class for every device)."""
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    scaler._growth_tracker = torch.full((), 3, dtype=torch.int32)
    return scaler.state_dict()


def test_scaler_on_cuda_is_cudas_and_on_cpu_a_real_one(simulate):
    machine = simulate("cuda")
    made = machine.record(torch.amp, "GradScaler", "cuda scaler")
    assert porter_runtime.GradScaler(init_scale=1024.0) == "cuda scaler"
    assert made.calls == [(("cuda",), {"init_scale": 1024.0})]
    machine.monkeypatch.undo()
    simulate("cpu")
    scaler = porter_runtime.GradScaler(init_scale=1024.0, growth_interval=7)
    assert scaler.is_enabled() and scaler.state_dict().keys() == _enabled_state().keys()


@pytest.mark.filterwarnings("ignore:porter_runtime")
@pytest.mark.parametrize("machine", ["mps", "cpu"])
def test_scaler_the_runtime_disabled_answers_as_an_enabled_one(simulate, monkeypatch, machine):
    simulate(machine)
    if machine == "mps":
        _mps_torch(monkeypatch, (2, 7))
    else:
        monkeypatch.setenv("PORTER_AMP_DTYPE", "bfloat16")
    scaler = porter_runtime.GradScaler(init_scale=1024.0, growth_interval=7)
    assert not scaler.is_enabled() and isinstance(scaler, torch.amp.GradScaler)
    state = scaler.state_dict()
    assert state.keys() == _enabled_state().keys()
    assert (state["scale"], state["growth_interval"], scaler.get_growth_interval()) == (1024.0, 7, 7)
    assert (scaler.get_growth_factor(), scaler.get_backoff_factor()) == (2.0, 0.5)
    scaler.load_state_dict(_enabled_state())  # a CUDA checkpoint's scaler
    assert scaler.state_dict() == _enabled_state()
    back_on_cuda = torch.amp.GradScaler("cpu")  # enabled: refuses the {} of torch's disabled one
    back_on_cuda.load_state_dict(scaler.state_dict())
    assert back_on_cuda.get_scale() == 1024.0


def test_scaler_the_caller_disabled_stays_torchs(simulate):
    simulate("cpu")
    scaler = porter_runtime.GradScaler(enabled=False)
    assert type(scaler) is torch.amp.GradScaler and scaler.state_dict() == {}  # as on CUDA


# -- sdpa_kernel ----------------------------------------------------------------

def _switches() -> tuple[bool, bool]:
    return torch.backends.cuda.flash_sdp_enabled(), torch.backends.cuda.math_sdp_enabled()


def _attend() -> torch.Tensor:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32) for _ in range(3))
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.backends.cuda.sdp_kernel is deprecated
@pytest.mark.parametrize("form", ["old", "new"])
def test_sdpa_kernel_math_restriction_keeps_its_effect_on_cpu(simulate, form):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def restrict(original: bool):
        """The restriction as the original wrote it (torch's) or as ported (the runtime's)."""
        if form == "old":
            manager = torch.backends.cuda.sdp_kernel if original else porter_runtime.sdpa_kernel
            return manager(enable_flash=False, enable_math=True, enable_mem_efficient=False)
        return (sdpa_kernel if original else porter_runtime.sdpa_kernel)([SDPBackend.MATH])

    simulate("cuda")
    with restrict(original=False):
        on_cuda = _switches()
    with restrict(original=True):  # the original, as it ran on this CPU before the port
        original = _attend()
    simulate("cpu")
    with restrict(original=False):
        assert _switches() == on_cuda == (False, True)
        ported = _attend()
    assert torch.equal(ported, original)
    assert not torch.equal(_attend(), original)  # the flash kernel's numbers differ


def test_sdpa_kernel_says_once_what_it_cannot_keep(simulate):
    from torch.nn.attention import SDPBackend

    simulate("cpu")
    with pytest.warns(UserWarning, match="FLASH_ATTENTION.*also allows MATH"):
        with porter_runtime.sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            assert _switches() == (True, True)
    with pytest.warns(UserWarning, match="EFFICIENT_ATTENTION.*restricts nothing"):
        with porter_runtime.sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            assert _switches() == (True, True)


def test_double_here_is_the_objects_own_double_on_cuda_and_on_the_cpu(simulate):
    for machine in ("cuda", "cpu", "mps"):  # "mps": the run resolved there, but these tensors are on the host
        simulate(machine)
        x = torch.arange(3.0)
        y = porter_runtime.double_here(x)
        assert y.dtype == torch.float64 and torch.equal(y, x.double())
        module = torch.nn.Linear(2, 2)
        assert porter_runtime.double_here(module) is module and module.weight.dtype == torch.float64


def test_to_dtype_is_the_tensors_own_cast_on_cuda_and_on_the_cpu(simulate):
    for machine in ("cuda", "cpu"):
        simulate(machine)
        x = torch.arange(3.0)
        y = porter_runtime.to_dtype(x, torch.float64)
        assert y.dtype == torch.float64 and torch.equal(y, x.to(torch.float64))
        module = torch.nn.Linear(2, 2)
        assert porter_runtime.to_dtype(module, torch.float64) is module and module.weight.dtype == torch.float64
