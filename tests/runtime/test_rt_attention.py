"""porter_runtime.attention* against flash-attn's documented semantics, on this CPU."""
from __future__ import annotations

import itertools
import sys
import types
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import porter_runtime
from porter_runtime.attn import core as _attn_core

from rt_attn_reference import reference

TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}

# (Sq, Sk): equal, more keys than queries (KV cache), more queries than keys.
LENGTHS = [(7, 7), (5, 11), (11, 5)]
HEADS = [(4, 4), (4, 2), (4, 1)]  # MHA, GQA, MQA
WINDOWS = [(-1, -1), (3, 0), (2, 2), (0, -1)]


def _inputs(sq: int, sk: int, h: int, hk: int, dtype: torch.dtype, b: int = 2, d: int = 16):
    gen = torch.Generator().manual_seed(sq * 100 + sk * 10 + hk)
    make = lambda s, n: torch.randn(b, s, n, d, generator=gen).to(dtype).requires_grad_()
    return make(sq, h), make(sk, hk), make(sk, hk)


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    tol = TOL[dtype]
    scale = max(1.0, expected.abs().max().item())
    torch.testing.assert_close(actual.double(), expected, atol=tol * scale, rtol=tol)


def _check_fwd_bwd(fn, ref_kwargs: dict[str, Any], tensors, dtype: torch.dtype) -> None:
    out = fn(*tensors)
    expected = reference(*[t.detach().double().requires_grad_() for t in tensors], **ref_kwargs)
    ref_inputs = expected.grad_fn is not None
    assert ref_inputs
    _close(out, expected.detach(), dtype)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    got = torch.autograd.grad(out, tensors, grad.to(out.dtype))
    leaves = [t.detach().double().requires_grad_() for t in tensors]
    want = torch.autograd.grad(reference(*leaves, **ref_kwargs), leaves, grad)
    for g, w in zip(got, want):
        _close(g, w, dtype)


GRID = list(itertools.product(LENGTHS, HEADS, [False, True], WINDOWS))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("lengths,heads,causal,window", GRID)
def test_dense_matches_reference(lengths, heads, causal, window, dtype):
    tensors = _inputs(*lengths, *heads, dtype)
    kwargs = {"causal": causal, "window_size": window}
    _check_fwd_bwd(lambda q, k, v: porter_runtime.attention(q, k, v, **kwargs),
                   kwargs, tensors, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("lengths,heads,causal,window",
                         list(itertools.product(LENGTHS, [(4, 4), (4, 2)], [False, True],
                                                [(-1, -1), (2, 1)])))
@pytest.mark.parametrize("slopes_shape", ["h", "bh"])
def test_alibi_matches_reference(lengths, heads, causal, window, slopes_shape, dtype):
    tensors = _inputs(*lengths, *heads, dtype)
    slopes = torch.rand(heads[0]) if slopes_shape == "h" else torch.rand(2, heads[0])
    kwargs = {"causal": causal, "window_size": window, "alibi_slopes": slopes}
    _check_fwd_bwd(lambda q, k, v: porter_runtime.attention(q, k, v, **kwargs),
                   kwargs, tensors, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("lengths,causal,alibi", list(itertools.product(
    LENGTHS, [False, True], [False, True])))
def test_softcap_and_scale_match_reference(lengths, causal, alibi, dtype):
    tensors = _inputs(*lengths, 4, 2, dtype)
    kwargs = {"causal": causal, "softcap": 2.0, "softmax_scale": 0.3,
              "alibi_slopes": torch.rand(4) if alibi else None}
    _check_fwd_bwd(lambda q, k, v: porter_runtime.attention(q, k, v, **kwargs),
                   kwargs, tensors, dtype)


def test_positional_arguments_follow_flash_attn_order():
    q, k, v = _inputs(6, 6, 4, 4, torch.float32)
    out = porter_runtime.attention(q, k, v, 0.0, 0.5, True, (2, 0))
    _close(out, reference(q, k, v, softmax_scale=0.5, causal=True, window_size=(2, 0)),
           torch.float32)


def test_float_mask_is_chunked_by_rows(monkeypatch):
    monkeypatch.setattr(_attn_core, "_MASK_BUDGET", 1)  # one query row per chunk
    tensors = _inputs(9, 12, 4, 2, torch.float32)
    kwargs = {"causal": True, "alibi_slopes": torch.rand(4), "window_size": (4, 0)}
    _check_fwd_bwd(lambda q, k, v: porter_runtime.attention(q, k, v, **kwargs),
                   kwargs, tensors, torch.float32)


def test_rows_without_keys_are_zero_with_finite_grads():
    q, k, v = _inputs(8, 3, 4, 4, torch.float32)
    out = porter_runtime.attention(q, k, v, causal=True)  # rows 0..4 see no key
    assert torch.equal(out[:, :5], torch.zeros_like(out[:, :5]))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_output_is_contiguous_like_flash_attn():
    q, k, v = _inputs(6, 9, 4, 2, torch.float32)
    for causal in (False, True):
        out = porter_runtime.attention(q, k, v, causal=causal)
        assert out.is_contiguous() and out.shape == q.shape
        out.view(2, 6, -1)  # the usual `out.view(B, S, H * D)` after flash_attn


def _varlen_case(dtype: torch.dtype, h: int = 4, hk: int = 2):
    lens_q, lens_k = [3, 5, 1, 4], [3, 8, 6, 2]
    gen = torch.Generator().manual_seed(3)
    make = lambda n, heads: torch.randn(n, heads, 16, generator=gen).to(dtype).requires_grad_()
    cu = lambda lens: torch.tensor([0] + list(itertools.accumulate(lens)), dtype=torch.int32)
    return (make(sum(lens_q), h), make(sum(lens_k), hk), make(sum(lens_k), hk),
            cu(lens_q), cu(lens_k), max(lens_q), max(lens_k))


def _varlen_reference(q, k, v, cu_q, cu_k, **kwargs):
    slopes = kwargs.pop("alibi_slopes", None)
    parts = []
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        s = slopes[b] if slopes is not None and slopes.dim() == 2 else slopes
        parts.append(reference(q[None, qs], k[None, ks], v[None, ks], alibi_slopes=s,
                               **kwargs)[0])
    return torch.cat(parts)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("causal,window,alibi", [
    (False, (-1, -1), False), (True, (-1, -1), False), (True, (2, 0), True),
    (False, (1, 2), False), (False, (-1, -1), True)])
def test_varlen_matches_reference(causal, window, alibi, dtype):
    q, k, v, cu_q, cu_k, mq, mk = _varlen_case(dtype)
    slopes = torch.rand(4, 4) if alibi else None
    kwargs = {"causal": causal, "window_size": window, "alibi_slopes": slopes}
    out = porter_runtime.attention_varlen(q, k, v, cu_q, cu_k, mq, mk, **kwargs)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    expected = _varlen_reference(*leaves, cu_q.tolist(), cu_k.tolist(), **kwargs)
    _close(out, expected.detach(), dtype)
    grad = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v), grad.to(dtype))
    want = torch.autograd.grad(expected, leaves, grad)
    for g, w in zip(got, want):
        _close(g, w, dtype)


def test_packed_forms_match_unpacked():
    q, k, v = _inputs(6, 6, 4, 4, torch.float32)
    expected = reference(q, k, v, causal=True)
    qkv = torch.stack([q, k, v], dim=2)
    _close(porter_runtime.attention_qkvpacked(qkv, causal=True), expected, torch.float32)
    q2, k2, v2 = _inputs(5, 9, 4, 2, torch.float32)
    kv = torch.stack([k2, v2], dim=2)
    _close(porter_runtime.attention_kvpacked(q2, kv, causal=True),
           reference(q2, k2, v2, causal=True), torch.float32)


def test_varlen_packed_forms_match_unpacked():
    q, k, v, cu_q, cu_k, mq, mk = _varlen_case(torch.float32, h=4, hk=4)
    kv = torch.stack([k, v], dim=1)
    got = porter_runtime.attention_varlen_kvpacked(q, kv, cu_q, cu_k, mq, mk, causal=True)
    _close(got, _varlen_reference(q, k, v, cu_q.tolist(), cu_k.tolist(), causal=True),
           torch.float32)
    qkv = torch.stack([k, k, v], dim=1)  # same lengths for q and kv
    got = porter_runtime.attention_varlen_qkvpacked(qkv, cu_k, mk, causal=True)
    _close(got, _varlen_reference(k, k, v, cu_k.tolist(), cu_k.tolist(), causal=True),
           torch.float32)


def test_dropout_runs_on_every_path():
    q, k, v = _inputs(6, 8, 4, 2, torch.float32)
    for kwargs in ({}, {"causal": True}, {"softcap": 3.0}, {"alibi_slopes": torch.rand(4)}):
        out = porter_runtime.attention(q, k, v, dropout_p=0.5, **kwargs)
        assert out.shape == q.shape and torch.isfinite(out).all()


def _lse_reference(q, k, v, causal):
    """softmax(q·kᵀ/√d) v and its log-sum-exp, (B,S,H,D) in, lse (B,H,Sq), written out here."""
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * q.shape[-1] ** -0.5
    if causal:  # bottom-right aligned, as flash-attn's
        sq, sk = s.shape[-2:]
        s = s.masked_fill(torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq).logical_not(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    # a row that sees no key: flash-attn writes +inf (its output there is 0)
    lse = torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1).nan_to_num(0.0), v), lse


@pytest.mark.parametrize("causal", [False, True])
def test_return_attn_probs_off_cuda_gives_the_lse_and_its_gradient(causal):
    """ring-flash-attention's tests take the reference's LSE (``return_attn_probs=True``) and
    backpropagate through it (blind round 11)."""
    q, k, v = _inputs(5, 7, 3, 3, torch.float32)
    out, lse, dropout_mask = porter_runtime.attention(q, k, v, causal=causal, return_attn_probs=True)
    ref_out, ref_lse = _lse_reference(q, k, v, causal)
    assert dropout_mask is None and lse.dtype == torch.float32 and lse.shape == ref_lse.shape
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, ref_lse, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad((out * out).sum() + lse.sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref_out * ref_out).sum() + ref_lse.sum(), (q, k, v))
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    packed = porter_runtime.attention_qkvpacked(torch.stack((q, q, q), 2), causal=causal, return_attn_probs=True)
    torch.testing.assert_close(packed[1], _lse_reference(q, q, q, causal)[1], atol=1e-5, rtol=1e-5)


def test_return_attn_probs_varlen_off_cuda_gives_each_sequence_s_lse():
    q, k, v, cu_q, cu_k, mq, mk = _varlen_case(torch.float32, h=2, hk=2)
    out, lse, _ = porter_runtime.attention_varlen(q, k, v, cu_q, cu_k, mq, mk, causal=True, return_attn_probs=True)
    assert lse.shape == (q.shape[1], q.shape[0])  # (H, total_q), as flash-attn 2's varlen
    torch.testing.assert_close(out, porter_runtime.attention_varlen(q, k, v, cu_q, cu_k, mq, mk, causal=True),
                               atol=1e-5, rtol=1e-5)
    for b in range(len(cu_q) - 1):
        rq, rk = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        _, ref_lse = _lse_reference(q[None, rq], k[None, rk], v[None, rk], True)
        torch.testing.assert_close(lse[:, rq], ref_lse[0], atol=1e-5, rtol=1e-5)


def test_block_table_off_cuda_is_a_clear_error():
    q, k, v, cu_q, cu_k, mq, mk = _varlen_case(torch.float32)
    with pytest.raises(NotImplementedError, match="block_table"):
        porter_runtime.attention_varlen(q, k, v, cu_q, cu_k, mq, mk,
                                        block_table=torch.zeros(1, 1, dtype=torch.int32))


# --- which SDPA call is made ---------------------------------------------------------

@pytest.fixture
def sdpa_calls(monkeypatch):
    calls: list[dict[str, Any]] = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        calls.append({"mask": attn_mask, "is_causal": is_causal, "k_heads": k.shape[1], **kw})
        assert not (attn_mask is not None and is_causal), "never both a mask and is_causal"
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("sq,sk,causal,window,fused,is_causal", [
    (8, 8, False, (-1, -1), True, False),
    (8, 8, True, (-1, -1), True, True),
    (1, 9, True, (-1, -1), True, False),     # decoding step: every key visible
    (8, 8, False, (-1, 0), True, True),      # right window 0 == causal
    (4, 9, True, (-1, -1), False, False),    # bottom-right causal needs a mask
    (9, 4, True, (-1, -1), False, False),
    (8, 8, False, (2, 2), False, False),
    (8, 8, False, (20, 20), True, False),    # window wider than the sequence
])
def test_fused_path_whenever_arguments_allow(sdpa_calls, sq, sk, causal, window, fused,
                                             is_causal):
    q, k, v = _inputs(sq, sk, 4, 4, torch.float32)
    porter_runtime.attention(q, k, v, causal=causal, window_size=window)
    assert len(sdpa_calls) == 1
    assert (sdpa_calls[0]["mask"] is None) == fused
    assert sdpa_calls[0]["is_causal"] == is_causal


def test_gqa_uses_enable_gqa_without_copies_on_cpu(sdpa_calls):
    q, k, v = _inputs(8, 8, 8, 2, torch.float32)
    porter_runtime.attention(q, k, v, causal=True)
    assert sdpa_calls[0]["enable_gqa"] is True and sdpa_calls[0]["k_heads"] == 2


def test_gqa_is_repeated_where_the_backend_needs_it(monkeypatch):
    monkeypatch.setattr(porter_runtime._compat, "at_least", lambda a, b: (2, 6) >= (a, b))
    assert _attn_core._gqa_by_repeat(torch.device("mps"))      # MPS GQA aborts before 2.7
    assert not _attn_core._gqa_by_repeat(torch.device("cpu"))
    monkeypatch.setattr(porter_runtime._compat, "at_least", lambda a, b: (2, 7) >= (a, b))
    assert not _attn_core._gqa_by_repeat(torch.device("mps"))


def test_bad_shapes_are_reported():
    q, k, v = _inputs(4, 4, 3, 2, torch.float32)
    with pytest.raises(ValueError, match="multiple"):
        porter_runtime.attention(q, k, v)


# --- flash_attn on CUDA --------------------------------------------------------------

FLASH_NAMES = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func",
               "flash_attn_varlen_func", "flash_attn_varlen_qkvpacked_func",
               "flash_attn_varlen_kvpacked_func"]


@pytest.fixture
def fake_flash(monkeypatch):
    module = types.ModuleType("flash_attn")
    calls: list[tuple[str, tuple, dict]] = []
    for name in FLASH_NAMES:
        def fn(*args, _name=name, **kwargs):
            calls.append((_name, args, kwargs))
            return "flash-result"
        setattr(module, name, fn)
    monkeypatch.setitem(sys.modules, "flash_attn", module)
    return calls


def _flash_call_cases(dtype):
    q, k, v = (torch.randn(1, 4, 2, 8, dtype=dtype) for _ in range(3))
    cu = torch.tensor([0, 4], dtype=torch.int32)
    slopes = torch.rand(2)
    opts = {"dropout_p": 0.1, "softmax_scale": 0.5, "causal": True, "window_size": (3, 0),
            "softcap": 1.5, "alibi_slopes": slopes, "deterministic": True}
    return [
        ("flash_attn_func", porter_runtime.attention, (q, k, v)),
        ("flash_attn_qkvpacked_func", porter_runtime.attention_qkvpacked,
         (torch.stack([q, k, v], 2),)),
        ("flash_attn_kvpacked_func", porter_runtime.attention_kvpacked,
         (q, torch.stack([k, v], 2))),
        ("flash_attn_varlen_func", porter_runtime.attention_varlen,
         (q[0], k[0], v[0], cu, cu, 4, 4)),
        ("flash_attn_varlen_qkvpacked_func", porter_runtime.attention_varlen_qkvpacked,
         (torch.stack([q[0], k[0], v[0]], 1), cu, 4)),
        ("flash_attn_varlen_kvpacked_func", porter_runtime.attention_varlen_kvpacked,
         (q[0], torch.stack([k[0], v[0]], 1), cu, cu, 4, 4)),
    ], opts


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_calls_flash_attn_with_the_same_arguments(simulate, fake_flash, dtype):
    simulate("cuda")
    cases, opts = _flash_call_cases(dtype)
    for name, fn, args in cases:
        assert fn(*args, **opts) == "flash-result"
        called, got_args, got_kwargs = fake_flash[-1]
        assert called == name
        assert len(got_args) == len(args) and all(a is b for a, b in zip(got_args, args))
        assert got_kwargs == opts
    assert porter_runtime.attention(*cases[0][2]) == "flash-result"
    assert fake_flash[-1][2] == {}  # defaults are left to flash_attn


def test_cuda_forwards_return_attn_probs_and_block_table(simulate, fake_flash):
    simulate("cuda")
    q = torch.randn(4, 2, 8, dtype=torch.float16)
    cu, table = torch.tensor([0, 4], dtype=torch.int32), torch.zeros(1, 1, dtype=torch.int32)
    porter_runtime.attention_varlen(q, q, q, cu, cu, 4, 4, return_attn_probs=True,
                                    block_table=table)
    assert fake_flash[-1][2] == {"return_attn_probs": True, "block_table": table}


@pytest.mark.parametrize("machine,dtype", [("cuda", torch.float32), ("mps", torch.float16),
                                           ("cpu", torch.bfloat16)])
def test_flash_attn_is_not_used_where_it_cannot_run(simulate, fake_flash, machine, dtype):
    simulate(machine)
    q, k, v = (torch.randn(1, 4, 2, 8).to(dtype) for _ in range(3))
    out = porter_runtime.attention(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and not fake_flash


def test_cuda_without_flash_attn_uses_sdpa(simulate, monkeypatch):
    simulate("cuda")
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import raises ImportError
    q, k, v = (torch.randn(1, 4, 2, 8, dtype=torch.bfloat16) for _ in range(3))
    _close(porter_runtime.attention(q, k, v, causal=True), reference(q, k, v, causal=True),
           torch.bfloat16)


# --- sdpa_kernel ---------------------------------------------------------------------

def test_sdpa_kernel_on_cuda_forwards_both_forms(simulate, monkeypatch):
    machine = simulate("cuda")
    old = machine.record(torch.backends.cuda, "sdp_kernel", "old-cm")
    import torch.nn.attention as attn
    new = machine.record(attn, "sdpa_kernel", "new-cm")
    assert porter_runtime.sdpa_kernel(enable_flash=False, enable_math=True) == "old-cm"
    assert old.calls == [((), {"enable_flash": False, "enable_math": True})]
    backends = [attn.SDPBackend.MATH]
    assert porter_runtime.sdpa_kernel(backends, set_priority=True) == "new-cm"
    assert new.calls == [((backends,), {"set_priority": True})]


@pytest.mark.filterwarnings("ignore:porter_runtime")
@pytest.mark.parametrize("machine", ["mps", "cpu"])
def test_sdpa_kernel_never_leaves_attention_without_a_kernel_elsewhere(simulate, machine):
    simulate(machine)
    from torch.nn.attention import SDPBackend

    with porter_runtime.sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        q, k, v = _inputs(4, 4, 2, 2, torch.float32)
        porter_runtime.attention(q, k, v, dropout_p=0.5)  # flash alone has no dropout on CPU
    with porter_runtime.sdpa_kernel(enable_flash=False, enable_math=False):
        porter_runtime.attention(q, k, v)  # efficient / cuDNN only: nothing here restricts

    @porter_runtime.sdpa_kernel(enable_math=False)
    def decorated() -> int:
        return 3

    assert decorated() == 3
