"""Findings in a module nothing of the tree runs are notes (porter.project.unreached).

The tree is laid out as HazyResearch/based is: a training script, the model it imports, and a
copy of a kernel library's ``ops`` package that nothing imports, beside modules that a
config, a notebook, a shell script and a dynamic import each reach. Each module imports
``pynvml`` in a function (CUDA-only: PT999 reports it), so every one of them has a finding, and only the
dead copies' become notes. The port is then run on the CPU.
"""

import json
import subprocess
import sys
from pathlib import Path

from porter.project.model import build
from test_cli import make_tree
from test_cuda_only_notes import porter

NVML = "\n\ndef gpu_count():\n    import pynvml\n    pynvml.nvmlInit()\n    return pynvml.nvmlDeviceGetCount()\n\n\n"

TREE = {
    "train.py": (
        "import torch\n"
        "from models.gpt import GPT\n"
        "from plugins import load\n\n\n"
        "def main():\n"
        "    model = GPT().cuda()\n"
        "    x = torch.randn(4, 8).cuda()\n"
        "    print(load('relu')(model(x)).shape)\n\n\n"
        'if __name__ == "__main__":\n'
        "    main()\n"
    ),
    "models/__init__.py": "",
    "models/gpt.py": (
        "import torch\n" + NVML + "from models.layers import Norm\n\n\n"
        "class GPT(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.norm = Norm(8)\n\n"
        "    def forward(self, x):\n"
        "        return self.norm(x)\n"
    ),
    "models/layers.py": NVML + "import torch\n\nNorm = torch.nn.LayerNorm\n",
    # a copy of a kernel library: nothing imports it, and its comment names its source
    "ops/__init__.py": "",
    "ops/fused_dense.py": "# Adapted from https://github.com/NVIDIA/apex/blob/master/apex/fused_dense/fused_dense.py\n"
                          + NVML + "import torch\n\n\ndef fused_dense(x, w):\n    return x @ w\n",
    "ops/rms_norm.py": NVML + "import torch\n\n\ndef rms_norm(x):\n    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))\n",
    # a Hydra config builds this one by its dotted name
    "ops/activations.py": NVML + "import torch\n\nGeLU = torch.nn.GELU\n",
    "configs/model.yaml": "act:\n  _target_: ops.activations.GeLU\nrms_norm: true\n",
    # a notebook imports this one
    "models/probe.py": NVML + "def probe(x):\n    return x\n",
    "notebooks/demo.ipynb": json.dumps({"cells": [{"cell_type": "code", "source": ["from models.probe import probe\n"]}],
                                        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}),
    # a shell script runs this one as a module
    "tools/convert.py": NVML + "def convert(path):\n    return path\n",
    "scripts/convert.sh": "python -m tools.convert --in ckpt.pt\n",
    # imported by name, from a string
    "plugins/__init__.py": "import importlib\n\n\ndef load(name):\n"
                           "    return getattr(importlib.import_module(f'plugins.{name}'), 'act')\n",
    "plugins/relu.py": NVML + "import torch\n\nact = torch.relu\n",
    # an mmdetection config, read by the config loader from the path another config names
    "configs/_base_/default_runtime.py": NVML + "dist_params = dict(backend='gloo')\n",
    "configs/detr/detr_r50.py": "_base_ = ['../_base_/default_runtime.py']\nlr = 1e-4\n",
}


def severities(report: Path) -> dict:
    data = json.loads(report.read_text())
    return {entry["path"]: {item.get("severity", "") for item in entry["findings"] if item["code"] == "PT999"}
            for entry in data["files"] if any(i["code"] == "PT999" for i in entry["findings"])}


def test_only_the_modules_nothing_reaches_are_unreached(tmp_path):
    root = make_tree(tmp_path / "repo", TREE)
    rels = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    model = build(root, rels, whole=True)
    # the leaf config is named only on a command line (`python tools/train.py configs/detr/detr_r50.py`):
    # unreached, and without findings; the base it names is reached
    assert model.unreached == {"ops/fused_dense.py", "ops/rms_norm.py", "configs/detr/detr_r50.py"}
    # a path inside the tree, or one file alone, can't tell what imports it
    assert build(root, rels, whole=False).unreached == frozenset()


def test_a_library_with_nothing_that_runs_reaches_everything(tmp_path):
    root = make_tree(tmp_path / "lib", {"pkg/__init__.py": "", "pkg/kernels.py": NVML, "pkg/norm.py": NVML})
    rels = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    assert build(root, rels, whole=True).unreached == frozenset()


def test_findings_in_a_dead_copy_are_notes_and_the_port_runs(tmp_path):
    root = make_tree(tmp_path / "repo", TREE)
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    found = severities(report)
    for dead in ("ops/fused_dense.py", "ops/rms_norm.py"):
        assert found[dead] == {"info"}, dead
    for live in ("models/gpt.py", "models/layers.py", "ops/activations.py", "models/probe.py", "tools/convert.py",
                 "plugins/relu.py", "configs/_base_/default_runtime.py"):
        assert found[live] == {""}, live
    notes = json.loads(report.read_text())["files"]
    message = next(i["message"] for e in notes if e["path"] == "ops/rms_norm.py" for i in e["findings"])
    assert "no script, test, notebook, config or module of the tree imports or runs this module" in message

    assert porter("migrate", root, "--write") == 0
    run = subprocess.run([sys.executable, "train.py"], cwd=root, capture_output=True, text=True,
                         env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "torch.Size([4, 8])"


def test_a_module_whose_name_is_not_utf8_is_read(tmp_path):
    """A file name in Latin-1 (``caf\\xe9.py``) that nothing imports: found by the property
    test of bad inputs, which the model's name search stopped with an internal error."""
    root = make_tree(tmp_path / "repo", {"train.py": "import torch\n\nprint(torch.ones(1))\n"})
    (root / "caf\udce9.py").write_bytes(b"import torch\n" + NVML.encode())
    assert porter("migrate", root, "--check") == 0  # no crash; the dead module's PT999 is a note, nothing else
    rels = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    assert build(root, rels, whole=True).unreached == {"caf\udce9.py"}


def test_a_vendored_copy_is_reached_only_from_outside_it(tmp_path):
    """H2O keeps forks of DeepSpeed and transformers under ``benchmark/third_party/`` and
    installs them for its baselines: the modules its scripts import are reached, and so is a
    script its own README runs; the copy's tests, benchmarks and setup.py, which its own
    README names, run for that project's developers only (blind round 17: all false)."""
    copy = "benchmark/third_party/DeepSpeed/"
    root = make_tree(tmp_path / "repo", {
        "benchmark/hf_opt.py": "import argparse\nimport deepspeed\n\nargparse.ArgumentParser().parse_args()\n",
        "benchmark/README.md": "Install the fork, then `python third_party/DeepSpeed/bin/ds_report.py`.\n",
        copy + "setup.py": "from setuptools import setup\n\nsetup(name='deepspeed')\n" + NVML,
        copy + "README.md": "Run `python benchmarks/gpt_bench.py` and `pytest tests/unit/test_zero.py`.\n",
        copy + "deepspeed/__init__.py": "from deepspeed.runtime import engine\n",
        copy + "deepspeed/runtime/__init__.py": "",
        copy + "deepspeed/runtime/engine.py": NVML,
        copy + "deepspeed/ops/sparse_attention.py": NVML,
        copy + "benchmarks/gpt_bench.py": "import argparse\n" + NVML + "argparse.ArgumentParser().parse_args()\n",
        copy + "tests/unit/test_zero.py": NVML + "def test_zero():\n    assert gpu_count() >= 0\n",
        copy + "bin/ds_report.py": "import sys\n" + NVML + "print(sys.argv)\n",
    })
    rels = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    unreached = build(root, rels, whole=True).unreached
    assert unreached == {copy + "setup.py", copy + "benchmarks/gpt_bench.py", copy + "tests/unit/test_zero.py",
                         copy + "deepspeed/ops/sparse_attention.py"}
    # the same files outside a third-party folder are the repository's own: each runs by itself
    plain = make_tree(tmp_path / "plain", {"train.py": "import argparse\n", "benchmarks/gpt_bench.py": "import argparse\n",
                                           "tests/test_zero.py": NVML, "ops/sparse_attention.py": NVML})
    rels = [p.relative_to(plain).as_posix() for p in plain.rglob("*") if p.is_file()]
    assert build(plain, rels, whole=True).unreached == {"ops/sparse_attention.py"}


def test_the_runtime_imports_a_write_adds_reach_nothing_new(tmp_path):
    """H2O (blind round 18's run): `--write` gave a test of the vendored DeepSpeed `from tests
    import porter_runtime`, which made `tests/__init__.py` and what it imports reached, so
    `--check` after `--write` named DeepSpeed's CUDA accelerator (3 new PT999). Porter's own
    runtime imports are not imports of the tree."""
    copy = "benchmark/third_party/DeepSpeed/"
    root = make_tree(tmp_path / "repo", {
        "benchmark/hf_opt.py": "import argparse\n\nargparse.ArgumentParser().parse_args()\n",
        "benchmark/README.md": "Check the fork: `pytest third_party/DeepSpeed/tests/test_zero.py`.\n",
        copy + "setup.py": "from setuptools import setup\n\nsetup(name='deepspeed')\n",
        copy + "tests/__init__.py": "from accelerator import cuda_accelerator\n",
        copy + "tests/test_zero.py": "import torch\n\n\ndef test_zero():\n    torch.cuda.synchronize()\n",
        copy + "accelerator/__init__.py": "",
        copy + "accelerator/cuda_accelerator.py": NVML,
    })

    def unreached():
        rels = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and "porter_runtime" not in p.parts
                and not p.name.startswith("porter_runtime")]
        return build(root, rels, whole=True).unreached

    before = unreached()
    assert copy + "accelerator/cuda_accelerator.py" in before
    assert porter("migrate", root, "--write") in (0, 1)
    assert "porter_runtime" in (root / copy / "tests/test_zero.py").read_text()
    assert unreached() == before
