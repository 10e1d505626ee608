"""TP206 on a FlexAttention training script written as attention-gym and
native-sparse-attention write theirs: the original cannot train off CUDA (no backward),
the port trains on the CPU, and its gradients are those of the same attention."""

import os
import re
import subprocess
import sys

from porter_test_utils import run_porter

MODEL = '''import torch
import torch.nn as nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

if torch.cuda.is_available():
    flex_attention = torch.compile(flex_attention)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def alibi(score, b, h, q_idx, kv_idx):
    return score - (h + 1) * 0.1 * (q_idx - kv_idx)


class Block(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, block_mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = flex_attention(q, k, v, score_mod=alibi, block_mask=block_mask)
        return self.out(y.transpose(1, 2).reshape(b, t, c))
'''

TRAIN = '''import torch
from model import Block, causal, create_block_mask

torch.manual_seed(0)
model = Block().cuda()
mask = create_block_mask(causal, None, None, 64, 64, device="cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(2, 64, 32).cuda()
for step in range(3):
    loss = model(x, mask).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}")
torch.save(model.state_dict(), "trained.pt")
'''

CHECK = '''import torch
from model import Block, alibi, causal, create_block_mask
import model as m

torch.manual_seed(0)
block = Block()
x = torch.randn(2, 64, 32)
mask = create_block_mask(causal, None, None, 64, 64, device="cpu")
block(x, mask).square().mean().backward()
got = [p.grad.clone() for p in block.parameters()]
block.zero_grad()


def dense(q, k, v, score_mod=None, block_mask=None):
    h = torch.arange(q.size(1))[:, None, None]
    i = torch.arange(q.size(2))
    s = q @ k.transpose(-1, -2) / q.size(-1) ** 0.5 - (h + 1) * 0.1 * (i[:, None] - i[None, :])
    return s.masked_fill(i[:, None] < i[None, :], float("-inf")).softmax(-1) @ v


m.flex_attention = dense
block(x, mask).square().mean().backward()
print("same gradients", all(torch.allclose(a, p.grad, atol=1e-5) for a, p in zip(got, block.parameters())))
'''


def test_a_flex_attention_training_step_runs_on_the_cpu_once_ported(tmp_path):
    repo = tmp_path / "flexrepo"
    repo.mkdir()
    (repo / "README.md").write_text("# flex\n")
    (repo / "model.py").write_text(MODEL)
    (repo / "train.py").write_text(TRAIN)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PORTER_QUIET": "1"}
    assert run_porter("migrate", repo, "--write", "-q").returncode in (0, 1)
    ported = (repo / "model.py").read_text()
    assert "porter_runtime.flex_attention_call(flex_attention, q, k, v, score_mod=alibi, block_mask=block_mask)" \
        in ported, ported
    # the code's own choice on CUDA stays (porter_runtime.compile is torch.compile there)
    assert re.search(r"flex_attention = (torch|porter_runtime)\.compile\(flex_attention\)", ported), ported
    ran = subprocess.run([sys.executable, "train.py"], cwd=repo, capture_output=True, text=True, env=env, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert [line.split()[:2] for line in ran.stdout.splitlines()] == [["step", "0"], ["step", "1"], ["step", "2"]]
    (repo / "check.py").write_text(CHECK)
    checked = subprocess.run([sys.executable, "check.py"], cwd=repo, capture_output=True, text=True, env=env,
                             timeout=300)
    assert checked.stdout.strip() == "same gradients True", checked.stderr[-2000:]
    again = run_porter("migrate", repo, "--diff", "-q")
    assert again.returncode == 0 and again.stdout == b""
