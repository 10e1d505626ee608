"""porter_runtime.compile: torch.compile on CUDA, eager elsewhere unless opted in."""
from __future__ import annotations

import warnings

import pytest
import torch

import porter_runtime
from porter_runtime import _compile


def _double(x):
    return x * 2


def test_cuda_compiles_with_every_call_form(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch, "compile", lambda m, **kw: ("compiled", m))
    model = torch.nn.Linear(1, 1)
    assert porter_runtime.compile(model) == ("compiled", model)
    assert porter_runtime.compile(model, mode="max-autotune") == ("compiled", model)

    @porter_runtime.compile
    def f(x):
        return x

    @porter_runtime.compile(fullgraph=True, dynamic=False)
    def g(x):
        return x

    assert recorder.calls == [((model,), {}), ((model,), {"mode": "max-autotune"}),
                              ((f[1],), {}), ((g[1],), {"fullgraph": True, "dynamic": False})]


@pytest.mark.parametrize("machine", ["mps", "cpu"])
def test_off_cuda_runs_eagerly_with_one_warning(simulate, machine):
    m = simulate(machine)
    recorder = m.record(torch, "compile", "compiled")
    model = torch.nn.Linear(1, 1)
    with pytest.warns(UserWarning, match=f"not used on {machine}.*PORTER_COMPILE=1"):
        assert porter_runtime.compile(model)._orig_mod is model
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert porter_runtime.compile(_double, mode="reduce-overhead") is _double

        @porter_runtime.compile(mode="max-autotune")
        def f(x):
            return x + 1

        assert f(1) == 2
    assert not recorder.calls


@pytest.mark.parametrize("name", ["DISABLE_COMPILE", "PORTER_COMPILE"])
def test_porter_variables_do_not_change_torch_compile_on_cuda(simulate, monkeypatch, name):
    """Only torch's own variables (which torch.compile reads itself) act on CUDA."""
    machine = simulate("cuda")
    recorder = machine.record(torch, "compile", "compiled")
    monkeypatch.setenv(name, "1")
    with pytest.warns(UserWarning, match=f"{name} is set but ignored on CUDA"):
        assert porter_runtime.compile(_double, mode="max-autotune") == "compiled"
    assert recorder.calls == [((_double,), {"mode": "max-autotune"})]


def test_disable_compile_keeps_eager_off_cuda(simulate, monkeypatch):
    machine = simulate("cpu")
    recorder = machine.record(torch, "compile", "compiled")
    monkeypatch.setenv("DISABLE_COMPILE", "1")
    monkeypatch.setenv("PORTER_COMPILE", "1")
    assert porter_runtime.compile(_double) is _double
    model = torch.nn.Linear(1, 1)
    assert porter_runtime.compile(model)._orig_mod is model
    assert not recorder.calls


def test_opt_in_compiles_on_cpu_with_a_real_backend(monkeypatch):
    monkeypatch.setenv("PORTER_COMPILE", "1")
    compiled = porter_runtime.compile(_double, backend="eager")
    assert compiled is not _double
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 2.0))


def test_opt_in_without_a_cxx_compiler_falls_back(monkeypatch):
    monkeypatch.setenv("PORTER_COMPILE", "1")
    monkeypatch.setattr(_compile, "_has_cxx", lambda: False)
    with pytest.warns(UserWarning, match="C\\+\\+ compiler"):
        assert porter_runtime.compile(_double) is _double
    model = torch.nn.Linear(1, 1)
    assert porter_runtime.compile(model)._orig_mod is model


def test_opt_in_with_a_missing_backend_falls_back(monkeypatch):
    monkeypatch.setenv("PORTER_COMPILE", "1")
    with pytest.warns(UserWarning, match="'no_such_backend' is not available"):
        assert porter_runtime.compile(_double, backend="no_such_backend") is _double


def test_opt_in_on_old_mps_falls_back(simulate, monkeypatch):
    simulate("mps")
    monkeypatch.setenv("PORTER_COMPILE", "1")
    monkeypatch.setattr(porter_runtime._compat, "at_least", lambda a, b: (2, 7) >= (a, b))
    with pytest.warns(UserWarning, match="no usable Inductor backend for mps"):
        assert porter_runtime.compile(_double) is _double


def test_setup_failure_at_first_call_falls_back_to_eager(monkeypatch):
    monkeypatch.setenv("PORTER_COMPILE", "1")

    class InvalidCxxCompiler(RuntimeError):
        pass

    def broken(*args, **kwargs):
        raise InvalidCxxCompiler("No working C++ compiler found")

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: broken)
    compiled = porter_runtime.compile(_double)
    with pytest.warns(UserWarning, match="InvalidCxxCompiler"):
        assert compiled(3) == 6
    assert compiled(4) == 8


def test_user_errors_are_not_swallowed(monkeypatch):
    monkeypatch.setenv("PORTER_COMPILE", "1")
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)

    def bad(x):
        raise KeyError("user bug")

    with pytest.raises(KeyError):
        porter_runtime.compile(bad)(1)
