"""The custom ops and the Hugging Face script of the paper_repro fixture, ported with
the real CLI: research-style CUDA-only code (a FlashAttention-3 → FlashAttention-2
import chain, an xFormers availability flag that raises, the compiled `rotary_emb`
extension, a `cpp_extension.load` build from sources assembled at run time, Hugging
Face CUDA idioms) fails at import here; ported, `ops` imports and computes what a plain
PyTorch reference computes, on the CPU, and the report names each class.
"""

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from porter_test_utils import FIXTURES, python_without_porter, run_porter, snapshot

REPO = FIXTURES / "repos" / "paper_repro"

#: Compares the ported ops with PyTorch references written here; prints "ok".
CHECK = r"""
import math, os, sys
sys.path.insert(0, os.getcwd())  # the repository under test
import torch
import ops

torch.manual_seed(0)
b, s, h, d = 2, 7, 3, 16
q, k, v = (torch.randn(b, s, h, d) for _ in range(3))

def reference_attention(q, k, v, causal):
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    scores = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
    return (scores.softmax(-1) @ vh).transpose(1, 2).float()

for causal in (True, False):
    out = ops.attention(q, k, v, causal=causal)
    assert out.shape == (b, s, h, d), out.shape
    torch.testing.assert_close(out, reference_attention(q, k, v, causal), atol=1e-5, rtol=1e-5)
assert torch.equal(ops.attention(q, k, v), ops.attention(q, k, v, causal=True))

angles = torch.outer(torch.arange(s).float(), 1.0 / 10000 ** (torch.arange(0, d, 2).float() / d))
cos, sin = angles.cos(), angles.sin()
x1, x2 = q[..., : d // 2], q[..., d // 2:]
c, sn = cos[None, :, None, :], sin[None, :, None, :]
expected = torch.cat((x1 * c - x2 * sn, x2 * c + x1 * sn), dim=-1)
torch.testing.assert_close(ops.apply_rotary(q, cos, sin), expected)

x, bias = torch.randn(4, 32), torch.randn(32)
y = x + bias
gelu = 0.5 * y * (1 + torch.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)))
torch.testing.assert_close(ops.bias_gelu(x, bias), gelu, atol=1e-5, rtol=1e-5)
print("ok", os.environ.get("ATTN_BACKEND", "flash"))
"""

#: (path, rule code) of what the port rewrites and what it leaves for a human.
REWRITES = Counter({
    ("ops/attention.py", "TP101"): 2,  # the FA3 → FA2 chain goes, the call runs the twin
    ("ops/attention.py", "TP201"): 3,  # the stop on XFORMERS_AVAILABLE goes, the call is ported,
                                       # then the try that set the flag (porter.edits.probes)
    ("ops/attention.py", "TP202"): 1,
    ("ops/rotary.py", "TP604"): 1,     # `import rotary_emb` becomes optional
    ("ops/fused.py", "TP604"): 1,      # the load(...) build happens only with CUDA
    ("hf_finetune.py", "TP701"): 2,    # attn_implementation / use_flash_attention_2
    ("hf_finetune.py", "TP702"): 2,    # device_map={"": 0} / "cuda"
    ("hf_finetune.py", "TP703"): 1,    # load_in_8bit=True: quantized_load
    ("hf_finetune.py", "TP704"): 1,    # tf32=True
})
FINDINGS = Counter({
    ("hf_finetune.py", "TP703"): 1,    # BitsAndBytesConfig
    ("hf_finetune.py", "TP705"): 2,    # optim="paged_adamw_32bit", deepspeed=
})


def _check(repo: Path, backend: str = "flash") -> subprocess.CompletedProcess:
    script = repo.parent / "check_ops.py"
    script.write_text(CHECK)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PORTER_QUIET": "1", "ATTN_BACKEND": backend}
    env.pop("PYTHONPATH", None)
    return subprocess.run(python_without_porter(str(script)), cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)


def _items(report: Path, kind: str) -> Counter:
    data = json.loads(report.read_text())
    return Counter((f["path"], item["code"]) for f in data["files"] for item in f[kind])


@pytest.fixture
def repo(copy_tree):
    root = copy_tree(REPO / "ops", "repo/ops").parent
    (root / "hf_finetune.py").write_bytes((REPO / "hf_finetune.py").read_bytes())
    return root


@pytest.mark.slow
def test_ops_fail_unported_and_match_the_reference_once_ported(repo, tmp_path):
    before = _check(repo)
    assert before.returncode != 0
    assert "No module named 'flash_attn'" in before.stderr, before.stderr[-2000:]

    report = tmp_path / "report.json"
    write = run_porter("migrate", repo, "--write", "--report", report)
    assert write.returncode == 0, write.stderr.decode()
    assert _items(report, "rewrites") == REWRITES
    assert _items(report, "findings") == FINDINGS

    for backend in ("flash", "xformers"):  # the xFormers path is reachable too
        after = _check(repo, backend)
        assert after.returncode == 0, after.stderr[-3000:]
        assert after.stdout.split() == ["ok", backend]

    snap = snapshot(repo)
    assert run_porter("migrate", repo, "--write").returncode == 0
    assert snapshot(repo) == snap, "a second migration must change nothing"


def test_unported_extension_build_fails_here(repo):
    """The cpp_extension.load build itself (not only the imports before it) needs CUDA."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    script = repo.parent / "build_fused.py"
    script.write_text("import importlib.util as u\n"
                      "s = u.spec_from_file_location('fused', 'ops/fused.py')\n"
                      "s.loader.exec_module(u.module_from_spec(s))\n")
    proc = subprocess.run(python_without_porter(str(script)),
                          cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "CUDA" in proc.stderr or "nvcc" in proc.stderr or "Ninja" in proc.stderr, proc.stderr[-2000:]


def test_ported_extension_import_still_fails_where_torch_sees_cuda(repo):
    """Found on an H100: the port must not turn a CUDA machine's missing `rotary_emb`
    into an AttributeError at the first CUDA call; there the import fails as before.
    CUDA is simulated (torch.cuda.is_available), the import is real."""
    assert run_porter("migrate", repo, "--write").returncode == 0
    script = repo.parent / "import_rotary.py"
    script.write_text("import importlib.util as u, sys, torch\n"
                      "torch.cuda.is_available = lambda: sys.argv[1] == 'cuda'\n"
                      "s = u.spec_from_file_location('rotary', 'ops/rotary.py')\n"
                      "m = u.module_from_spec(s)\n"
                      "s.loader.exec_module(m)\n"
                      "print(m.rotary_emb)\n")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)
    runs = {where: subprocess.run(python_without_porter(str(script), where), cwd=repo, env=env,
                                  capture_output=True, text=True, timeout=300)
            for where in ("cuda", "cpu")}
    assert runs["cuda"].returncode != 0
    assert "No module named 'rotary_emb'" in runs["cuda"].stderr, runs["cuda"].stderr[-2000:]
    assert runs["cpu"].returncode == 0, runs["cpu"].stderr[-2000:]
    assert runs["cpu"].stdout.split() == ["None"]
