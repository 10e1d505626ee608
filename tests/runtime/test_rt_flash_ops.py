"""flash_attn's padding helpers, rotary embedding and Triton norm (TP103's twins), checked
against references written here from flash_attn's own definitions (bert_padding.py,
layers/rotary.py's apply_rotary_emb_torch, ops/triton/layer_norm.py's layer_norm_ref)."""

import pytest
import torch
import torch.nn.functional as F

import porter_runtime


def _rotary_reference(x, cos, sin, interleaved=False):
    """flash_attn.layers.rotary.apply_rotary_emb_torch, x (B, S, H, D), in float32."""
    ro = cos.shape[-1] * 2
    if interleaved:
        c, s = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    else:
        c, s = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    c, s = c[: x.shape[1]].unsqueeze(-2).float(), s[: x.shape[1]].unsqueeze(-2).float()
    head = x[..., :ro].float()
    if interleaved:
        rotated = torch.stack((-head[..., 1::2], head[..., ::2]), -1).flatten(-2)
    else:
        a, b = head.chunk(2, -1)
        rotated = torch.cat((-b, a), -1)
    return torch.cat([(head * c + rotated * s).to(x.dtype), x[..., ro:]], -1)


def _tables(seqlen, half, dtype=torch.float32):
    freqs = torch.outer(torch.arange(seqlen, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(half) / half))
    return freqs.cos().to(dtype), freqs.sin().to(dtype)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_is_flash_attns_reference(simulate, interleaved):
    simulate("cpu")
    torch.manual_seed(0)
    x = torch.randn(2, 7, 3, 16)
    cos, sin = _tables(10, 6)  # rotary_dim 12 of 16: the last 4 channels pass through
    out = porter_runtime.apply_rotary_emb(x, cos, sin, interleaved=interleaved)
    torch.testing.assert_close(out, _rotary_reference(x, cos, sin, interleaved))
    assert torch.equal(out[..., 12:], x[..., 12:])


def test_rotary_offsets_varlen_inplace_and_positions_past_the_table(simulate):
    simulate("cpu")
    torch.manual_seed(1)
    cos, sin = _tables(12, 4)
    x = torch.randn(2, 5, 2, 8)
    shifted = porter_runtime.apply_rotary_emb(x, cos, sin, seqlen_offsets=3)
    torch.testing.assert_close(shifted, _rotary_reference(x, cos[3:], sin[3:]))
    per_batch = porter_runtime.apply_rotary_emb(x, cos, sin, seqlen_offsets=torch.tensor([0, 3]))
    torch.testing.assert_close(per_batch[0], _rotary_reference(x[:1], cos, sin)[0])
    torch.testing.assert_close(per_batch[1], _rotary_reference(x[1:], cos[3:], sin[3:])[0])
    # two sequences of 3 and 4 tokens packed: each starts at position 0
    packed = torch.randn(7, 2, 8)
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    out = porter_runtime.apply_rotary_emb(packed, cos, sin, cu_seqlens=cu, max_seqlen=4)
    torch.testing.assert_close(out[:3], _rotary_reference(packed[None, :3], cos, sin)[0])
    torch.testing.assert_close(out[3:], _rotary_reference(packed[None, 3:], cos, sin)[0])
    # the kernel leaves a position past the table as it is (cos 1, sin 0)
    late = porter_runtime.apply_rotary_emb(x, cos, sin, seqlen_offsets=10)
    torch.testing.assert_close(late[:, :2], _rotary_reference(x[:, :2], cos[10:], sin[10:]))
    assert torch.equal(late[:, 2:], x[:, 2:])
    y = x.clone()
    assert porter_runtime.apply_rotary_emb(y, cos, sin, inplace=True) is y
    torch.testing.assert_close(y, _rotary_reference(x, cos, sin))


def test_rotary_keeps_the_dtype_and_computes_in_float32(simulate):
    simulate("cpu")
    x = torch.randn(1, 4, 2, 8).to(torch.bfloat16)
    cos, sin = _tables(4, 4, torch.bfloat16)
    out = porter_runtime.apply_rotary_emb(x, cos, sin)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, _rotary_reference(x, cos, sin))


def test_unpad_and_pad_are_flash_attns_and_round_trip(simulate):
    simulate("cpu")
    torch.manual_seed(2)
    hidden = torch.randn(3, 5, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    x, indices, cu, max_s, used = porter_runtime.unpad_input(hidden, mask)
    assert x.shape == (9, 4) and cu.tolist() == [0, 3, 8, 9] and max_s == 5 and used.tolist() == [3, 5, 1]
    assert cu.dtype == torch.int32
    assert len(porter_runtime.unpad_input(hidden, mask, results=4)) == 4
    back = porter_runtime.pad_input(x, indices, 3, 5)
    torch.testing.assert_close(back, hidden * mask[..., None])
    back.sum().backward()
    torch.testing.assert_close(hidden.grad, mask[..., None].float().expand(3, 5, 4))
    torch.testing.assert_close(porter_runtime.index_first_axis(hidden.reshape(15, 4), indices), x)


@pytest.mark.parametrize("rms", [False, True])
def test_layer_norm_fn_is_the_kernels_arithmetic(simulate, rms):
    simulate("cpu")
    torch.manual_seed(3)
    x, res = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    w, b = torch.randn(8), torch.randn(8)
    s = x + res
    if rms:
        want = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * w
        out, summed = porter_runtime.rms_norm_fn(x, w, None, residual=res, eps=1e-5, prenorm=True)
    else:
        want = F.layer_norm(s, (8,), w, b, eps=1e-5)
        out, summed = porter_runtime.layer_norm_fn(x, w, b, residual=res, eps=1e-5, prenorm=True)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(summed, s)
    half = porter_runtime.layer_norm_fn(x.half(), w.half(), None, residual=res.half(), prenorm=True,
                                        residual_in_fp32=True, is_rms_norm=rms)
    assert half[0].dtype == torch.float16 and half[1].dtype == torch.float16  # a given residual keeps its dtype
    alone = porter_runtime.layer_norm_fn(x.half(), w.half(), None, prenorm=True, residual_in_fp32=True)
    assert alone[1].dtype == torch.float32


def test_what_only_the_kernel_does_is_refused_off_cuda(simulate):
    simulate("mps")
    x = torch.randn(2, 8)
    with pytest.raises(NotImplementedError, match="x1"):
        porter_runtime.layer_norm_fn(x, None, None, x1=x)
    with pytest.raises(NotImplementedError, match="return_dropout_mask"):
        porter_runtime.layer_norm_fn(x, None, None, return_dropout_mask=True)


def test_on_cuda_without_flash_attn_the_twin_runs_and_says_so(simulate):
    simulate("cuda")
    cos, sin = _tables(4, 2)
    x = torch.randn(1, 4, 1, 4)
    with pytest.warns(UserWarning, match="flash_attn.layers.rotary.apply_rotary_emb is not called on CUDA"):
        out = porter_runtime.apply_rotary_emb(x, cos, sin)
    torch.testing.assert_close(out, _rotary_reference(x, cos, sin))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy_loss_is_torchs_cross_entropy_in_float32_with_flash_attns_extras(simulate, smoothing):
    # EasyContext (blind round 17): `CrossEntropyLoss(inplace_backward=True)` over bf16 logits
    simulate("cpu")
    torch.manual_seed(0)
    logits = torch.randn(2, 7, 13, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 13, (2, 7))
    target[0, :3] = -100
    loss = porter_runtime.CrossEntropyLoss(inplace_backward=True, label_smoothing=smoothing)(
        logits.view(-1, 13), target.view(-1))
    want = torch.nn.functional.cross_entropy(logits.float().view(-1, 13), target.view(-1), label_smoothing=smoothing)
    assert loss.dtype == torch.float32 and torch.allclose(loss, want, atol=1e-6)
    loss.backward()
    assert logits.grad is not None and torch.isfinite(logits.grad).all()
    # the z-loss: lse ** 2 scaled, added to the loss and returned beside it; ignored tokens count 0
    per, z = porter_runtime.CrossEntropyLoss(lse_square_scale=1e-2, return_z_loss=True, reduction="none")(
        logits.detach().view(-1, 13), target.view(-1))
    lse = torch.logsumexp(logits.detach().float().view(-1, 13), -1)
    valid = target.view(-1) != -100
    assert torch.allclose(z[valid], 1e-2 * lse[valid] ** 2) and (z[~valid] == 0).all() and (per[~valid] == 0).all()
    plain = torch.nn.functional.cross_entropy(logits.detach().float().view(-1, 13), target.view(-1), reduction="none")
    assert torch.allclose(per[valid] - z[valid], plain[valid], atol=1e-5)
    summed = porter_runtime.CrossEntropyLoss(reduction="sum", logit_scale=0.5)(logits.detach().view(-1, 13),
                                                                                target.view(-1))
    scaled = torch.nn.functional.cross_entropy(0.5 * logits.detach().float().view(-1, 13), target.view(-1),
                                               reduction="sum")
    assert torch.allclose(summed, scaled, atol=1e-4)
    with pytest.raises(NotImplementedError, match="reduction"):
        porter_runtime.CrossEntropyLoss(reduction="batchmean")
