"""porter_runtime's twins of CUDA-only third-party libraries.

Decision tests: with CUDA simulated and small fake xformers / apex / adam_atan2 /
bitsandbytes modules installed, each twin hands the caller's arguments to the library
unchanged; without CUDA it never touches them. Numerical tests: the fallbacks against
references written here from the documented update rules and semantics (apex's
multi_tensor_adam.cu / multi_tensor_lamb.cu, adam-atan2's adam_atan2.cu and the
Adam-atan2 paper, xformers' attn_bias.py: softmax(q·kᵀ·scale + bias)·v).
"""
from __future__ import annotations

import math
import os
import sys
import types
import warnings

import pytest
import torch

import porter_runtime
from porter_runtime import xformers_bias as xb

from conftest import Recorder


# --- fake libraries ---------------------------------------------------------------

class FakeClass:
    """A stand-in library class that records how it was built."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    @classmethod
    def from_seqlens(cls, *args, **kwargs):
        return ("from_seqlens", args, kwargs)


def _install(monkeypatch, dotted: str, **attrs) -> types.ModuleType:
    parts = dotted.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name not in sys.modules or not getattr(sys.modules[name], "_fake", False):
            module = types.ModuleType(name)
            module._fake = True
            monkeypatch.setitem(sys.modules, name, module)
            if i > 1:
                setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], module)
    module = sys.modules[dotted]
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def _fake_class(name: str) -> type:
    return type(name, (FakeClass,), {})


@pytest.fixture
def fakes(monkeypatch):
    """Fake xformers, apex, adam_atan2 (with its CUDA backend) and bitsandbytes."""
    made = {
        "mea": Recorder("memory_efficient_attention", "xformers-result"),
        "FusedAdam": _fake_class("FusedAdam"), "FusedLAMB": _fake_class("FusedLAMB"),
        "FusedLayerNorm": _fake_class("FusedLayerNorm"), "FusedRMSNorm": _fake_class("FusedRMSNorm"),
        "AdamATan2": _fake_class("AdamATan2"), "AdamW8bit": _fake_class("AdamW8bit"),
        "LowerTriangularMask": _fake_class("LowerTriangularMask"),
        "BlockDiagonalMask": _fake_class("BlockDiagonalMask"),
    }
    _install(monkeypatch, "xformers.ops", memory_efficient_attention=made["mea"])
    _install(monkeypatch, "xformers.ops.fmha.attn_bias", LowerTriangularMask=made["LowerTriangularMask"],
             BlockDiagonalMask=made["BlockDiagonalMask"])
    _install(monkeypatch, "apex.optimizers", FusedAdam=made["FusedAdam"], FusedLAMB=made["FusedLAMB"])
    _install(monkeypatch, "apex.normalization", FusedLayerNorm=made["FusedLayerNorm"],
             FusedRMSNorm=made["FusedRMSNorm"])
    _install(monkeypatch, "adam_atan2_backend")
    _install(monkeypatch, "adam_atan2", AdamATan2=made["AdamATan2"])
    _install(monkeypatch, "bitsandbytes.optim", AdamW8bit=made["AdamW8bit"])
    return made


def _params():
    return [torch.nn.Parameter(torch.randn(3, 4))]


# --- decisions: CUDA forwards to the library, with the caller's arguments ------------

def test_cuda_memory_efficient_attention_calls_xformers(simulate, fakes):
    simulate("cuda")
    q, k, v, bias = (torch.randn(1, 4, 2, 8) for _ in range(4))
    assert porter_runtime.memory_efficient_attention(q, k, v, attn_bias=bias, p=0.1) == "xformers-result"
    assert porter_runtime.memory_efficient_attention(q, k, v, None, 0.0, 0.5, op="OP") == "xformers-result"
    (args1, kw1), (args2, kw2) = fakes["mea"].calls
    assert args1 == (q, k, v) and kw1 == {"attn_bias": bias, "p": 0.1}
    assert args2 == (q, k, v) and kw2 == {"scale": 0.5, "op": "OP"}


@pytest.mark.parametrize("twin,name,args,kwargs", [
    (porter_runtime.FusedAdam, "FusedAdam", ("P", 1e-3), {"weight_decay": 0.1, "adam_w_mode": False}),
    (porter_runtime.FusedLAMB, "FusedLAMB", ("P",), {"lr": 2e-3, "max_grad_norm": 0.5}),
    (porter_runtime.FusedLayerNorm, "FusedLayerNorm", (512,), {"eps": 1e-6}),
    (porter_runtime.FusedRMSNorm, "FusedRMSNorm", ([64, 8],), {"elementwise_affine": False}),
    (porter_runtime.AdamATan2, "AdamATan2", ("P",), {"lr": 1e-4, "betas": (0.9, 0.95)}),
    (porter_runtime.bnb_optim.AdamW8bit, "AdamW8bit", ("P", 2e-4), {"percentile_clipping": 5}),
    (xb.LowerTriangularMask, "LowerTriangularMask", (), {}),
])
def test_cuda_builds_the_library_object_from_the_same_arguments(simulate, fakes, twin, name, args, kwargs):
    simulate("cuda")
    made = twin(*args, **kwargs)
    assert type(made) is fakes[name]
    assert made.args == args and made.kwargs == kwargs


def test_cuda_bias_classmethods_forward(simulate, fakes):
    simulate("cuda")
    assert xb.BlockDiagonalMask.from_seqlens([2, 3], [4, 5]) == ("from_seqlens", ([2, 3], [4, 5]), {})


@pytest.mark.parametrize("kind", ["cpu", "mps"])
def test_off_cuda_the_libraries_are_never_used(simulate, fakes, kind):
    simulate(kind)
    assert isinstance(porter_runtime.FusedAdam(_params()), porter_runtime.FusedAdam)
    assert isinstance(porter_runtime.FusedLAMB(_params()), porter_runtime.FusedLAMB)
    assert isinstance(porter_runtime.FusedLayerNorm(4), porter_runtime.FusedLayerNorm)
    assert isinstance(porter_runtime.FusedRMSNorm(4), porter_runtime.FusedRMSNorm)
    # the package's kernel needs CUDA tensors: its class is not used off CUDA
    assert isinstance(porter_runtime.AdamATan2(_params()), porter_runtime.AdamATan2)
    assert isinstance(xb.LowerTriangularMask(), xb.LowerTriangularMask)
    q = torch.randn(1, 3, 1, 4)
    porter_runtime.memory_efficient_attention(q, q, q)
    assert fakes["mea"].calls == []
    with pytest.warns(UserWarning, match="AdamW8bit needs bitsandbytes on CUDA"):
        opt = porter_runtime.bnb_optim.AdamW8bit(_params(), 2e-4)
    assert type(opt) is torch.optim.AdamW


def test_missing_libraries_on_cuda_fall_back(simulate, monkeypatch):
    simulate("cuda")
    for name in ("apex", "apex.optimizers", "xformers", "xformers.ops", "adam_atan2"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    assert isinstance(porter_runtime.FusedAdam(_params()), porter_runtime.FusedAdam)
    assert isinstance(porter_runtime.AdamATan2(_params()), porter_runtime.AdamATan2)


def test_a_vendored_pure_adam_atan2_module_is_used_everywhere(simulate, monkeypatch):
    simulate("cpu")
    vendored = _fake_class("AdamATan2")
    _install(monkeypatch, "adam_atan2", AdamATan2=vendored)
    monkeypatch.delitem(sys.modules, "adam_atan2_backend", raising=False)
    assert type(porter_runtime.AdamATan2("P", lr=1.0)) is vendored


def test_subclasses_keep_their_own_class(simulate, fakes):
    simulate("cuda")

    class MyAdam(porter_runtime.FusedAdam):
        pass

    assert type(MyAdam(_params())) is MyAdam


def test_bnb_fallback_maps_arguments_and_warns_once(simulate):
    simulate("cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = porter_runtime.bnb_optim.PagedAdam8bit(_params(), 1e-3, (0.8, 0.9), 1e-6, 0.01, False, 8,
                                                     min_8bit_size=16)
        porter_runtime.bnb_optim.PagedAdam8bit(_params())
    assert type(opt) is torch.optim.Adam
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (1e-3, (0.8, 0.9), 1e-6, 0.01)
    texts = [str(w.message) for w in caught if "bitsandbytes" in str(w.message)]
    assert len(texts) == 1 and "positional 8" in texts[0] and "min_8bit_size" in texts[0]
    with pytest.warns(UserWarning, match="using torch.optim.SGD with 32-bit state"):
        sgd = porter_runtime.bnb_optim.SGD8bit(_params(), lr=0.1, momentum=0.9)
    assert type(sgd) is torch.optim.SGD and sgd.param_groups[0]["momentum"] == 0.9


# --- numerics: references written from the documented update rules -----------------

def _problem(seed: int, dtype=torch.float32, shapes=((5, 7), (11,))):
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen).to(dtype)) for s in shapes]
    grads = [[torch.randn(s, generator=gen).to(dtype) for s in shapes] for _ in range(6)]
    return params, grads


def _run(opt, params, grads):
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()


def _adam_reference(w, grads, lr, betas, eps, wd, adam_w, bias_correction):
    """Adam / AdamW from Kingma & Ba and apex's docstring, in float64."""
    w = w.double().clone()
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for t, g in enumerate(grads, 1):
        g = g.double()
        if not adam_w:
            g = g + wd * w
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        bc1, bc2 = (1 - betas[0] ** t, 1 - betas[1] ** t) if bias_correction else (1, 1)
        update = (m / bc1) / ((v / bc2).sqrt() + eps)
        if adam_w:
            update = update + wd * w
        w = w - lr * update
    return w


@pytest.mark.parametrize("adam_w_mode", [True, False])
@pytest.mark.parametrize("bias_correction", [True, False])
def test_fused_adam_fallback_matches_adam(simulate, adam_w_mode, bias_correction):
    simulate("cpu")
    params, grads = _problem(1)
    start = [p.detach().clone() for p in params]
    opt = porter_runtime.FusedAdam(params, lr=1e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1,
                                   adam_w_mode=adam_w_mode, bias_correction=bias_correction)
    _run(opt, params, grads)
    for i, p in enumerate(params):
        want = _adam_reference(start[i], [g[i] for g in grads], 1e-2, (0.8, 0.95), 1e-6, 0.1,
                               adam_w_mode, bias_correction)
        torch.testing.assert_close(p.detach().double(), want, rtol=1e-5, atol=1e-6)
    assert opt.param_groups[0]["step"] == len(grads)
    assert opt.state[params[0]]["exp_avg"].dtype == torch.float32


def test_fused_adam_defaults_are_torch_adamw_step_for_step(simulate):
    simulate("cpu")
    params, grads = _problem(2)
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    ours = porter_runtime.FusedAdam(params, lr=1e-3, weight_decay=0.05)
    torch_adamw = torch.optim.AdamW(twins, lr=1e-3, weight_decay=0.05)  # eps 1e-8, betas alike
    for step_grads in grads:
        for p, t, g in zip(params, twins, step_grads):
            p.grad, t.grad = g.clone(), g.clone()
        ours.step()
        torch_adamw.step()
        for p, t in zip(params, twins):
            torch.testing.assert_close(p, t, rtol=1e-5, atol=1e-7)


def test_fused_adam_half_params_keep_fp32_state(simulate):
    simulate("cpu")
    params, grads = _problem(3, torch.bfloat16)
    opt = porter_runtime.FusedAdam(params, lr=1e-2)
    _run(opt, params, grads)
    assert params[0].dtype == torch.bfloat16
    assert opt.state[params[0]]["exp_avg_sq"].dtype == torch.float32
    with pytest.raises(RuntimeError, match="AMSGrad"):
        porter_runtime.FusedAdam(params, amsgrad=True)


def _lamb_reference(ws, grads, lr, betas, eps, wd, max_norm, adam_w=True, nvlamb=False):
    """LAMB (You et al. 2019) as apex documents it: global-norm clipping, Adam moments,
    per-tensor trust ratio |w| / |update| (only for weight-decayed tensors unless nvlamb)."""
    ws = [w.double().clone() for w in ws]
    ms = [torch.zeros_like(w) for w in ws]
    vs = [torch.zeros_like(w) for w in ws]
    for t, step in enumerate(grads, 1):
        norm = math.sqrt(sum(float(g.double().norm()) ** 2 for g in step))
        clip = norm / max_norm if norm > max_norm else 1.0
        for i, g in enumerate(step):
            g = g.double() / clip
            if not adam_w:
                g = g + wd * ws[i]
            ms[i] = betas[0] * ms[i] + (1 - betas[0]) * g
            vs[i] = betas[1] * vs[i] + (1 - betas[1]) * g * g
            update = (ms[i] / (1 - betas[0] ** t)) / ((vs[i] / (1 - betas[1] ** t)).sqrt() + eps)
            if adam_w:
                update = update + wd * ws[i]
            ratio = lr
            if nvlamb or wd != 0:
                pn, un = float(ws[i].norm()), float(update.norm())
                ratio = lr * pn / un if pn and un else lr
            ws[i] = ws[i] - ratio * update
    return ws


@pytest.mark.parametrize("wd,adam_w,nvlamb,max_norm", [(0.01, True, False, 1.0), (0.0, True, False, 1.0),
                                                        (0.0, True, True, 100.0), (0.1, False, False, 0.5)])
def test_fused_lamb_fallback_matches_lamb(simulate, wd, adam_w, nvlamb, max_norm):
    simulate("cpu")
    params, grads = _problem(4)
    start = [p.detach().clone() for p in params]
    opt = porter_runtime.FusedLAMB(params, lr=1e-2, weight_decay=wd, adam_w_mode=adam_w,
                                   use_nvlamb=nvlamb, max_grad_norm=max_norm)
    _run(opt, params, grads)
    want = _lamb_reference(start, grads, 1e-2, (0.9, 0.999), 1e-6, wd, max_norm, adam_w, nvlamb)
    for p, w in zip(params, want):
        torch.testing.assert_close(p.detach().double(), w, rtol=1e-5, atol=1e-6)


def _atan2_reference(w, grads, lr, betas, wd):
    """Adam-atan2 (Everett et al. 2024, a = b = 1) with decoupled weight decay, float64:
    p ← p(1 − lr·wd) − lr·atan2(m̂, √v̂)."""
    w = w.double().clone()
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for t, g in enumerate(grads, 1):
        g = g.double()
        w = w * (1 - lr * wd)
        m = betas[0] * m + (1 - betas[0]) * g
        v = betas[1] * v + (1 - betas[1]) * g * g
        w = w - lr * torch.atan2(m / (1 - betas[0] ** t), (v / (1 - betas[1] ** t)).sqrt())
    return w


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-6), (torch.bfloat16, 2e-2)])
def test_adam_atan2_fallback_matches_the_update_rule(simulate, dtype, tol):
    simulate("cpu")
    params, grads = _problem(5, dtype)
    start = [p.detach().clone() for p in params]
    opt = porter_runtime.AdamATan2(params, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)
    if dtype is torch.bfloat16:  # state in bf16 too: compare one step, where rounding is small
        grads = grads[:1]
    _run(opt, params, grads)
    for i, p in enumerate(params):
        want = _atan2_reference(start[i], [g[i] for g in grads], 1e-2, (0.9, 0.95), 0.1)
        torch.testing.assert_close(p.detach().double(), want, rtol=tol, atol=tol)
    state = opt.state[params[0]]
    assert state["step"].dtype == torch.float32 and float(state["step"]) == len(grads)
    assert state["exp_avg"].dtype == dtype


def test_adam_atan2_defaults_are_the_packages():
    opt = porter_runtime.AdamATan2(_params())
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (1e-3, (0.9, 0.999), 1e-2)
    with pytest.raises(ValueError, match="Invalid beta"):
        porter_runtime.AdamATan2(_params(), betas=(1.0, 0.9))


def test_fused_layer_norm_is_layer_norm():
    x = torch.randn(4, 6, 10)
    ours = porter_runtime.FusedLayerNorm(10, eps=1e-6)
    ref = torch.nn.LayerNorm(10, eps=1e-6)
    with torch.no_grad():
        ours.weight.uniform_(0.5, 1.5)
        ours.bias.uniform_(-0.5, 0.5)
    ref.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), ref(x))
    assert porter_runtime.FusedLayerNorm([6, 10], elementwise_affine=False)(x).shape == x.shape
    assert set(ours.state_dict()) == {"weight", "bias"}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rms_norm_is_rms_norm(dtype):
    x = torch.randn(4, 6, 10).to(dtype)
    norm = porter_runtime.FusedRMSNorm(10).to(dtype)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    xd = x.double()
    want = xd / (xd.pow(2).mean(-1, keepdim=True) + 1e-5).sqrt() * norm.weight.double()
    out = norm(x)
    assert out.dtype == dtype
    tol = 1e-5 if dtype is torch.float32 else 2e-2
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    assert set(norm.state_dict()) == {"weight"}


# --- xformers semantics ------------------------------------------------------------

def _xformers_reference(q, k, v, bias=None, scale=None):
    """softmax(q·kᵀ·scale + bias)·v in float64, BMHK; ``bias`` an additive (M, N) or
    (B, H, M, N) tensor. Rows with no visible key give 0."""
    q, k, v = q.double(), k.double(), v.double()
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    scores = torch.einsum("bmhk,bnhk->bhmn", q, k) * scale
    if bias is not None:
        scores = scores + bias.double()
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    return torch.einsum("bhmn,bnhk->bmhk", probs, v)


def _bmhk(b, m, n, h=2, k=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(b, m, h, k, generator=gen), torch.randn(b, n, h, k, generator=gen),
            torch.randn(b, n, h, k, generator=gen))


def _causal(m, n, offset):
    i, j = torch.arange(m)[:, None], torch.arange(n)[None]
    return torch.zeros(m, n).masked_fill(j > i + offset, float("-inf"))


@pytest.mark.parametrize("m,n", [(5, 5), (4, 7), (7, 4)])
def test_xformers_masks_match_reference(simulate, m, n):
    simulate("cpu")
    q, k, v = _bmhk(2, m, n, seed=m * 10 + n)
    mea = porter_runtime.memory_efficient_attention
    cases = [
        (None, None), (xb.LowerTriangularMask(), _causal(m, n, 0)),
        (xb.LowerTriangularFromBottomRightMask(), _causal(m, n, n - m)),
    ]
    for bias, mask in cases:
        if mask is not None and bool(torch.isinf(mask).all(-1).any()):
            continue  # a row with no key: undefined in xformers' reference
        torch.testing.assert_close(mea(q, k, v, attn_bias=bias).double(),
                                   _xformers_reference(q, k, v, mask), rtol=1e-5, atol=1e-5)
    tensor_bias = torch.randn(2, 2, m, n)
    torch.testing.assert_close(mea(q, k, v, tensor_bias, 0.0, 0.3).double(),
                               _xformers_reference(q, k, v, tensor_bias, 0.3), rtol=1e-5, atol=1e-5)
    with_bias = xb.LowerTriangularMask().add_bias(tensor_bias)
    if m <= n:
        torch.testing.assert_close(mea(q, k, v, with_bias).double(),
                                   _xformers_reference(q, k, v, _causal(m, n, 0) + tensor_bias),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["plain", "causal", "bottomright"])
@pytest.mark.parametrize("kv_seqlens", [None, [4, 3, 5]])
def test_xformers_block_diagonal_matches_reference(simulate, kind, kv_seqlens):
    simulate("cpu")
    seqlens = [3, 3, 5] if kv_seqlens else [2, 4, 3]
    bias = xb.BlockDiagonalMask.from_seqlens(seqlens, kv_seqlens)
    bias = {"plain": bias, "causal": bias.make_causal(),
            "bottomright": bias.make_causal_from_bottomright()}[kind]
    m, n = sum(seqlens), sum(kv_seqlens or seqlens)
    q, k, v = _bmhk(1, m, n, seed=7)
    mask = bias.materialize((m, n))
    # reference from block geometry, independent of materialize()
    want_mask = torch.full((m, n), float("-inf"))
    qs, ks = [0], [0]
    for a, b in zip(seqlens, kv_seqlens or seqlens):
        qs.append(qs[-1] + a)
        ks.append(ks[-1] + b)
    for (q0, q1), (k0, k1) in zip(zip(qs, qs[1:]), zip(ks, ks[1:])):
        offset = {"plain": 10**6, "causal": 0, "bottomright": (k1 - k0) - (q1 - q0)}[kind]
        want_mask[q0:q1, k0:k1] = _causal(q1 - q0, k1 - k0, offset)
    torch.testing.assert_close(mask, want_mask)
    out = porter_runtime.memory_efficient_attention(q, k, v, attn_bias=bias)
    torch.testing.assert_close(out.double(), _xformers_reference(q, k, v, want_mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_xformers_padded_keys_match_reference_and_never_read_the_padding(simulate, causal):
    """mistral-inference's decode mask (blind round 12): queries packed, each sequence's
    keys in its own padded block of a KV cache made with ``torch.empty``. The padding
    holds NaN here; xformers never reads it, and neither may the twin."""
    simulate("cpu")
    q_lens, kv_lens, padding = [1, 3], [4, 6], 8
    kind = xb.BlockDiagonalCausalWithOffsetPaddedKeysMask if causal else xb.BlockDiagonalPaddedKeysMask
    bias = kind.from_seqlens(q_seqlen=q_lens, kv_padding=padding, kv_seqlen=kv_lens)
    m, n = sum(q_lens), padding * len(kv_lens)
    q, k, v = _bmhk(1, m, n, seed=11)
    want_mask = torch.full((m, n), float("-inf"))
    for i, (q0, ql, kl) in enumerate(zip([0, 1], q_lens, kv_lens)):
        want_mask[q0:q0 + ql, i * padding:i * padding + kl] = _causal(ql, kl, kl - ql if causal else 10**6)
    torch.testing.assert_close(bias.materialize((m, n)), want_mask)
    want = _xformers_reference(q, k, v, want_mask)
    for j, kl in enumerate(kv_lens):  # what torch.empty may hold past each sequence's keys
        k[0, j * padding + kl:(j + 1) * padding] = float("nan")
        v[0, j * padding + kl:(j + 1) * padding] = float("nan")
    out = porter_runtime.memory_efficient_attention(q, k, v, attn_bias=bias)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)


def test_xformers_3d_and_5d_inputs(simulate):
    simulate("cpu")
    gen = torch.Generator().manual_seed(3)
    q3, k3, v3 = (torch.randn(2, 5, 8, generator=gen) for _ in range(3))
    out3 = porter_runtime.memory_efficient_attention(q3, k3, v3)
    want3 = _xformers_reference(q3[:, :, None], k3[:, :, None], v3[:, :, None])[:, :, 0]
    torch.testing.assert_close(out3.double(), want3, rtol=1e-5, atol=1e-5)
    q5 = torch.randn(2, 5, 3, 2, 8, generator=gen)
    k5 = torch.randn(2, 6, 3, 1, 8, generator=gen).expand(2, 6, 3, 2, 8)  # GQA as xformers does
    v5 = torch.randn(2, 6, 3, 1, 8, generator=gen).expand(2, 6, 3, 2, 8)
    out5 = porter_runtime.memory_efficient_attention(q5, k5, v5, xb.LowerTriangularFromBottomRightMask())
    want5 = _xformers_reference(q5.flatten(2, 3), k5.flatten(2, 3), v5.flatten(2, 3), _causal(5, 6, 1))
    torch.testing.assert_close(out5.double(), want5.reshape(2, 5, 3, 2, 8), rtol=1e-5, atol=1e-5)


def test_block_diagonal_split_round_trip():
    parts = [torch.randn(1, 3, 2), torch.randn(2, 4, 2)]
    bias, packed = xb.BlockDiagonalMask.from_tensor_list(parts)
    assert packed.shape == (1, 11, 2)
    back = bias.split(packed)
    assert [t.shape for t in back] == [p.shape for p in parts]
    assert all(torch.equal(a, b) for a, b in zip(back, parts))
    assert bias.q_seqinfo.seqstart_py == [0, 3, 7, 11]


def test_training_arguments_leave_cuda_as_given_and_drop_cuda_only_options_elsewhere(simulate):
    # what a TP708-ported TrainingArguments subclass runs before transformers' own checks
    from dataclasses import dataclass, field
    from typing import Optional

    import enum

    class OptimizerNames(str, enum.Enum):  # how transformers' parser may hand `--optim` over
        PAGED_ADAMW = "paged_adamw_32bit"

    @dataclass
    class Args:
        tf32: Optional[bool] = None
        fsdp: str = ""
        fsdp_config: Optional[dict] = field(default=None)
        optim: str = field(default="paged_adamw_32bit")  # QLoRA's class default
        use_cpu: bool = False
        deepspeed: Optional[str] = None
        use_liger_kernel: bool = False

        def __post_init__(self):
            porter_runtime.training_arguments(self)

    simulate("cuda")
    kept = Args(tf32=True, fsdp="full_shard auto_wrap", fsdp_config={"min_num_params": 0}, deepspeed="zero3.json",
                use_liger_kernel=True)
    assert (kept.tf32, kept.fsdp_config, kept.optim) == (True, {"min_num_params": 0}, "paged_adamw_32bit")
    assert kept.deepspeed == "zero3.json" and kept.use_liger_kernel is True
    assert kept.use_cpu is False
    simulate("mps")
    assert Args().use_cpu is False  # Trainer picks MPS itself, where the runtime resolved
    simulate("cpu")
    with pytest.warns(UserWarning, match="optim=paged_adamw_32bit is bitsandbytes"):
        off = Args(tf32=True, fsdp="full_shard auto_wrap", fsdp_config={"min_num_params": 0})
    assert off.tf32 is None and off.fsdp_config == {"min_num_params": 0, "sync_module_states": "false"}
    assert off.optim == "adamw_torch"
    assert off.use_cpu is True  # the runtime resolved to the CPU: Trainer must not pick MPS
    assert Args(optim=OptimizerNames.PAGED_ADAMW).optim == "adamw_torch"
    with pytest.warns(UserWarning, match="deepspeed='./scripts/zero2.json' is for CUDA GPUs"):
        assert Args(deepspeed="./scripts/zero2.json").deepspeed is None  # LLaVA's pretrain.sh
    simulate("mps")
    with pytest.warns(UserWarning, match="use_liger_kernel=True asks for Liger's Triton kernels"):
        assert Args(use_liger_kernel=True).use_liger_kernel is False  # open-r1's SFT configs
    simulate("cpu")
    plain = Args(tf32=False, optim="adafactor")
    assert plain.tf32 is False and plain.fsdp_config is None and plain.optim == "adafactor"


def test_training_arguments_resume_on_plain_cpu_and_drop_bf16_where_transformers_refuses_it(simulate, monkeypatch):
    """alignment-handbook (blind round 5): a 2-process resume on the CPU loaded optimizer.pt
    with map_location="cpu:0" (accelerate's device); ORPOConfig's bf16=True on MPS raised
    "Your setup doesn't support bf16/gpu" (transformers 4.53 has no MPS branch)."""
    from dataclasses import dataclass

    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "unset after the test")  # what the runtime sets is undone
    monkeypatch.delenv("ACCELERATE_TORCH_DEVICE")
    utils = types.ModuleType("transformers.utils")
    utils.is_torch_bf16_gpu_available = lambda: False
    monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))
    monkeypatch.setitem(sys.modules, "transformers.utils", utils)

    @dataclass
    class Args:
        bf16: bool = True
        use_cpu: bool = False

        def __post_init__(self):
            porter_runtime.training_arguments(self)

    simulate("cuda")
    assert Args().bf16 is True and "ACCELERATE_TORCH_DEVICE" not in os.environ
    simulate("mps")
    with pytest.warns(UserWarning, match="bf16=True needs a CUDA GPU in this transformers"):
        assert Args().bf16 is False
    assert Args(bf16=None).bf16 is False  # TRL's default, which its __post_init__ turns into `not fp16`
    assert "ACCELERATE_TORCH_DEVICE" not in os.environ  # MPS is accelerate's own choice there
    utils.is_torch_bf16_gpu_available = lambda: True  # a transformers that accepts it
    assert Args().bf16 is True
    simulate("cpu")
    assert Args().use_cpu is True and os.environ["ACCELERATE_TORCH_DEVICE"] == "cpu"


def test_a_quantized_load_stays_on_cuda_and_loads_unquantised_elsewhere(simulate):
    # what TP703 writes into from_pretrained(..., load_in_8bit=True) (alpaca-lora's finetune.py)
    simulate("cuda")
    assert porter_runtime.quantized_load(True, "load_in_8bit") is True
    assert porter_runtime.quantized_load("yes", "load_in_4bit") == "yes"  # whatever the caller passed
    for kind in ("mps", "cpu"):
        simulate(kind)
        with pytest.warns(UserWarning, match=rf"load_in_8bit=True\): bitsandbytes' 8-bit .* unquantised on {kind} "
                                             r"\(about 2x the memory"):
            assert porter_runtime.quantized_load(True, "load_in_8bit") is False
        with pytest.warns(UserWarning, match=r"4-bit .* \(about 4x"):
            assert porter_runtime.quantized_load(True, "load_in_4bit") is False
        assert porter_runtime.quantized_load(False, "load_in_8bit") is False  # nothing to say
        assert porter_runtime.quantized_load(None, "load_in_8bit") is None
