"""porter_runtime's twins of flash_attn's private forward/backward functions.

Off CUDA they compute what flash-attn's kernels compute: the output and its
log-sum-exp (checked against float64 softmax attention), and, in the backward, the
gradients for the *given* output and log-sum-exp (checked against autograd, also for
an output merged from two calls over halves of the keys, the online-softmax merge that
ring attention and MoBA build on). Every release's argument layout binds, and the
result comes back in that release's shape. On simulated CUDA with a fake
flash_attn.flash_attn_interface, flash_attn's own function gets the caller's arguments.
"""
from __future__ import annotations

import math
import sys
import types

import pytest
import torch

import porter_runtime

from conftest import Recorder

H, HK, D = 4, 2, 16


def _reference(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi=None):
    """(out, lse) in float64: q (B, Sq, H, D), k/v (B, Sk, Hk, D); bottom-right masks."""
    sq, sk, groups = q.shape[1], k.shape[1], q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(groups, 2), v.repeat_interleave(groups, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / math.sqrt(q.shape[-1])
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i, j = torch.arange(sq)[:, None] + sk - sq, torch.arange(sk)[None]
    if alibi is not None:
        s = s - alibi.double().view(1, -1, 1, 1) * (i - j).abs()
    left, right = window[0], 0 if causal else window[1]
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    s = s.masked_fill(~keep, -math.inf)
    lse = torch.logsumexp(s, -1)
    out = torch.einsum("bhqk,bkhd->bqhd", torch.exp(s - lse[..., None]).nan_to_num(0), v.double())
    return out, torch.where(torch.isneginf(lse), torch.full_like(lse, math.inf), lse)


def _qkv(b=2, sq=37, sk=40, requires_grad=False):
    return (torch.randn(b, sq, H, D, requires_grad=requires_grad),
            torch.randn(b, sk, HK, D, requires_grad=requires_grad),
            torch.randn(b, sk, HK, D, requires_grad=requires_grad))


CASES = {
    "causal": dict(causal=True), "full": dict(), "window": dict(window=(5, 3)),
    "softcap": dict(softcap=5.0, causal=True), "alibi": dict(alibi=torch.rand(H)),
}


@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_match_attention_and_autograd(case):
    torch.manual_seed(0)
    options = CASES[case]
    q, k, v = _qkv(requires_grad=True)
    ref_out, ref_lse = _reference(q, k, v, **options)
    dout = torch.randn(ref_out.shape)
    (ref_out * dout).sum().backward()
    causal, (left, right) = options.get("causal", False), options.get("window", (-1, -1))
    softcap, alibi = options.get("softcap", 0.0), options.get("alibi")
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    out, lse, _, rng_state = porter_runtime.flash_attn_forward(
        qd, kd, vd, 0.0, None, causal, left, right, softcap, alibi, False)  # 2.7's layout
    torch.testing.assert_close(out, ref_out.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, ref_lse.float(), atol=1e-5, rtol=1e-5)
    assert lse.dtype == torch.float32 and lse.shape == (2, H, 37)
    dq, dk, dv = torch.empty_like(qd), torch.empty_like(kd), torch.empty_like(vd)
    softmax_d = porter_runtime.flash_attn_backward(dout, qd, kd, vd, out, lse, dq, dk, dv, 0.0, None, causal,
                                                   left, right, softcap, alibi, False, rng_state)
    for mine, theirs in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(softmax_d, (dout * out).sum(-1).transpose(1, 2))


def test_the_backward_uses_the_output_and_lse_it_is_given():
    """Two calls over halves of the keys, merged by their log-sum-exps; each backward
    given the merged out and lse: the gradients add up to full attention's (2.6's
    keyword layout, 8-value forward and 4-value backward)."""
    torch.manual_seed(1)
    q, k, v = _qkv(b=1, sq=20, sk=30, requires_grad=True)
    full, _ = _reference(q, k, v)
    dout = torch.randn(full.shape)
    (full * dout).sum().backward()
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    halves = [slice(0, 12), slice(12, 30)]
    parts = [porter_runtime.flash_attn_forward(q=qd, k=kd[:, h], v=vd[:, h], dropout_p=0.0, softmax_scale=None,
                                               causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                                               return_softmax=False) for h in halves]
    assert all(len(p) == 8 for p in parts)
    lse = torch.logaddexp(parts[0][5], parts[1][5])
    out = sum(p[0] * torch.exp(p[5] - lse).transpose(1, 2)[..., None] for p in parts)
    torch.testing.assert_close(out, full.float(), atol=1e-5, rtol=1e-5)
    grads = [porter_runtime.flash_attn_backward(dout, qd, kd[:, h], vd[:, h], out, lse, None, None, None, 0.0,
                                                None, False, (-1, -1), 0.0, None, False) for h in halves]
    assert all(len(g) == 4 for g in grads)
    torch.testing.assert_close(grads[0][0] + grads[1][0], q.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat([grads[0][1], grads[1][1]], 1), k.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat([grads[0][2], grads[1][2]], 1), v.grad, atol=1e-5, rtol=1e-5)


def test_varlen_attends_within_each_sequence_and_lays_lse_out_by_head():
    torch.manual_seed(2)
    cu = torch.tensor([0, 7, 20], dtype=torch.int32)
    q, k, v = torch.randn(22, H, D), torch.randn(20, HK, D), torch.randn(20, HK, D)
    out, lse, _, _ = porter_runtime.flash_attn_varlen_forward(q, k, v, cu, cu, 13, 13, 0.0, None, True)
    assert lse.shape == (H, 22)
    for a, b in ((0, 7), (7, 20)):
        ref_out, ref_lse = _reference(q[None, a:b], k[None, a:b], v[None, a:b], causal=True)
        torch.testing.assert_close(out[a:b], ref_out[0].float(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse[:, a:b], ref_lse[0].float(), atol=1e-5, rtol=1e-5)
    assert not out[20:].any() and torch.isinf(lse[:, 20:]).all()  # rows of no sequence
    grads = porter_runtime.flash_attn_varlen_backward(torch.ones_like(out), q, k, v, out, lse, None, None, None,
                                                      cu, cu, 13, 13, 0.0, None, True, (-1, -1), 0.0, None,
                                                      False, None, flash_attn_release="2.6")
    assert [g.shape for g in grads[:3]] == [q.shape, k.shape, v.shape]


def test_dropout_masks_come_back_in_the_backward_through_rng_state():
    """The forward with dropout is differentiable here: autograd through it and the
    twin's backward given its rng_state agree, so both saw the same mask."""
    torch.manual_seed(3)
    q, k, v = _qkv(b=1, sq=9, sk=9, requires_grad=True)
    out, lse, _, rng_state = porter_runtime.flash_attn_forward(q, k, v, 0.3, None, False, -1, -1, 0.0, None, False)
    dout = torch.randn(out.shape)
    (out * dout).sum().backward()
    again, _, _, _ = porter_runtime.flash_attn_forward(q.detach(), k.detach(), v.detach(), 0.3, None, False,
                                                       -1, -1, 0.0, None, False)
    assert not torch.equal(again, out.detach())  # a fresh mask each call
    dq, dk, dv = (torch.empty_like(t) for t in (q, k, v))
    porter_runtime.flash_attn_backward(dout, q.detach(), k.detach(), v.detach(), out.detach(), lse.detach(),
                                       dq, dk, dv, 0.3, None, False, -1, -1, 0.0, None, False, rng_state)
    for mine, theirs in ((dq, q.grad), (dk, k.grad), (dv, v.grad)):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout, release", [
    ((0.0, None, True, (-1, -1), None, False), "2.5"),
    ((0.0, None, True, (-1, -1), 0.0, None, False), "2.6"),
    ((0.0, None, True, -1, -1, 0.0, None, False), "2.7"),
])
def test_each_release_positional_layout_binds_and_returns_its_shape(layout, release):
    q, k, v = _qkv(b=1, sq=5, sk=5)
    result = porter_runtime.flash_attn_forward(q, k, v, *layout)
    assert len(result) == (4 if release == "2.7" else 8)
    ref_out, _ = _reference(q, k, v, causal=True)
    torch.testing.assert_close(result[0], ref_out.float(), atol=1e-5, rtol=1e-5)


def test_what_only_the_kernels_have_is_refused_clearly():
    q, k, v = _qkv(b=1, sq=4, sk=4)
    with pytest.raises(NotImplementedError, match="return_softmax"):
        porter_runtime.flash_attn_forward(q, k, v, 0.0, None, False, -1, -1, 0.0, None, True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'windowsize'"):
        porter_runtime.flash_attn_forward(q, k, v, 0.0, None, False, windowsize=(1, 1))


def test_on_cuda_flash_attn_own_private_function_gets_the_callers_arguments(simulate, monkeypatch):
    simulate("cuda")
    forward = Recorder("_flash_attn_varlen_forward", "flash-result")
    package = types.ModuleType("flash_attn")
    interface = types.ModuleType("flash_attn.flash_attn_interface")
    interface._flash_attn_varlen_forward = forward
    package.flash_attn_interface = interface
    monkeypatch.setitem(sys.modules, "flash_attn", package)
    monkeypatch.setitem(sys.modules, "flash_attn.flash_attn_interface", interface)
    q = torch.randn(4, H, D)
    result = porter_runtime.flash_attn_varlen_forward(q=q, k=q, v=q, causal=True, flash_attn_release="2.6")
    assert result == "flash-result"
    (args, kwargs), = forward.calls
    assert args == () and kwargs == {"q": q, "k": q, "v": q, "causal": True}  # the release hint is porter's
