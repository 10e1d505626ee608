"""flash-attn 1.x's FlashAttention module (consistency_models' cm/unet.py builds it): 1.x's
own class on CUDA where it imports, its semantics (flash_attn/flash_attention.py, 1.0.9)
on the runtime's attention twins elsewhere."""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch

import porter_runtime


def _reference(qkv: torch.Tensor, causal: bool = False, scale=None) -> torch.Tensor:
    """Softmax attention over (B, S, 3, H, D), written out."""
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))  # (B, H, S, D)
    scores = q @ k.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        s = q.shape[-2]
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(1, 2)


@pytest.mark.parametrize("causal", [False, True])
def test_packed_qkv_without_a_mask(causal):
    torch.manual_seed(0)
    qkv = torch.randn(2, 5, 3, 2, 8)
    attn = porter_runtime.FlashAttention(attention_dropout=0.1).eval()
    out, weights = attn(qkv, causal=causal)
    assert weights is None and out.shape == (2, 5, 2, 8)
    torch.testing.assert_close(out, _reference(qkv, causal), rtol=1e-5, atol=1e-5)


def test_softmax_scale_and_no_state():
    torch.manual_seed(1)
    qkv = torch.randn(1, 4, 3, 1, 4)
    attn = porter_runtime.FlashAttention(softmax_scale=0.3, device=None, dtype=None)
    assert isinstance(attn, torch.nn.Module) and attn.state_dict() == {} and attn.dropout_p == 0.0
    torch.testing.assert_close(attn(qkv)[0], _reference(qkv, scale=0.3), rtol=1e-5, atol=1e-5)


def test_a_padding_mask_attends_over_kept_tokens_and_leaves_zeros():
    torch.manual_seed(2)
    qkv = torch.randn(2, 4, 3, 2, 8)
    keep = torch.tensor([[True, True, True, False], [True, True, False, False]])
    out, _ = porter_runtime.FlashAttention()(qkv, key_padding_mask=keep)
    for b, n in enumerate((3, 2)):
        torch.testing.assert_close(out[b, :n], _reference(qkv[b:b + 1, :n])[0], rtol=1e-5, atol=1e-5)
        assert torch.count_nonzero(out[b, n:]) == 0


def test_unpadded_qkv_with_cu_seqlens():
    torch.manual_seed(3)
    qkv = torch.randn(5, 3, 2, 8)  # two sequences: 3 and 2 tokens
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    out, _ = porter_runtime.FlashAttention()(qkv, cu_seqlens=cu, max_s=3, causal=True)
    torch.testing.assert_close(out[:3], _reference(qkv[None, :3], causal=True)[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[3:], _reference(qkv[None, 3:], causal=True)[0], rtol=1e-5, atol=1e-5)


def test_cuda_with_flash_attn_1_builds_its_own_class(simulate, monkeypatch):
    class Real(torch.nn.Module):
        def __init__(self, softmax_scale=None, attention_dropout=0.0, device=None, dtype=None):
            super().__init__()
            self.args = (softmax_scale, attention_dropout, device, dtype)

    package = types.ModuleType("flash_attn")
    module = types.ModuleType("flash_attn.flash_attention")
    module.FlashAttention = Real
    package.flash_attention = module
    monkeypatch.setitem(sys.modules, "flash_attn", package)
    monkeypatch.setitem(sys.modules, "flash_attn.flash_attention", module)
    simulate("cuda")
    built = porter_runtime.FlashAttention(attention_dropout=0.1, dtype=torch.float16)
    assert type(built) is Real and built.args == (None, 0.1, None, torch.float16)
    simulate("cpu")
    assert type(porter_runtime.FlashAttention()) is porter_runtime.FlashAttention
