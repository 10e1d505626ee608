"""On a CUDA machine (simulated), every departure from the original library call
warns once and names what runs instead; errors never say CUDA is absent."""
from __future__ import annotations

import sys
import types
import warnings

import pytest
import torch

import porter_runtime


def _qkv(dtype, s=4, h=2, d=8):
    return (torch.randn(1, s, h, d).to(dtype) for _ in range(3))


def _departures(record) -> list[str]:
    return [str(w.message) for w in record if "porter_runtime" in str(w.message)]


def test_flash_attn_missing_warns_once_naming_sdpa(simulate, monkeypatch):
    simulate("cuda")
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    q, k, v = _qkv(torch.bfloat16)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        porter_runtime.attention(q, k, v, causal=True)
        porter_runtime.attention(q, k, v, causal=True)
    messages = _departures(record)
    assert len(messages) == 1
    assert "flash_attn.flash_attn_func is not called on CUDA" in messages[0]
    assert "failed to import" in messages[0] and "scaled_dot_product_attention" in messages[0]


def test_flash_attn_broken_extension_is_named(simulate, monkeypatch):
    simulate("cuda")
    finder = types.ModuleType("flash_attn")

    def broken(name, *args, **kwargs):
        if name == "flash_attn":
            raise OSError("libcudart.so.12: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    real_import = __import__
    monkeypatch.delitem(sys.modules, "flash_attn", raising=False)
    monkeypatch.setattr("importlib.import_module", lambda name, *a: broken(name))
    with pytest.warns(UserWarning, match="OSError: libcudart.so.12"):
        porter_runtime.attention(*_qkv(torch.float16))
    assert finder  # the module object was never used


@pytest.fixture
def fake_flash(monkeypatch):
    module = types.ModuleType("flash_attn")
    module.__version__ = "2.0.0"
    module.flash_attn_func = lambda *a, **k: "flash"
    monkeypatch.setitem(sys.modules, "flash_attn", module)
    return module


def test_fp32_inputs_that_flash_attn_rejects_warn(simulate, fake_flash):
    simulate("cuda")
    with pytest.warns(UserWarning, match="only takes float16/bfloat16 inputs, these are "
                                         "torch.float32.*scaled_dot_product_attention"):
        out = porter_runtime.attention(*_qkv(torch.float32), causal=True)
    assert isinstance(out, torch.Tensor)


def test_function_missing_from_an_old_flash_attn_warns(simulate, fake_flash):
    simulate("cuda")
    qkv = torch.randn(1, 4, 3, 2, 8, dtype=torch.float16)
    with pytest.warns(UserWarning, match="flash_attn 2.0.0 has no flash_attn_qkvpacked_func"):
        porter_runtime.attention_qkvpacked(qkv)


def test_return_attn_probs_error_on_cuda_says_why_not_that_cuda_is_missing(simulate,
                                                                          fake_flash):
    simulate("cuda")
    with pytest.warns(UserWarning):
        with pytest.raises(NotImplementedError) as info:
            porter_runtime.attention(*_qkv(torch.float32), return_attn_probs=True)
    message = str(info.value)
    assert "float16/bfloat16" in message and "not CUDA" not in message
    assert "on CUDA" not in message.replace("CUDA kernels", "")


def test_block_table_error_off_cuda_names_the_device(simulate):
    simulate("mps")
    q, k, v = (x[0] for x in _qkv(torch.float32))
    cu = torch.tensor([0, q.shape[0]], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="this machine runs mps, not CUDA"):
        porter_runtime.attention_varlen(q, k, v, cu, cu, q.shape[0], q.shape[0],
                                        block_table=torch.zeros(1, 1, dtype=torch.int32))


def test_nothing_warns_off_cuda(simulate, monkeypatch):
    simulate("cpu")
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        porter_runtime.attention(*_qkv(torch.float32), causal=True)
        porter_runtime.memory_efficient_attention(*(t for t in _qkv(torch.float32)))


@pytest.mark.parametrize("build,name", [
    (lambda: porter_runtime.memory_efficient_attention(*_qkv(torch.float16)),
     "xformers.ops.memory_efficient_attention"),
    (lambda: porter_runtime.xformers_bias.LowerTriangularMask(),
     "xformers.ops.fmha.attn_bias.LowerTriangularMask"),
    (lambda: porter_runtime.FusedAdam([torch.nn.Parameter(torch.ones(1))]),
     "apex.optimizers.FusedAdam"),
    (lambda: porter_runtime.FusedRMSNorm(4), "apex.normalization.FusedRMSNorm"),
    (lambda: porter_runtime.bnb_optim.AdamW8bit([torch.nn.Parameter(torch.ones(1))]),
     "bitsandbytes.optim.AdamW8bit"),
    (lambda: porter_runtime.AdamATan2([torch.nn.Parameter(torch.ones(1))]),
     "adam_atan2.AdamATan2"),
])
def test_third_party_library_missing_on_cuda_warns(simulate, monkeypatch, build, name):
    simulate("cuda")
    for module in ("xformers", "xformers.ops", "xformers.ops.fmha.attn_bias", "apex",
                   "apex.optimizers", "apex.normalization", "bitsandbytes",
                   "bitsandbytes.optim", "adam_atan2"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.warns(UserWarning, match=f"{name} is not used on CUDA: it failed to import"):
        build()


def test_grad_scaler_for_cpu_stays_a_cpu_scaler_on_cuda(simulate):
    machine = simulate("cuda")
    recorder = machine.record(torch.amp, "GradScaler", "scaler")
    porter_runtime.GradScaler("cpu", init_scale=8.0)
    porter_runtime.GradScaler(device="cpu")
    porter_runtime.GradScaler("cuda", 4.0)
    assert recorder.calls == [(("cpu",), {"init_scale": 8.0}), (("cpu",), {}),
                              (("cuda",), {"init_scale": 4.0})]


def test_grad_scaler_for_cpu_is_real_on_cpu():
    scaler = porter_runtime.GradScaler("cpu", init_scale=8.0)
    assert scaler.is_enabled() and scaler.get_scale() == 8.0
