"""porter_runtime.flex_attention_call: FlexAttention as the code called it on CUDA and
wherever no gradient is needed; elsewhere, in training, torch's differentiable reference
of the same attention (score_mod, block mask, scale, grouped-query heads)."""

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

import porter_runtime

from conftest import Recorder

L, D = 32, 8


class ReportedAsCuda(torch.Tensor):
    """A CPU tensor whose ``.device`` says CUDA, as a CUDA machine's tensor would."""

    @property
    def device(self):  # type: ignore[override]
        return torch.device("cuda", 0)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def relative_bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.05


def dense(q, k, v, bias=True, causal_mask=True):
    """Attention written out: the gradients flex_attention should have."""
    k, v = (t.repeat_interleave(q.size(1) // t.size(1), dim=1) for t in (k, v))
    scores = q @ k.transpose(-1, -2) / D ** 0.5
    i = torch.arange(q.size(-2))
    if bias:
        scores = scores + (i[:, None] - i[None, :]) * 0.05
    if causal_mask:
        scores = scores.masked_fill(i[:, None] < i[None, :], float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_training_off_cuda_has_the_gradients_of_the_same_attention(kv_heads):
    torch.manual_seed(0)
    q = torch.randn(2, 4, L, D, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, L, D, requires_grad=True) for _ in range(2))
    mask = create_block_mask(causal, None, None, L, L, device="cpu")
    with pytest.raises(NotImplementedError, match="backward"):
        flex_attention(q, k, v, score_mod=relative_bias, block_mask=mask, enable_gqa=True).sum().backward()
    out = porter_runtime.flex_attention_call(flex_attention, q, k, v, relative_bias, mask, enable_gqa=True)
    inference = flex_attention(q.detach(), k.detach(), v.detach(), score_mod=relative_bias, block_mask=mask,
                               enable_gqa=True)
    assert torch.equal(out.detach(), inference)  # torch's own forward, bit for bit
    out.square().sum().backward()
    grads = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    dense(q, k, v).square().sum().backward()
    for got, want in zip(grads, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_defaults_no_mask_no_score_mod_and_a_scale():
    torch.manual_seed(1)
    q, k, v = (torch.randn(1, 2, L, D, requires_grad=True) for _ in range(3))
    out = porter_runtime.flex_attention_call(flex_attention, q, k, v, scale=0.5)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.5)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
    out.sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_the_codes_own_function_is_called_unchanged_where_no_gradient_is_needed_and_on_cuda():
    q, k, v = (torch.randn(1, 2, L, D) for _ in range(3))
    compiled = Recorder("compiled flex_attention", "its result")
    mask = object()
    assert porter_runtime.flex_attention_call(compiled, q, k, v, relative_bias, block_mask=mask) == "its result"
    assert compiled.calls == [((q, k, v, relative_bias), {"block_mask": mask})]
    on_cuda = [t.as_subclass(ReportedAsCuda).requires_grad_() for t in (q, k, v)]
    assert porter_runtime.flex_attention_call(compiled, *on_cuda, block_mask=mask, return_lse=False) == "its result"
    assert compiled.calls[-1] == (tuple(on_cuda), {"block_mask": mask, "return_lse": False})


def test_a_request_for_the_log_sum_exp_goes_to_torch_which_says_what_it_cannot_do():
    q, k, v = (torch.randn(1, 2, L, D, requires_grad=True) for _ in range(3))
    asked = Recorder("flex_attention", "torch's answer")
    assert porter_runtime.flex_attention_call(asked, q, k, v, return_lse=True) == "torch's answer"
    assert asked.calls == [((q, k, v), {"return_lse": True})]
