"""What porter leaves of flash-attn once its twins run every call (LongLoRA, blind round 15),
through the real CLI: the version import (TP104), an import nothing uses (TP609) and the
capability query that only picks a warning (PT104). The
ported tree then runs on this CPU-only machine, with a KV cache behind the version check;
with CUDA simulated and no flash_attn, both imports fail where they did."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from porter_test_utils import python_without_porter, run_porter

FILES = {
    "llama_attn_replace.py": """\
        import warnings

        import torch
        from flash_attn import __version__ as flash_attn_version
        from flash_attn.flash_attn_interface import flash_attn_func


        def forward_flashattn_inference(q, k, v, past_key_value=None):
            if past_key_value is not None:
                assert (
                    flash_attn_version >= "2.1.0"
                ), "past_key_value support requires flash-attn >= 2.1.0"
                k = torch.cat([past_key_value[0], k], dim=1)
                v = torch.cat([past_key_value[1], v], dim=1)
            return flash_attn_func(q, k, v, causal=True)


        def replace_llama_attn(use_flash_attn=True):
            if use_flash_attn:
                cuda_major, cuda_minor = torch.cuda.get_device_capability()
                if cuda_major < 8:
                    warnings.warn("Flash attention is only supported on A100 or H100 GPU during training")
            return use_flash_attn
        """,
    "gptneox_attn_replace.py": """\
        import math

        import torch
        from flash_attn.bert_padding import unpad_input, pad_input


        def scale(x):
            return x * math.sqrt(4)
        """,
    "infer.py": """\
        import torch
        import gptneox_attn_replace
        from llama_attn_replace import forward_flashattn_inference, replace_llama_attn

        assert replace_llama_attn()

        q = torch.randn(1, 2, 2, 8)
        cache = (torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8))
        out = forward_flashattn_inference(q, q, q, past_key_value=cache)
        print(tuple(out.shape), float(gptneox_attn_replace.scale(torch.ones(1))))
        """,
}


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("longlora")
    for rel, code in FILES.items():
        (root / rel).write_text(textwrap.dedent(code))
    out = run_porter("migrate", root, "--write")
    assert out.returncode in (0, 1), out.stderr.decode()
    return root


def test_the_leftovers_are_rewritten_and_nothing_is_left_to_a_human(ported: Path):
    assert "flash_attn_version = porter_runtime.flash_attn_version()" in (ported / "llama_attn_replace.py").read_text()
    guarded = (ported / "gptneox_attn_replace.py").read_text()
    assert "try:\n    from flash_attn.bert_padding import unpad_input, pad_input\nexcept ImportError:" in guarded
    check = run_porter("migrate", ported, "--check", "--output-format", "json")
    findings = [f for entry in json.loads(check.stdout)["files"] for f in entry.get("findings", [])
                if f.get("severity") != "info"]
    assert findings == [] and check.returncode == 0, findings


def test_the_port_runs_on_the_cpu_with_its_kv_cache(ported: Path):
    env = {**os.environ, "PORTER_QUIET": "1", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(python_without_porter("infer.py"), cwd=ported, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.stdout.strip() == "(1, 2, 2, 8) 2.0", out.stderr


@pytest.mark.parametrize("module", ["llama_attn_replace", "gptneox_attn_replace"])
def test_without_flash_attn_on_cuda_both_imports_fail_where_they_did(ported: Path, module):
    # in a process of its own: the ported tree's porter_runtime resolves CUDA once and
    # would stay in this process's sys.modules for the tests that come after
    script = ported / f"on_cuda_{module}.py"
    script.write_text(f"import torch\ntorch.cuda.is_available = lambda: True\nimport {module}\n")
    env = {**os.environ, "PORTER_QUIET": "1"}
    out = subprocess.run(python_without_porter(script.name), cwd=ported, capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode != 0 and "No module named 'flash_attn'" in out.stderr, out.stderr


def test_flash_attn_func_handed_on_as_a_value_is_its_twin_and_the_port_runs(tmp_path):
    """duo-attention (blind round 18): `full_attn_func = flash_attn_func` and
    `UlyssesAttention(attn_func=flash_attn_func)` kept flash-attn's import after every call
    was ported, so the model failed to import off CUDA. The value is the twin now, the import
    goes, and the values compute SDPA with flash-attn's causal semantics."""
    (tmp_path / "patch.py").write_text(textwrap.dedent("""\
        import torch
        from flash_attn import flash_attn_func


        class UlyssesAttention(torch.nn.Module):
            def __init__(self, attn_func=None):
                super().__init__()
                self.attn_func = attn_func

            def forward(self, q, k, v):
                return self.attn_func(q, k, v, causal=True)


        full_attn_func = flash_attn_func
        ulysses = UlyssesAttention(attn_func=flash_attn_func)
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, 5, 2, 8) for _ in range(3))
        want = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
        print(torch.allclose(ulysses(q, k, v), want, atol=1e-5), full_attn_func(q, k, v).shape == q.shape)
        """))
    assert run_porter("migrate", tmp_path, "--write", "-q").returncode in (0, 1)
    ported = (tmp_path / "patch.py").read_text()
    assert "flash_attn" not in ported.replace("porter_runtime", "")
    assert "UlyssesAttention(attn_func=porter_runtime.attention)" in ported
    ran = subprocess.run(python_without_porter("patch.py"), cwd=tmp_path, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": "", "PORTER_QUIET": "1"})
    assert ran.returncode == 0 and ran.stdout.split() == ["True", "True"], ran.stderr


def test_a_global_or_del_of_the_function_stays_a_name(tmp_path):
    """The review of the value rewrite: `global flash_attn_func` and `del` keep the name
    (a `global porter_runtime.attention` would not compile); the value read is the twin."""
    (tmp_path / "edge.py").write_text(textwrap.dedent("""\
        from flash_attn import flash_attn_func


        def current():
            global flash_attn_func
            fn = flash_attn_func
            del fn
            return flash_attn_func
        """))
    assert run_porter("migrate", tmp_path, "--write", "-q").returncode in (0, 1)
    ported = (tmp_path / "edge.py").read_text()
    compile(ported, "edge.py", "exec")
    assert "    global flash_attn_func\n    fn = porter_runtime.attention\n    del fn\n" in ported
