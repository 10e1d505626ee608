"""porter_runtime's FlashAttention-3 twin, Hugging Face option helpers and optional
CUDA extension builds.

Decisions with CUDA simulated and fake flash_attn_interface / flash_attn modules: on
CUDA the library the original code imported first runs, with the caller's arguments,
and its result comes back as it returned it (FA3's ``(out, lse)`` included).
Numerics off CUDA: fa3_attention against softmax(q·kᵀ·scale + causal mask)·v.
"""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch

import porter_runtime

from conftest import Recorder


def _install(monkeypatch, name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def _hide(monkeypatch, *names: str) -> None:
    for name in names:  # a None entry makes `import name` raise ImportError
        monkeypatch.setitem(sys.modules, name, None)


def _reference(q, k, v, causal, scale=None):
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    scores = qh @ kh.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        sq, sk = scores.shape[-2:]
        mask = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ vh).transpose(1, 2).to(q.dtype)


def test_fa3_on_cuda_calls_flash_attn_interface_and_returns_its_tuple(simulate, monkeypatch):
    simulate("cuda")
    fa3 = Recorder("flash_attn_func", ("out", "lse"))
    _install(monkeypatch, "flash_attn_interface", flash_attn_func=fa3)
    q, k, v = (torch.randn(1, 4, 2, 8) for _ in range(3))
    assert porter_runtime.fa3_attention(q, k, v, causal=True, softmax_scale=0.5) == ("out", "lse")
    (args, kwargs), = fa3.calls
    assert args == (q, k, v) and kwargs == {"causal": True, "softmax_scale": 0.5}


def test_fa3_missing_on_cuda_falls_back_to_flash_attn_2(simulate, monkeypatch):
    simulate("cuda")
    _hide(monkeypatch, "flash_attn_interface")
    fa2 = Recorder("flash_attn_func", "fa2-out")
    _install(monkeypatch, "flash_attn", flash_attn_func=fa2)
    q, k, v = (torch.randn(1, 4, 2, 8, dtype=torch.float16) for _ in range(3))
    assert porter_runtime.fa3_attention(q, k, v, causal=True) == "fa2-out"
    assert fa2.calls == [((q, k, v), {"causal": True})]


@pytest.mark.parametrize("causal,sq,sk", [(True, 5, 5), (False, 5, 5), (True, 3, 6)])
def test_fa3_off_cuda_is_exact_attention_and_never_imports_the_library(simulate, monkeypatch, causal, sq, sk):
    simulate("cpu")
    fa3 = Recorder("flash_attn_func", ("out", "lse"))
    _install(monkeypatch, "flash_attn_interface", flash_attn_func=fa3)
    torch.manual_seed(0)
    q, k, v = torch.randn(2, sq, 3, 16), torch.randn(2, sk, 3, 16), torch.randn(2, sk, 3, 16)
    out = porter_runtime.fa3_attention(q, k, v, causal=causal)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape
    torch.testing.assert_close(out, _reference(q, k, v, causal), atol=1e-5, rtol=1e-5)
    assert fa3.calls == []


def test_attn_implementation_keeps_flash_only_where_cuda_has_it(simulate, monkeypatch):
    simulate("cuda")
    _install(monkeypatch, "flash_attn")
    _hide(monkeypatch, "flash_attn_interface")
    assert porter_runtime.attn_implementation("flash_attention_2") == "flash_attention_2"
    assert porter_runtime.attn_implementation("flash_attention_3") == "sdpa"
    assert porter_runtime.attn_implementation("eager") == "eager"
    simulate("mps")
    assert porter_runtime.attn_implementation("flash_attention_2") == "sdpa"
    simulate("cuda")
    _hide(monkeypatch, "flash_attn")
    porter_runtime._reset()
    assert porter_runtime.attn_implementation("flash_attention_2") == "sdpa"


@pytest.mark.parametrize("kind,expected", [("cuda", True), ("mps", None), ("cpu", None)])
def test_cuda_option_is_the_value_on_cuda_only(simulate, kind, expected):
    simulate(kind)
    assert porter_runtime.cuda_option(True) is expected


def test_build_cuda_extension_builds_with_the_callers_arguments_on_cuda_only(simulate):
    load = Recorder("load", "module")
    simulate("cuda")
    assert porter_runtime.build_cuda_extension(load, "ext", sources=["a.cu"], verbose=True) == "module"
    assert load.calls == [(("ext",), {"sources": ["a.cu"], "verbose": True})]
    simulate("mps")
    assert porter_runtime.build_cuda_extension(load, "ext", sources=["a.cu"]) is None
    assert len(load.calls) == 1


def test_flash_attn_version_is_the_installed_one_on_cuda_and_the_twins_release_elsewhere(simulate, monkeypatch):
    """LongLoRA (blind round 15) asserts `flash_attn_version >= "2.1.0"` before it uses a KV
    cache: off CUDA the twins' release answers; on CUDA the import runs as it did."""
    simulate("cpu")
    assert porter_runtime.flash_attn_version() == "2.8.3" >= "2.1.0"
    simulate("cuda")
    with pytest.raises(ImportError):
        porter_runtime.flash_attn_version()  # no flash_attn here: the import fails where it did
    monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(__version__="2.0.4"))
    assert porter_runtime.flash_attn_version() == "2.0.4"
