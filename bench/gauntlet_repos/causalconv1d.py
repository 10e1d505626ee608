"""causal-conv1d as its README and its own commands use it: the README's usage
(`from causal_conv1d import causal_conv1d_fn`, checked against the README's F.conv1d equivalent, forward and
backward, channels-first and channel-last, plus a one-token decoding step through `causal_conv1d_update`); a few
parametrizations of each test in tests/test_causal_conv1d.py at the tests' own sizes (kernel against `*_ref`); and
tests/benchmark_determinism_kernels.py with its own flags shrunk. The tree runs from the tree (PYTHONPATH=.): the
CUDA extension setup.py builds (`causal_conv1d_cuda`) is not built, as on a Mac; no weights or data are needed."""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
ENV = {"PYTHONPATH": "."}

USAGE = '''\
# The README's "How to use": causal_conv1d_fn(x, weight, bias=None, activation=None), said to equal
# F.conv1d(x, weight.unsqueeze(1), bias, padding=width - 1, groups=dim)[..., :seqlen] (then SiLU when asked).
import torch
import torch.nn.functional as F

from causal_conv1d import causal_conv1d_fn, causal_conv1d_update

torch.manual_seed(0)
batch, dim, seqlen, width = 2, 64, 100, 4
for channel_last in (False, True):
    for activation in (None, "silu"):
        if channel_last:
            x = torch.randn(batch, seqlen, dim).transpose(1, 2).requires_grad_()
        else:
            x = torch.randn(batch, dim, seqlen, requires_grad=True)
        weight = torch.randn(dim, width, requires_grad=True)
        bias = torch.randn(dim, requires_grad=True)
        out = causal_conv1d_fn(x, weight, bias, activation=activation)
        xr, wr, br = (t.detach().clone().requires_grad_() for t in (x, weight, bias))
        ref = F.conv1d(xr, wr.unsqueeze(1), br, padding=width - 1, groups=dim)[..., :seqlen]
        if activation == "silu":
            ref = F.silu(ref)
        assert out.shape == (batch, dim, seqlen), out.shape
        assert torch.allclose(out, ref, rtol=3e-4, atol=1e-3), (out - ref).abs().max()
        g = torch.randn_like(out)
        out.backward(g)
        ref.backward(g)
        for a, b in ((x, xr), (weight, wr), (bias, br)):
            assert torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-3), (a.grad - b.grad).abs().max()
        print("causal_conv1d_fn ok", channel_last, activation, (out - ref).abs().max().item())

# Decoding, as Mamba's step() does: the state holds the last width - 1 inputs, one new token at a time.
x = torch.randn(batch, dim, seqlen)
weight, bias = torch.randn(dim, width), torch.randn(dim)
full = causal_conv1d_fn(x, weight, bias, activation="silu")
state = torch.zeros(batch, dim, width - 1)
steps = []
for t in range(seqlen):
    steps.append(causal_conv1d_update(x[:, :, t], state, weight, bias, activation="silu"))
stepped = torch.stack(steps, dim=-1)
assert torch.allclose(stepped, full, rtol=3e-4, atol=1e-3), (stepped - full).abs().max()
print("causal_conv1d_update ok", (stepped - full).abs().max().item())
'''


def prepare(tree: Path) -> None:
    root = Path(tree) / G
    root.mkdir(parents=True, exist_ok=True)
    (root / "usage.py").write_text(USAGE)


T = "tests/test_causal_conv1d.py"
PYTEST = "python -m pytest -x -q -p no:cacheprovider"

STEPS = [
    Step("usage-readme", f"python {G}/usage.py", env=ENV, timeout=180),
    # causal_conv1d_fn against causal_conv1d_ref, forward and backward: channels-first fp32, channel-last with
    # initial and final states, a bf16 odd length (ids: dim-seqlen-width-bias-silu-itype-channel_last-initial-final).
    Step("test-fn",
         f"{PYTEST} '{T}::test_causal_conv1d[64-128-4-True-True-itype0-False-False-False]'"
         f" '{T}::test_causal_conv1d[64-128-4-True-True-itype0-True-True-True]'"
         f" '{T}::test_causal_conv1d[64-129-3-False-False-itype2-True-False-False]'",
         env=ENV, timeout=240),
    # causal_conv1d_update against causal_conv1d_update_ref: circular cache, plain state, batch gather, padding.
    Step("test-update",
         f"{PYTEST} '{T}::test_causal_conv1d_update[2048-4-4-True-True-True-itype0]'"
         f" '{T}::test_causal_conv1d_update[2048-4-1-False-True-False-itype0]'"
         f" '{T}::test_causal_conv1d_update_with_batch_gather[2048-4-4-True-True-True-itype0]'"
         f" '{T}::test_causal_conv1d_update_with_padding[2048-4-4-False-True-True-itype0]'",
         env=ENV, timeout=240),
    # Variable-length sequences: seq_idx through causal_conv1d_fn (with and without padding), and the Triton
    # causal_conv1d_varlen_states against its _ref.
    Step("test-varlen",
         f"{PYTEST} '{T}::test_causal_conv1d_varlen[64-128-4-True-True-itype0]'"
         f" '{T}::test_causal_conv1d_varlen_padding[64-128-4-True-True-itype0]'"
         f" '{T}::test_causal_conv1d_get_states[2048-itype0]'",
         env=ENV, timeout=240),
    # The repository's determinism benchmark (backward kernel, default and deterministic), its flags shrunk.
    Step("benchmark-determinism",
         "python tests/benchmark_determinism_kernels.py --batch 1 --dim 64 --seqlen 128 --warmup 1 --rep 2 --iters 2",
         env=ENV, timeout=180),
]
