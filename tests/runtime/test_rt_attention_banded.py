"""The banded masked paths, half precision and the edge cases, against the float64
reference (tests/runtime/rt_attn_reference.py).

Sizes are large enough that every path cuts its queries into several chunks (the
window path's unfolded batches, the causal bands, the capped chunks); budgets are
shrunk so that chunking happens at these sizes too.
"""
from __future__ import annotations

import itertools

import pytest
import torch

import porter_runtime
from porter_runtime.attn import core as _attn_core

from rt_attn_reference import reference

LENGTHS = [(96, 96), (70, 130), (130, 70)]
MASKS = [  # (causal, window, alibi, softcap)
    (True, (16, 0), False, 0.0), (False, (20, 7), False, 0.0), (False, (0, 0), False, 0.0),
    (True, (-1, -1), True, 0.0), (True, (12, 0), True, 0.0), (False, (5, -1), False, 0.0),
    (False, (-1, 3), True, 0.0), (True, (-1, -1), False, 5.0), (False, (9, 9), True, 5.0),
]


@pytest.fixture(autouse=True)
def _small_budgets(monkeypatch):
    monkeypatch.setattr(_attn_core, "_BAND_BUDGET", 40_000)    # a few chunks per SDPA call
    monkeypatch.setattr(_attn_core, "_SCORE_BUDGET", 64_000)   # several capped chunks


def _tensors(sq, sk, h, hk, dtype, b=2, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    make = lambda s, n: torch.randn(b, s, n, d, generator=gen, dtype=torch.float64)
    return make(sq, h), make(sk, hk), make(sk, hk)


def _kwargs(causal, window, alibi, softcap, h=4, b=2):
    slopes = torch.rand(b, h, generator=torch.Generator().manual_seed(5)) if alibi else None
    return {"causal": causal, "window_size": window, "alibi_slopes": slopes, "softcap": softcap}


@pytest.mark.parametrize("lengths,heads,mask", list(itertools.product(
    LENGTHS, [(4, 4), (4, 2)], MASKS)))
def test_banded_paths_match_reference_forward_and_backward(lengths, heads, mask):
    q, k, v = _tensors(*lengths, *heads, torch.float64)
    kwargs = _kwargs(*mask)
    leaves = [t.float().requires_grad_() for t in (q, k, v)]
    out = porter_runtime.attention(*leaves, **kwargs)
    ref_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    expected = reference(*ref_leaves, **kwargs)
    torch.testing.assert_close(out.double(), expected, atol=2e-5, rtol=1e-5)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = torch.autograd.grad(out, leaves, grad.float())
    want = torch.autograd.grad(expected, ref_leaves, grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, atol=5e-5, rtol=1e-4)


@pytest.mark.parametrize("mask", MASKS)
def test_inference_path_equals_autograd_path(mask):
    """Without autograd the capped path works in place: same numbers."""
    q, k, v = (t.float() for t in _tensors(96, 96, 4, 2, torch.float64))
    kwargs = _kwargs(*mask)
    with torch.no_grad():
        fast = porter_runtime.attention(q, k, v, **kwargs)
    slow = porter_runtime.attention(q.requires_grad_(), k, v, **kwargs)
    torch.testing.assert_close(fast, slow.detach(), atol=1e-6, rtol=1e-6)


# --- half precision: within 2x of an exact kernel that accumulates in float32 --------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("mask", MASKS + [(True, (-1, -1), False, 30.0),
                                          (False, (-1, -1), False, 30.0)])
def test_half_precision_error_within_2x_of_fp32_accumulation(dtype, mask):
    q, k, v = (t * 3 for t in _tensors(96, 120, 4, 2, torch.float64, seed=7))
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)  # the inputs every kernel sees
    kwargs = _kwargs(*mask)
    exact = reference(q, k, v, **kwargs)
    fp32 = reference(q, k, v, compute=torch.float32, **kwargs).to(dtype)
    ours = porter_runtime.attention(q, k, v, **kwargs)
    err = lambda x: (x.double() - exact).abs()
    budget = err(fp32)
    assert err(ours).max() <= 2 * budget.max() + 1e-6
    assert err(ours).mean() <= 2 * budget.mean() + 1e-7


# --- edge cases -----------------------------------------------------------------------

def test_cu_seqlens_not_starting_at_zero_keeps_the_rows_before():
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(10, 2, 8, generator=gen, requires_grad=True)
    k = torch.randn(12, 2, 8, generator=gen, requires_grad=True)
    cu_q = torch.tensor([3, 6, 10], dtype=torch.int32)
    cu_k = torch.tensor([2, 7, 12], dtype=torch.int32)
    out = porter_runtime.attention_varlen(q, k, k, cu_q, cu_k, 4, 5, causal=True)
    assert out.shape == (10, 2, 8)
    assert torch.equal(out[:3], torch.zeros(3, 2, 8))  # rows of no sequence: 0
    for (q0, q1), (k0, k1) in zip([(3, 6), (6, 10)], [(2, 7), (7, 12)]):
        qd, kd = q[None, q0:q1].double(), k[None, k0:k1].double()
        torch.testing.assert_close(out[q0:q1].double(), reference(qd, kd, kd, causal=True)[0],
                                   atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.equal(q.grad[:3], torch.zeros(3, 2, 8))


@pytest.mark.parametrize("kwargs", [{}, {"causal": True}, {"window_size": (2, 0)},
                                    {"softcap": 3.0}, {"alibi_slopes": torch.rand(4)}])
def test_zero_keys_gives_zeros_connected_to_autograd(kwargs):
    q = torch.randn(2, 5, 4, 8, requires_grad=True)
    k = torch.randn(2, 0, 2, 8, requires_grad=True)
    v = torch.randn(2, 0, 2, 8, requires_grad=True)
    out = porter_runtime.attention(q, k, v, **kwargs)
    expected = reference(q.double(), k.double(), v.double(), **kwargs)
    assert out.shape == (2, 5, 4, 8) and torch.equal(out.double(), expected)
    assert out.grad_fn is not None
    out.sum().backward()
    assert torch.equal(q.grad, torch.zeros_like(q))


@pytest.mark.parametrize("kwargs", [{"causal": True}, {"window_size": (2, 1)},
                                    {"softcap": 3.0, "causal": True},
                                    {"alibi_slopes": torch.rand(4), "window_size": (3, 0)}])
def test_zero_queries(kwargs):
    q = torch.randn(2, 0, 4, 8, requires_grad=True)
    k, v = torch.randn(2, 6, 2, 8), torch.randn(2, 6, 2, 8, requires_grad=True)
    out = porter_runtime.attention(q, k, v, **kwargs)
    assert out.shape == (2, 0, 4, 8) and out.grad_fn is not None
    out.sum().backward()
    assert v.grad is not None and torch.equal(v.grad, torch.zeros_like(v))


def test_varlen_with_an_empty_and_a_keyless_sequence():
    q, k = torch.randn(7, 2, 8), torch.randn(5, 2, 8)
    cu_q = torch.tensor([0, 0, 3, 7], dtype=torch.int32)
    cu_k = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
    out = porter_runtime.attention_varlen(q, k, k, cu_q, cu_k, 4, 3, softcap=2.0)
    assert torch.equal(out[:3], torch.zeros(3, 2, 8))  # sequence 1 has no key
    expected = reference(q[None, 3:].double(), k[None, 2:].double(), k[None, 2:].double(),
                         softcap=2.0)[0]
    torch.testing.assert_close(out[3:].double(), expected, atol=1e-5, rtol=1e-5)
