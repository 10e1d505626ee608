"""TP605 through the real CLI, on the triton_ssm fixture (a Mamba-style package: a fused
RMSNorm in Triton with its PyTorch reference beside it, imported by the model at the top
of its module, and a Triton GELU the model imports under try/except ImportError).

Without Triton (this machine, like a Mac), the original package fails at import; ported,
it imports and trains on the CPU through the repository's own reference path, the kernel
the model catches keeps its fallback, and a kernel launch names the kernel. With CUDA
simulated, the ported import fails exactly as the original does (a CUDA machine without
Triton), so the CUDA path is the original one.
"""

import importlib.util
import json
import shutil
import subprocess

import pytest

from porter_test_utils import FIXTURES, python_without_porter, run_porter

REPO = FIXTURES / "repos" / "triton_ssm"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is not None,
                                reason="Triton is installed here: the stand-in path is not taken")


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("triton_ssm")
    original, port = base / "original", base / "port"
    shutil.copytree(REPO, original)
    shutil.copytree(REPO, port)
    done = run_porter("migrate", port, "--write", "--output-format", "json")
    assert done.returncode in (0, 1), done.stderr.decode()
    return original, port, json.loads(done.stdout)


def _findings(report, path, code):
    return [f for f in next((f for f in report["files"] if f["path"] == path), {"findings": [], "rewrites": []})
            .get("findings", []) if f["code"] == code]


def _rewrites(report, path, code):
    return [f for f in next((f for f in report["files"] if f["path"] == path), {"rewrites": []})
            .get("rewrites", []) if f["code"] == code]


def _run(cwd, code):
    """``code`` as a script in the tree's root, run with porter hidden."""
    (cwd / "_probe.py").write_text(code)
    return subprocess.run(python_without_porter("_probe.py"), cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_original_fails_at_import_without_triton(trees):
    original, _, _ = trees
    done = _run(original, "import ssm")
    assert done.returncode != 0 and "No module named 'triton'" in done.stderr


def test_the_port_wraps_the_needed_module_and_leaves_the_caught_one(trees):
    _, port, report = trees
    # one `try` for the two import lines; each line is reported as ported (the ledger and
    # the notes read rewrites by line)
    wraps = _rewrites(report, "ssm/ops/norm.py", "TP605")
    assert [w["before"] for w in wraps] == ["import triton", "import triton.language as tl"]
    assert wraps[0]["after"].startswith("try:") and wraps[1]["after"] == ""
    text = (port / "ssm/ops/norm.py").read_text()
    assert "    triton = porter_runtime.triton_stand_in(\"triton\")\n" in text
    assert "    tl = porter_runtime.triton_stand_in(\"triton.language\")\n" in text
    # the model catches fast_gelu's ImportError and uses F.gelu: its fallback must keep running
    assert (port / "ssm/ops/fast_gelu.py").read_bytes() == (REPO / "ssm/ops/fast_gelu.py").read_bytes()
    notes = _findings(report, "ssm/ops/fast_gelu.py", "TP603")
    assert notes and all(f["severity"] == "info" for f in notes), notes
    assert not _findings(report, "ssm/ops/norm.py", "TP603")
    assert _findings(report, "ssm/ops/norm.py", "TP601"), "the kernel itself stays a finding"


def test_the_port_trains_on_the_cpu_through_the_reference_path(trees):
    _, port, _ = trees
    done = subprocess.run(python_without_porter("train.py", "--steps", "2", "--out", "ckpt.pt"), cwd=port,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "step 1 loss" in done.stdout and "eval loss" in done.stdout
    check = _run(port, (
        "import torch, ssm.model as m\n"
        "from ssm.ops.norm import rms_norm_fn\n"
        "assert m.fused_gelu is None, 'the caught import kept its fallback'\n"
        "x, w = torch.randn(3, 5, 16), torch.rand(16)\n"
        "with torch.no_grad():\n"
        "    y = rms_norm_fn(x, w)\n"
        "torch.testing.assert_close(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)\n"
        "print('same')\n"))
    assert check.returncode == 0 and "same" in check.stdout, check.stderr


def test_a_launch_names_the_kernel(trees):
    _, port, _ = trees
    done = _run(port, (
        "import torch\n"
        "from ssm.ops import norm\n"
        "print(len(norm._rms_norm_fwd.configs))\n"
        "x = torch.randn(2, 8)\n"
        "norm._rms_norm_fwd[(2,)](x, x, x, x, 8, 8, 1e-6, BLOCK_N=8)\n"))
    assert done.stdout.strip() == "4"
    assert done.returncode != 0 and "Triton kernel `_rms_norm_fwd`" in done.stderr and "norm.py" in done.stderr


@pytest.mark.parametrize("tree", ["original", "port"])
def test_with_cuda_simulated_the_import_fails_as_the_original(trees, tree):
    """A CUDA machine without Triton: the ported import raises what the original raises."""
    original, port, _ = trees
    done = _run(original if tree == "original" else port, (
        "import torch\n"
        "torch.cuda.is_available = lambda: True\n"
        "try:\n"
        "    import ssm.ops.norm\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ModuleNotFoundError No module named 'triton'"


def test_a_second_write_changes_nothing(trees, tmp_path):
    _, port, _ = trees
    again = tmp_path / "again"
    shutil.copytree(port, again, ignore=shutil.ignore_patterns("__pycache__", "ckpt.pt", "_probe.py"))
    before = {p.relative_to(again): p.read_bytes() for p in again.rglob("*.py")}
    done = run_porter("migrate", again, "--write")
    assert done.returncode in (0, 1), done.stderr.decode()
    assert {p.relative_to(again): p.read_bytes() for p in again.rglob("*.py")} == before
