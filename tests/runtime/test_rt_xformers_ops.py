"""porter_runtime.xformers_ops and twins_stand_in: xformers' tensor helpers are
xformers' own on CUDA (arguments forwarded) and its documented PyTorch equivalents
elsewhere (xformers 0.0.35, ops/indexing.py and ops/unbind.py); an availability flag set to twins_stand_in keeps its
original False on CUDA."""

import sys
import types

import pytest
import torch

import porter_runtime
from porter_runtime import xformers_ops

from conftest import Recorder


@pytest.fixture
def fake_xformers(monkeypatch):
    made = {name: Recorder(name, f"xformers-{name}") for name in ("unbind", "scaled_index_add", "index_select_cat")}
    package, ops = types.ModuleType("xformers"), types.ModuleType("xformers.ops")
    for name, recorder in made.items():
        setattr(ops, name, recorder)
    package.ops = ops
    monkeypatch.setitem(sys.modules, "xformers", package)
    monkeypatch.setitem(sys.modules, "xformers.ops", ops)
    return made


def test_on_cuda_each_helper_is_xformers_own_with_the_callers_arguments(simulate, fake_xformers):
    simulate("cuda")
    x, idx, src = torch.zeros(4, 3), torch.tensor([0, 2]), torch.ones(2, 3)
    assert xformers_ops.unbind(x, 1) == "xformers-unbind"
    assert xformers_ops.scaled_index_add(x, idx, src, None, 0.5) == "xformers-scaled_index_add"
    assert xformers_ops.index_select_cat([x], [idx]) == "xformers-index_select_cat"

    def same(call, args):  # the very objects, in order, and no keywords
        return call[1] == {} and len(call[0]) == len(args) and all(a is b for a, b in zip(call[0], args))

    assert [same(c, (x, 1)) for c in fake_xformers["unbind"].calls] == [True]
    assert [same(c, (x, idx, src, None, 0.5)) for c in fake_xformers["scaled_index_add"].calls] == [True]
    [(args, kwargs)] = fake_xformers["index_select_cat"].calls
    assert kwargs == {} and args[0][0] is x and args[1][0] is idx
    assert porter_runtime.twins_stand_in("xformers") is False  # the original's flag stays False


@pytest.mark.parametrize("kind", ["cpu", "mps"])
def test_off_cuda_the_library_is_never_imported_and_the_flag_says_the_twins_run(simulate, fake_xformers, kind):
    simulate(kind)
    x = torch.randn(2, 5, 3, 4)
    assert [t.shape for t in xformers_ops.unbind(x, 2)] == [torch.Size([2, 5, 4])] * 3
    assert not any(r.calls for r in fake_xformers.values())
    assert porter_runtime.twins_stand_in("xformers") is True


def test_unbind_is_torch_unbind(simulate):
    simulate("cpu")
    qkv = torch.randn(2, 7, 3, 4, 8, requires_grad=True)
    q, k, v = xformers_ops.unbind(qkv, 2)
    for got, want in zip((q, k, v), torch.unbind(qkv, 2)):
        torch.testing.assert_close(got, want)
    (q.sum() + 2 * v.sum()).backward()
    assert torch.equal(qkv.grad[:, :, 0], torch.ones(2, 7, 4, 8)) and torch.equal(qkv.grad[:, :, 1], torch.zeros(2, 7, 4, 8))


@pytest.mark.parametrize("with_scaling", [False, True])
def test_scaled_index_add_is_the_documented_index_add(simulate, with_scaling):
    simulate("cpu")
    torch.manual_seed(0)
    x = torch.randn(6, 5, 4)
    source = torch.randn(3, 5, 4)
    index = torch.tensor([4, 0, 2])
    scaling = torch.randn(4) if with_scaling else None
    want = torch.index_add(x, 0, index, source * scaling if with_scaling else source, alpha=0.73)
    target = x.clone()
    got = xformers_ops.scaled_index_add(target, index, source, scaling=scaling, alpha=0.73)
    torch.testing.assert_close(got, want)
    for row in (1, 3, 5):  # rows not in ``index`` are unchanged
        assert torch.equal(got[row], x[row])


def test_scaled_index_add_takes_the_views_a_block_diagonal_split_gives(simulate):
    simulate("cpu")
    base = torch.randn(5, 3, 4, requires_grad=True)
    first, _ = (base * 1.0).split([2, 3])  # several views of one tensor, as BlockDiagonalMask.split makes
    out = xformers_ops.scaled_index_add(first, torch.tensor([1]), torch.ones(1, 3, 4), scaling=torch.ones(4))
    out.sum().backward()
    torch.testing.assert_close(out[1], first[1].detach() + 1)


def test_scaled_index_add_has_gradients_for_source_and_scaling(simulate):
    simulate("cpu")
    x = torch.randn(4, 3, requires_grad=True)
    base = x * 1.0
    source = torch.randn(2, 3, requires_grad=True)
    scaling = torch.randn(3, requires_grad=True)
    xformers_ops.scaled_index_add(base, torch.tensor([1, 3]), source, scaling=scaling, alpha=2.0).sum().backward()
    torch.testing.assert_close(source.grad, 2.0 * scaling.detach().expand(2, 3))
    torch.testing.assert_close(scaling.grad, 2.0 * source.detach().sum(0))
    torch.testing.assert_close(x.grad, torch.ones(4, 3))


def test_index_select_cat_is_the_documented_concatenation(simulate):
    simulate("mps")
    a, b = torch.randn(5, 3), torch.randn(4, 2)
    ia, ib = torch.tensor([4, 1], dtype=torch.int32), torch.tensor([0, 3, 2])
    got = xformers_ops.index_select_cat([a, b], [ia, ib])
    assert got.shape == (2 * 3 + 3 * 2,)
    torch.testing.assert_close(got, torch.cat([a[[4, 1]].flatten(), b[[0, 3, 2]].flatten()]))
