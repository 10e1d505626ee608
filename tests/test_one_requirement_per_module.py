"""One CUDA requirement, one finding; another accelerator's backend, notes only.

Laid out as linkedin/Liger-Kernel is (blind round 10, 379 of its 502 findings false):

- an opt-in CuTe DSL backend whose module imports ``cutlass`` at its top, then more of
  CUTLASS and a CUDA stream: the first import needs a human; the rest restate it and are
  notes (porter.engine.stages.notes). Once the import is guarded, the stream needs a human
  again;
- an Ascend NPU backend (``ops/backends/_ascend/``, registered for ``"npu"`` in its
  ``__init__``) holding a Triton kernel: a note (porter.project.unreached), while the
  same kernel on the default path needs a human;
- a folder called ``tpu`` that is about something else keeps its findings.

The ported training script then runs on the CPU.
"""

import json
import subprocess
import sys
from pathlib import Path

from test_cli import make_tree
from test_cuda_only_notes import porter

CUTE = (
    "import torch\n"
    "import cutlass\n"
    "import cutlass.cute as cute\n"
    "from cutlass import Float32\n"
    "from cuda.bindings import driver as cuda_driver\n\n\n"
    "def fused_ce(logits, target):\n"
    "    stream = torch.cuda.current_stream()\n"
    "    kernel = cute.compile(logits, Float32)\n"
    "    return kernel(logits, target, cuda_driver.CUstream(stream.cuda_stream))\n"
)

KERNEL = (
    "import torch\n"
    "import triton\n"
    "import triton.language as tl\n\n\n"
    "@triton.jit\n"
    "def _dyt_fwd(X, Y, alpha, N: tl.constexpr):\n"
    "    offs = tl.arange(0, N)\n"
    "    tl.store(Y + offs, tl.math.tanh(alpha * tl.load(X + offs)))\n\n\n"
    "def dyt(x, alpha):\n"
    "    y = torch.empty_like(x)\n"
    "    _dyt_fwd[(1,)](x, y, alpha, N=x.numel())\n"
    "    return y\n"
)

TREE = {
    "train.py": (
        "import os\n\n"
        "import torch\n\n"
        "from liger.ops import backends\n\n\n"
        "def main():\n"
        "    x = torch.randn(4, 8).cuda()\n"
        "    if os.environ.get('LIGER_IMPL') == 'cutedsl':\n"
        "        from liger.ops.cutedsl.ce import fused_ce\n"
        "        print(fused_ce(x, x))\n"
        "    elif os.environ.get('LIGER_IMPL') == 'triton':\n"
        "        from liger.ops.dyt import dyt\n"
        "        print(dyt(x, 0.5))\n"
        "    from liger.tpu.schedule import warmup\n"
        "    print(warmup(3), backends.REGISTRY, torch.tanh(x * 0.5).shape)\n\n\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    ),
    "liger/__init__.py": "",
    "liger/ops/__init__.py": "",
    "liger/ops/dyt.py": KERNEL,
    "liger/ops/cutedsl/__init__.py": "",
    "liger/ops/cutedsl/ce.py": CUTE,
    "liger/ops/backends/__init__.py": (
        "import importlib\n\n"
        "REGISTRY = {'npu': 'liger.ops.backends._ascend.ops'}\n\n\n"
        "def load(device):\n"
        "    return importlib.import_module(REGISTRY[device])\n"
    ),
    "liger/ops/backends/_ascend/__init__.py": "# Ascend NPU backend: default on NPU devices.\nDEVICES = ('npu',)\n",
    "liger/ops/backends/_ascend/ops/__init__.py": "from .dyt import dyt  # noqa: F401\n",
    "liger/ops/backends/_ascend/ops/dyt.py": KERNEL,
    # "tpu" here is a time-per-update schedule, not Google's TPU: its finding stays
    "liger/tpu/__init__.py": "",
    "liger/tpu/schedule.py": (
        "def gpu_count():\n"
        "    import pynvml\n"
        "    pynvml.nvmlInit()\n"
        "    return pynvml.nvmlDeviceGetCount()\n\n\n"
        "def warmup(steps):\n"
        "    return [min(1.0, s / steps) for s in range(steps)]\n"
    ),
}


def report_of(root: Path, tmp_path: Path, name: str) -> dict:
    report = tmp_path / f"{name}.json"
    porter("migrate", root, "--check", "--report", report)
    data = json.loads(report.read_text())
    return {entry["path"]: entry["findings"] for entry in data["files"]}


def needing(findings: list) -> list:
    return sorted((f["line"], f["code"]) for f in findings if f.get("severity", "") != "info")


def test_a_module_that_imports_cutlass_has_one_finding(tmp_path):
    root = make_tree(tmp_path / "repo", TREE)
    found = report_of(root, tmp_path, "first")["liger/ops/cutedsl/ce.py"]
    assert needing(found) == [(2, "TP603")]
    notes = [f for f in found if f.get("severity") == "info"]
    # the other CUTLASS imports, cuda.bindings and the stream: each says which import states it
    assert {f["line"] for f in notes} >= {3, 4, 5, 9}
    assert all("CUDA-only import at line 2, whose finding comes first" in f["message"] for f in notes)


def test_once_the_import_is_guarded_the_stream_needs_a_human_again(tmp_path):
    guarded = CUTE.replace("import cutlass\nimport cutlass.cute as cute\nfrom cutlass import Float32\n"
                           "from cuda.bindings import driver as cuda_driver\n",
                           "try:\n    import cutlass.cute as cute\n    from cutlass import Float32\n"
                           "    from cuda.bindings import driver as cuda_driver\nexcept ImportError:\n"
                           "    cute = None\n")
    root = make_tree(tmp_path / "repo", {**TREE, "liger/ops/cutedsl/ce.py": guarded})
    found = report_of(root, tmp_path, "guarded")["liger/ops/cutedsl/ce.py"]
    assert (11, "PT110") in needing(found)


def test_an_ascend_backend_is_notes_and_the_default_kernel_is_not(tmp_path):
    root = make_tree(tmp_path / "repo", TREE)
    files = report_of(root, tmp_path, "vendors")
    ascend = files["liger/ops/backends/_ascend/ops/dyt.py"]
    assert ascend and needing(ascend) == []
    assert all("a backend for an Ascend NPU (under `liger/ops/backends/_ascend/`)" in f["message"]
               for f in ascend if f.get("severity") == "info")
    assert [code for _, code in needing(files["liger/ops/dyt.py"])] == ["TP601"]
    assert needing(files["liger/tpu/schedule.py"]), "a folder named tpu with no XLA in it is no TPU backend"


def test_the_port_runs_on_the_cpu(tmp_path):
    root = make_tree(tmp_path / "repo", TREE)
    assert porter("migrate", root, "--write") == 0
    run = subprocess.run([sys.executable, "train.py"], cwd=root, capture_output=True, text=True,
                         env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("torch.Size([4, 8])")


def test_the_tree_s_own_kernel_package_is_not_a_cuda_only_import(tmp_path):
    """Liger-Kernel imports ``liger_kernel`` (a CUDA-only package to everyone else) in its own
    ops: that import states no requirement, so the kernels keep their findings."""
    ops = "import torch\nfrom liger_kernel.ops.utils import ensure_contiguous\n" + KERNEL.replace("import torch\n", "")
    root = make_tree(tmp_path / "repo", {
        "train.py": "import torch\nfrom liger_kernel.ops.swiglu import dyt\n\nif __name__ == '__main__':\n"
                    "    print(dyt(torch.ones(4).cuda(), 0.5))\n",
        "liger_kernel/__init__.py": "", "liger_kernel/ops/__init__.py": "",
        "liger_kernel/ops/utils.py": "def ensure_contiguous(fn):\n    return fn\n",
        "liger_kernel/ops/swiglu.py": ops,
    })
    found = report_of(root, tmp_path, "own")["liger_kernel/ops/swiglu.py"]
    assert [code for _, code in needing(found)] == ["TP601"]


def test_an_import_the_port_removes_states_nothing(tmp_path):
    """FastChat's llama_flash_attn_monkey_patch.py: TP101 ports the flash_attn function, and the
    clean-up removes its import, so the next CUDA-only import (`flash_attn.bert_padding`, which
    stays for `index_put_first_axis`, which has no twin) is the one that needs a human, on the
    first run as on the run after `--write`."""
    patch = ("import torch\n"
             "from flash_attn.flash_attn_interface import flash_attn_varlen_qkvpacked_func\n"
             "from flash_attn.bert_padding import index_put_first_axis, unpad_input, pad_input\n\n\n"
             "def forward(qkv, mask, cu, max_s):\n"
             "    x, idx, cu, max_s = unpad_input(qkv, mask)\n"
             "    out = flash_attn_varlen_qkvpacked_func(x, cu, max_s, 0.0, causal=True)\n"
             "    full = index_put_first_axis(out, idx, qkv.shape[0] * qkv.shape[1])\n"
             "    return pad_input(out, idx, qkv.shape[0], qkv.shape[1]), full, torch.cuda.get_device_capability()\n")
    root = make_tree(tmp_path / "repo", {"train.py": "import patch\n\nif __name__ == '__main__':\n    print(patch)\n",
                                         "patch.py": patch})
    first = needing(report_of(root, tmp_path, "first")["patch.py"])
    assert (3, "PT999") in first
    assert porter("migrate", root, "--write") == 0
    second = report_of(root, tmp_path, "second")["patch.py"]
    assert [code for _, code in needing(second)] == [code for _, code in first]
