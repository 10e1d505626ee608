"""TP103 on a real tree: a picotron-style model imports flash_attn's attention, rotary
embedding and Triton RMSNorm at its top. Ported, it imports and runs on this machine's
CPU, and computes what the same model written in plain PyTorch computes."""

import subprocess

import torch

from porter_test_utils import python_without_porter, run_porter

MODEL = '''\
import torch
import torch.nn as nn
from flash_attn.flash_attn_interface import flash_attn_func
from flash_attn.layers.rotary import apply_rotary_emb
from flash_attn.ops.triton.layer_norm import layer_norm_fn


class TritonRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, hidden_size))

    def forward(self, hidden_states, residual=None, prenorm=False):
        return layer_norm_fn(hidden_states, self.weight, None, residual=residual, eps=self.eps,
                             prenorm=prenorm, is_rms_norm=True)


def block(x, cos, sin, norm, heads):
    b, s, d = x.shape
    h = norm(x).view(b, s, heads, d // heads)
    q = apply_rotary_emb(h, cos, sin, interleaved=False)
    k = apply_rotary_emb(h, cos, sin, interleaved=False)
    return flash_attn_func(q, k, h, causal=True).reshape(b, s, d)
'''
RUN = '''\
import torch

from model import TritonRMSNorm, block

torch.manual_seed(0)
x = torch.randn(2, 6, 16)
t = torch.arange(6, dtype=torch.float32)[:, None] / (10000 ** (torch.arange(2) / 2))
out = block(x, t.cos(), t.sin(), TritonRMSNorm(16), heads=4)
torch.save(out, "out.pt")
'''


def _reference(x, cos, sin, weight, heads):
    b, s, d = x.shape
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight
    h = normed.view(b, s, heads, d // heads)
    c, si = torch.cat([cos, cos], -1)[:, None], torch.cat([sin, sin], -1)[:, None]
    ro = h[..., :4]
    a, bb = ro.chunk(2, -1)
    rot = torch.cat([ro * c + torch.cat((-bb, a), -1) * si, h[..., 4:]], -1)
    q = rot.transpose(1, 2)
    out = torch.nn.functional.scaled_dot_product_attention(q, q, h.transpose(1, 2), is_causal=True)
    return out.transpose(1, 2).reshape(b, s, d)


def test_a_picotron_style_model_runs_ported(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "run.py").write_text(RUN)
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "PORTER_QUIET": "1"}
    before = subprocess.run(python_without_porter("run.py"), cwd=tmp_path, capture_output=True, text=True, env=env)
    assert before.returncode != 0 and "flash_attn" in before.stderr
    proc = run_porter("migrate", tmp_path, "--write", "--no-progress", "-q")
    assert proc.returncode in (0, 1), proc.stderr
    text = (tmp_path / "model.py").read_text()
    assert "flash_attn" not in text.split("class TritonRMSNorm")[0]  # every import went with its last use
    after = subprocess.run(python_without_porter("run.py"), cwd=tmp_path, capture_output=True, text=True, env=env)
    assert after.returncode == 0, after.stderr
    torch.manual_seed(0)
    x = torch.randn(2, 6, 16)
    t = torch.arange(6, dtype=torch.float32)[:, None] / (10000 ** (torch.arange(2) / 2))
    want = _reference(x, t.cos(), t.sin(), torch.linspace(0.5, 1.5, 16), heads=4)
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), want, rtol=1e-4, atol=1e-5)
