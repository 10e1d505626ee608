"""xformers' sliding-window biases: ``make_local_attention*`` on the stand-ins, with
the geometry of xformers' docstrings (xformers/ops/fmha/attn_bias.py, 0.0.35)."""
from __future__ import annotations

import pytest
import torch

import porter_runtime
from porter_runtime import xformers_bias as xb

from test_rt_thirdparty import _bmhk, _xformers_reference


def _window_mask(m: int, n: int, lo: int, hi: int) -> torch.Tensor:
    """0 where lo <= j - i <= hi (i query, j key), -inf elsewhere."""
    i, j = torch.arange(m)[:, None], torch.arange(n)[None]
    return torch.zeros(m, n).masked_fill((j - i < lo) | (j - i > hi), float("-inf"))


def _blocks(q_lens, k_lens, block_mask) -> torch.Tensor:
    mask = torch.full((sum(q_lens), sum(k_lens)), float("-inf"))
    q0 = k0 = 0
    for a, b in zip(q_lens, k_lens):
        mask[q0:q0 + a, k0:k0 + b] = block_mask(a, b)
        q0, k0 = q0 + a, k0 + b
    return mask


def test_local_attention_docstring_examples():
    bias = xb.LocalAttentionFromBottomRightMask(window_left=1, window_right=2)
    assert bias.materialize((4, 4)).exp().tolist() == [
        [1, 1, 1, 0], [1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1]]
    assert bias.materialize((4, 5)).exp().tolist() == [
        [1, 1, 1, 1, 0], [0, 1, 1, 1, 1], [0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]
    with pytest.raises(ValueError, match="window_left"):
        xb.LocalAttentionFromBottomRightMask(-1, 0)


@pytest.mark.parametrize("q_lens,k_lens", [([3, 5, 4], None), ([3, 2, 4], [5, 6, 4])])
@pytest.mark.parametrize("window", [1, 2, 3])
def test_block_diagonal_local_attention_matches_xformers_geometry(simulate, q_lens, k_lens,
                                                                  window):
    simulate("cpu")
    base = xb.BlockDiagonalMask.from_seqlens(q_lens, k_lens)
    k_lens = k_lens or q_lens
    m, n = sum(q_lens), sum(k_lens)
    q, k, v = _bmhk(1, m, n, seed=window)
    # "The ith query in a block only attends to keys in its block with index greater
    # than i - window_size and less than or equal to i."
    top_left = base.make_local_attention(window)
    assert type(top_left).__name__ == "BlockDiagonalCausalLocalAttentionMask"
    want = _blocks(q_lens, k_lens, lambda a, b: _window_mask(a, b, 1 - window, 0))
    torch.testing.assert_close(top_left.materialize((m, n)), want)
    # "A query with distance j from the last query in its block only attends to keys
    # ... whose distance to the last key in the block is >= j and < window_size + j."
    bottom_right = base.make_local_attention_from_bottomright(window)
    assert type(bottom_right).__name__ == "BlockDiagonalCausalLocalAttentionFromBottomRightMask"
    want_br = _blocks(q_lens, k_lens,
                      lambda a, b: _window_mask(a, b, b - a + 1 - window, b - a))
    torch.testing.assert_close(bottom_right.materialize((m, n)), want_br)
    for bias, mask in ((top_left, want), (bottom_right, want_br)):
        out = porter_runtime.memory_efficient_attention(q, k, v, attn_bias=bias)
        torch.testing.assert_close(out.double(), _xformers_reference(q, k, v, mask),
                                   rtol=1e-5, atol=1e-5)
        assert bias.make_causal is not None and bias.split_queries(q)[0].shape[1] == q_lens[0]


def test_lower_triangular_from_bottom_right_local(simulate):
    simulate("cpu")
    bias = xb.LowerTriangularFromBottomRightMask().make_local_attention(3)
    q, k, v = _bmhk(2, 5, 8, seed=4)
    mask = _window_mask(5, 8, 3 - 3 + 1, 3)  # j - i in [Sk - Sq - 2, Sk - Sq]
    torch.testing.assert_close(bias.materialize((5, 8)), mask)
    out = porter_runtime.memory_efficient_attention(q, k, v, attn_bias=bias)
    torch.testing.assert_close(out.double(), _xformers_reference(q, k, v, mask),
                               rtol=1e-5, atol=1e-5)
    local = xb.LocalAttentionFromBottomRightMask(2, 1)
    out = porter_runtime.memory_efficient_attention(q, k, v, attn_bias=local)
    torch.testing.assert_close(out.double(),
                               _xformers_reference(q, k, v, local.materialize((5, 8))),
                               rtol=1e-5, atol=1e-5)


def test_local_attention_argument_checks_are_xformers():
    base = xb.BlockDiagonalMask.from_seqlens([4, 2])
    with pytest.raises(ValueError, match="window_size > 0"):
        base.make_local_attention(0)
    with pytest.raises(RuntimeError, match="No keys are attended"):
        xb.BlockDiagonalMask.from_seqlens([6], [2]).make_local_attention(3)
    with pytest.raises(ValueError, match="num_keys >= num_queries"):
        xb.BlockDiagonalMask.from_seqlens([6], [2]).make_causal_from_bottomright()


def test_from_tensor_lists_qkv_and_to():
    qs = [torch.randn(2, 3, 1, 4), torch.randn(1, 5, 1, 4)]
    ks = [torch.randn(2, 4, 1, 4), torch.randn(1, 2, 1, 4)]
    bias, q, k, v = xb.BlockDiagonalMask.from_tensor_lists_qkv(qs, ks)
    assert v is None and q.shape == (1, 11, 1, 4) and k.shape == (1, 10, 1, 4)
    assert bias.q_seqinfo.seqstart_py == [0, 3, 6, 11]
    assert bias.k_seqinfo.seqstart_py == [0, 4, 8, 10]
    assert [t.shape[0] for t in bias.split_queries(q)] == [2, 1]
    assert bias.to("cpu") is bias and xb.LowerTriangularMask(device="cpu").to("cpu") is not None


def test_cuda_local_attention_is_xformers_own(simulate, monkeypatch):
    import sys
    import types

    simulate("cuda")
    made = []

    class Real:
        @classmethod
        def from_seqlens(cls, *args, **kwargs):
            made.append((args, kwargs))
            return "real-bias"

    module = types.ModuleType("xformers.ops.fmha.attn_bias")
    module.BlockDiagonalMask = Real
    monkeypatch.setitem(sys.modules, "xformers.ops.fmha.attn_bias", module)
    assert xb.BlockDiagonalMask.from_seqlens([3, 4]) == "real-bias"
    assert made == [(([3, 4], None), {})]
