"""fixtures/thirdparty end to end: the real CLI ports the CUDA-only third-party code, and
the port runs on this CPU and computes what flash-attn and xformers document."""

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from porter_test_utils import FIXTURES, python_without_porter, run_porter

sys.path.insert(0, str(Path(__file__).resolve().parent / "runtime"))
from rt_attn_reference import reference  # noqa: E402

pytestmark = pytest.mark.slow

SOURCE = FIXTURES / "thirdparty"
OPTIMIZERS = ["fused_adam", "fused_lamb", "adam_atan2", "bnb"]


def _run(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PORTER_QUIET": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(python_without_porter(*args), cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    """A copy of the fixtures, migrated with --write --unsafe-fixes, and its JSON report."""
    import shutil

    repo = tmp_path_factory.mktemp("thirdparty") / "repo"
    shutil.copytree(SOURCE, repo)
    report = repo.parent / "report.json"
    done = run_porter("migrate", repo, "--write", "--unsafe-fixes", "--report", report, "-j", "1")
    assert done.returncode == 0, done.stderr.decode()
    return repo, json.loads(report.read_text())


def _findings(report: dict) -> list[dict]:
    return [f for file in report["files"] for f in file.get("findings", []) + file.get("rewrites", [])]


def test_the_originals_fail_here():
    for script in ("optim_norms.py", "attention_forms.py"):
        proc = _run(SOURCE, script)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_ported_training_step_runs_on_cpu(ported, optimizer):
    repo, _ = ported
    proc = _run(repo, "optim_norms.py", "--optimizer", optimizer)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"{optimizer} ok" in proc.stdout


def test_ported_attention_script_runs_on_cpu(ported):
    repo, _ = ported
    proc = _run(repo, "attention_forms.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "varlen (8, 4, 16)" in proc.stdout


def test_no_cuda_only_import_is_left(ported):
    repo, _ = ported
    for name in ("attention_forms.py", "optim_norms.py"):
        text = (repo / name).read_text()
        for package in ("flash_attn", "xformers", "apex", "adam_atan2", "bitsandbytes"):
            assert f"import {package}" not in text and f"from {package}" not in text, (name, package)


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"ported_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _close(actual, expected):
    torch.testing.assert_close(actual.double(), expected, rtol=1e-5, atol=1e-5)


def test_every_flash_attn_form_matches_the_reference(ported):
    forms = _load(ported[0] / "attention_forms.py")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 8, 4, 16, generator=gen) for _ in range(3))
    _close(forms.dense(q, k, v), reference(q, k, v, causal=True))
    _close(forms.dense_window(q, k, v), reference(q, k, v, softmax_scale=0.2, window_size=(2, 1)))
    _close(forms.qkvpacked(torch.stack([q, k, v], 2)), reference(q, k, v, causal=True))
    _close(forms.kvpacked(q, torch.stack([k, v], 2)), reference(q, k, v, causal=True))
    # varlen: two packed sequences (3 and 5 tokens) attend separately
    cu, parts = torch.tensor([0, 3, 8], dtype=torch.int32), [(0, 3), (3, 8)]
    qp, kp, vp = q[0], k[0], v[0]
    want = torch.cat([reference(qp[None, a:b], kp[None, a:b], vp[None, a:b], causal=True)[0]
                      for a, b in parts])
    _close(forms.varlen(qp, kp, vp, cu, 5), want)
    _close(forms.varlen_kvpacked(qp, torch.stack([kp, vp], 1), cu, 5), want)
    plain = torch.cat([reference(qp[None, a:b], kp[None, a:b], vp[None, a:b])[0] for a, b in parts])
    _close(forms.varlen_qkvpacked(torch.stack([qp, kp, vp], 1), cu, 5), plain)


def _xformers_reference(q, k, v, bias, scale=None):
    """softmax(q·kᵀ·scale + bias)·v (xformers' documented semantics), float64, BMHK."""
    scale = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    scores = torch.einsum("bmhk,bnhk->bhmn", q.double(), k.double()) * scale + bias.double()
    return torch.einsum("bhmn,bnhk->bmhk", torch.softmax(scores, -1), v.double())


def _triangle(m, n, offset):
    i, j = torch.arange(m)[:, None], torch.arange(n)[None]
    return torch.zeros(m, n).masked_fill(j > i + offset, float("-inf"))


def test_xformers_forms_match_the_reference(ported):
    forms = _load(ported[0] / "attention_forms.py")
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 5, 3, 8, generator=gen)
    k, v = torch.randn(2, 7, 3, 8, generator=gen), torch.randn(2, 7, 3, 8, generator=gen)
    _close(forms.xformers_causal(q, k, v), _xformers_reference(q, k, v, _triangle(5, 7, 0)))
    _close(forms.xformers_bottom_right(q, k, v), _xformers_reference(q, k, v, _triangle(5, 7, 2)))
    bias = torch.randn(2, 3, 5, 7, generator=gen)
    _close(forms.xformers_tensor_bias(q, k, v, bias), _xformers_reference(q, k, v, bias, 0.3))
    qp, kp, vp = q[:1, :5], k[:1, :5], v[:1, :5]
    mask = torch.full((5, 5), float("-inf"))
    mask[:2, :2], mask[2:, 2:] = _triangle(2, 2, 0), _triangle(3, 3, 0)
    _close(forms.xformers_packed(qp, kp, vp, [2, 3]), _xformers_reference(qp, kp, vp, mask))


def test_kernels_and_packages_are_reported(ported):
    _, report = ported
    codes = [f["code"] for f in _findings(report)]
    for code in ("TP601", "TP602", "TP603"):
        assert code in codes, codes
    messages = " ".join(f["message"] + " " + f.get("suggestion", "") for f in _findings(report))
    assert "Triton kernel `scale_kernel` (launched: line 23)" in messages
    assert "`if use_triton:`" in messages  # the PyTorch path behind the flag
    assert "CUDA extension `fused_ops._C` (csrc/ops_kernel.cu)" in messages
    assert "`mamba_ssm` is CUDA-only" in messages and "deepspeed" not in messages  # guarded


def test_second_run_changes_nothing(ported):
    repo, _ = ported
    before = {p: p.read_bytes() for p in repo.glob("*.py")}
    assert run_porter("migrate", repo, "--write", "--unsafe-fixes", "-j", "1").returncode == 0
    assert {p: p.read_bytes() for p in repo.glob("*.py")} == before


def test_bitsandbytes_optimizer_needs_unsafe_fixes(tmp_path):
    import shutil

    repo = tmp_path / "repo"
    shutil.copytree(SOURCE, repo)
    report = tmp_path / "report.json"
    assert run_porter("migrate", repo, "--write", "--report", report, "-j", "1").returncode == 0
    assert "bnb.optim.AdamW8bit(params, lr=1e-3)" in (repo / "optim_norms.py").read_text()
    tp501 = [f for f in _findings(json.loads(report.read_text())) if f["code"] == "TP501"]
    assert tp501 and tp501[0]["action"] == "review"
    assert "porter_runtime.bnb_optim.AdamW8bit" in tp501[0]["suggestion"]
