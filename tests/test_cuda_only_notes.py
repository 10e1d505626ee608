"""Findings that block nothing are notes (severity "info"), through the real CLI: code that
only runs where CUDA is (a test skipped off CUDA, an ``if x.is_cuda:`` arm, NCCL's arm) and
PT801's speed notes are listed "For information", never counted as needing a human, and
``--check`` does not fail on them; a device split's CPU arm (PT602) stays a finding."""

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from porter.cli.app import cli
from test_cli import make_tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gauntlet  # noqa: E402

GPU_TEST = '''\
import unittest

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.testing._internal.common_distributed import skip_if_lt_x_gpu


@unittest.skipIf(not torch.cuda.is_available(), "Skip when CUDA is not available")
class ShampooHSDPTest(unittest.TestCase):
    @skip_if_lt_x_gpu(4)
    def test_mesh(self):
        mesh = init_device_mesh("cuda", (2, 2))
        self.assertEqual(mesh.device_type, "cuda")
'''

SOAP = '''\
import torch


def eigenbasis(mat):
    _, q = torch.linalg.eigh(mat + 1e-30 * torch.eye(mat.size(0), device=mat.device))
    return q
'''

PCA = '''\
import torch


class PCA:
    def apply(self, x):
        if x.is_cuda:
            x -= torch.cuda.FloatTensor(self.mean)
        else:
            x -= torch.FloatTensor(self.mean)
        return x
'''

NEEDS_HUMAN = "import torch\nuse_cuda = not args.no_cuda and torch.cuda.is_available()\n"


def porter(*args):
    result = CliRunner().invoke(cli, [*map(str, args), "-j", "1"])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code


def findings(report: Path) -> dict:
    data = json.loads(report.read_text())
    return {(entry["path"], item["code"]): item for entry in data["files"] for item in entry["findings"]}


def test_a_gpu_test_and_a_speed_note_are_notes_and_check_passes(tmp_path):
    root = make_tree(tmp_path / "repo", {"tests/hsdp_test.py": GPU_TEST, "soap.py": SOAP})
    report = tmp_path / "r.json"
    # the mesh's literal device type is ported (PT004); what is left are notes
    assert porter("migrate", root, "--write") == 0
    assert porter("migrate", root, "--check", "--report", report) == 0
    found = findings(report)
    guard = found[("tests/hsdp_test.py", "PT202")]
    # the skip's own check: in test code, a note of PT202's own
    assert guard["severity"] == "info" and "in test code, where it gates a test's CUDA case" in guard["message"]
    assert found[("soap.py", "PT801")]["severity"] == "info"
    assert ("tests/hsdp_test.py", "PT999") not in found  # the mesh's "cuda" is guarded by the test's skip
    data = json.loads(report.read_text())
    assert data["summary"]["findings"] == 0 and data["summary"]["notes"] == 2
    assert gauntlet.review_findings(data) == []  # the gauntlet counts only what needs a human
    markdown = tmp_path / "r.md"
    porter("migrate", root, "--check", "--report", markdown)
    text = markdown.read_text()
    assert "## Needs a human (0)" in text and "For information (2;" in text


def test_a_device_split_stays_a_finding_and_a_real_one_still_fails_check(tmp_path):
    root = make_tree(tmp_path / "repo", {"pca.py": PCA, "train.py": NEEDS_HUMAN})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    found = findings(report)
    assert "severity" not in found[("pca.py", "PT602")]  # on MPS the CPU arm runs: a human must look
    assert "severity" not in found[("train.py", "PT202")]
    data = json.loads(report.read_text())
    assert data["summary"]["findings"] == 2 and len(gauntlet.review_findings(data)) == 2


def test_write_then_check_is_clean_with_notes(tmp_path):
    root = make_tree(tmp_path / "repo", {"tests/hsdp_test.py": GPU_TEST, "soap.py": SOAP})
    assert porter("migrate", root, "--write") == 0
    assert porter("migrate", root, "--check") == 0


BUFFER = '''\
import numpy as np
import torch


class ReplayBuffer:
    def __init__(self, capacity, obs_shape, device):
        self.obs = np.zeros((capacity,) + obs_shape, dtype=np.uint8)
        self.device = device

    def sample(self, idx):
        return torch.from_numpy(self.obs[idx]).to(self.device)


def latent(seed, device):
    z = np.random.RandomState(seed).randn(1, 512)
    return torch.from_numpy(z).to(device)
'''

MULTIGPU = '''\
import torch

device = torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() and args.cuda else "cpu")
'''


def test_a_known_dtype_is_no_finding_and_a_cpu_fallback_is_a_note(tmp_path):
    root = make_tree(tmp_path / "repo", {"buffer.py": BUFFER, "multigpu.py": MULTIGPU})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    data = json.loads(report.read_text())
    items = [(entry["path"], item["line"], item["code"], item.get("severity", ""))
             for entry in data["files"] for item in entry["findings"]]
    moved = [(entry["path"], item["line"], item["code"], item["after"])
             for entry in data["files"] for item in entry["rewrites"]]
    # RandomState.randn: float64, moved by the runtime (float32 only on MPS)
    assert ("buffer.py", 16, "PT605", "porter_runtime.to_device(torch.from_numpy(z), device=device)") in moved
    assert not any(path == "buffer.py" and code == "PT605" for path, _, code, _ in items)
    assert not any(path == "buffer.py" and line == 11 for path, line, _, _ in items)  # uint8
    assert ("multigpu.py", 3, "PT202", "info") in items


TRAIN_LOOP = '''\
import torch as th


class TrainLoop:
    def __init__(self, model):
        self.model = model
        self.sync_cuda = th.cuda.is_available()
'''


def test_a_flag_read_nowhere_in_the_tree_is_a_note_and_one_read_elsewhere_a_finding(tmp_path):
    alone = make_tree(tmp_path / "alone", {"train_util.py": TRAIN_LOOP, "run.py": "loop = 1\n"})
    read = make_tree(tmp_path / "read", {"train_util.py": TRAIN_LOOP,
                                         "run.py": "def step(loop):\n    return loop.sync_cuda\n"})
    for root, severity in ((alone, "info"), (read, "")):
        report = tmp_path / f"{root.name}.json"
        porter("migrate", root, "--check", "--report", report)
        assert findings(report)[("train_util.py", "PT202")].get("severity", "") == severity


METRICS = '''\
import torch


def calc_metric(metric, opts):
    results = metric(opts)
    for key, value in list(results.items()):
        if opts.num_gpus > 1:
            value = torch.as_tensor(value, dtype=torch.float64, device=opts.device)
            torch.distributed.broadcast(tensor=value, src=0)
            value = float(value.cpu())
        results[key] = value
    return results


def probe(values, opts):
    if opts.num_gpus == 1:
        return torch.as_tensor(values, dtype=torch.float64, device=opts.device)
    return None
'''


def test_code_run_only_with_several_gpus_is_a_note_and_a_one_gpu_arm_a_finding(tmp_path):
    root = make_tree(tmp_path / "repo", {"metrics.py": METRICS})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    data = json.loads(report.read_text())
    items = {(item["line"], item["code"]): item for entry in data["files"] for item in entry["findings"]}
    assert items[(8, "PT607")]["severity"] == "info" and "several GPUs, line 7" in items[(8, "PT607")]["message"]
    assert "severity" not in items[(17, "PT607")]  # one GPU: what a Mac runs


BACKENDS = '''\
import numpy as np
import torch


def load_backend(w, device, engine, onnx):
    if engine:  # TensorRT
        import tensorrt as trt

        if device.type == "cpu":
            device = torch.device("cuda:0")
        shape = (1, 3, 640, 640)
        bias = torch.from_numpy(np.zeros(3)).to(w)
        return torch.from_numpy(np.zeros(shape)).to(device) + bias
    if onnx:
        import onnxruntime

        session = onnxruntime.InferenceSession(w)
        return torch.from_numpy(np.empty((1, 3, 640, 640))).to(device)
    return None
'''


@pytest.mark.parametrize("package", ["pycuda.autoinit", "tensorrt as trt"])
def test_code_after_an_unported_cuda_only_import_in_a_branch_is_notes(tmp_path, package):
    root = make_tree(tmp_path / "repo", {"backends.py": BACKENDS.replace("tensorrt as trt", package)})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    data = json.loads(report.read_text())
    items = {(item["line"], item["code"]): item for entry in data["files"] for item in entry["findings"]}
    if package.startswith("pycuda"):
        assert "severity" not in items[(7, "TP603")]  # the import: what a human must see
    else:  # TensorRT in a function: an NVIDIA deployment target, CUDA-only by design (yolov5's backends)
        assert items[(7, "TP603")]["severity"] == "info" and "NVIDIA deployment target" in items[(7, "TP603")]["message"]
    # float64 moved to the device: the runtime's move, exact on CUDA (TensorRT's branch too), float32 on MPS
    moved = {item["line"]: item["after"] for entry in data["files"] for item in entry["rewrites"]
             if item["code"] == "PT605"}
    assert moved == {13: "porter_runtime.to_device(torch.from_numpy(np.zeros(shape)), device=device)",
                     18: "porter_runtime.to_device(torch.from_numpy(np.empty((1, 3, 640, 640))), device=device)"}
    tail = items[(12, "PT605")]  # a move porter leaves for a human, but only ever run after TensorRT's import
    assert tail["severity"] == "info" and "a CUDA-only import porter left as is, line 7" in tail["message"]


def test_a_setting_many_configs_repeat_is_one_finding(tmp_path):
    """torchtune: 196 recipe configs set `device: cuda`, and the fix is one change in the
    code that reads the key. The first config's finding stands for the others and counts
    them; each other one is a note; a different value (`cuda:1`) is its own finding."""
    configs = {f"recipes/configs/llama3_2/{size}_full.yaml": "model: llama3_2\ndevice: cuda\ndtype: bf16\n"
               for size in ("1B", "3B", "8B")}
    configs["recipes/configs/eval.yaml"] = "device: cuda:1\n"
    root = make_tree(tmp_path / "repo", {**configs, "train.py": "import json\nimport sys\n\n"
                                         "cfg = open(sys.argv[1]).read()\nprint(cfg)\n"})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    found = {(entry["path"], item["code"]): item for entry in json.loads(report.read_text())["files"]
             for item in entry["findings"]}
    first = found[("recipes/configs/llama3_2/1B_full.yaml", "PT701")]
    assert "severity" not in first and "(and in 2 more files: one change where the code reads it" in first["message"]
    for size in ("3B", "8B"):
        other = found[(f"recipes/configs/llama3_2/{size}_full.yaml", "PT701")]
        assert other["severity"] == "info"
        assert "the same setting as in recipes/configs/llama3_2/1B_full.yaml" in other["message"]
    assert "severity" not in found[("recipes/configs/eval.yaml", "PT701")]
    data = json.loads(report.read_text())
    assert len(gauntlet.review_findings(data)) == 2


MARKED_TESTS = '''\
import pytest
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


@pytest.mark.gpu
@pytest.mark.parametrize("dim", [8])
def test_fused_loss(dim):
    major, _ = torch.cuda.get_device_capability()
    x = torch.randn(2, dim).cuda()
    assert x.is_cuda and major >= 8


@pytest.mark.gpu
class TestSharded:
    def test_generate(self, model):
        return FSDP(model, device_id=torch.cuda.current_device())


def test_on_any_device():
    x = torch.randn(2, 8).cuda()
    assert x.is_cuda
'''.replace("    assert x.is_cuda\n", "    assert x.sum() != 0\n", 2)


def test_a_test_the_project_marks_as_a_gpu_test_is_notes(tmp_path):
    """llm-foundry (blind round 11): ``@pytest.mark.gpu`` tests, which its pytest config
    deselects (``addopts = "-m 'not gpu'"``), as OLMo's do, were four false findings. The
    marked test's CUDA assertion is a note, not a finding; rewrites are made, as in any test
    skipped off CUDA, and the unmarked test's CUDA assertion is still a finding."""
    root = make_tree(tmp_path / "repo", {"tests/test_model.py": MARKED_TESTS})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--write") == 0
    assert porter("migrate", root, "--check", "--report", report) == 0
    data = json.loads(report.read_text())
    assert gauntlet.review_findings(data) == [] and data["summary"]["notes"] >= 1
    unmarked = make_tree(tmp_path / "unmarked", {"tests/test_model.py": MARKED_TESTS.replace("@pytest.mark.gpu\n", "")})
    assert porter("migrate", unmarked, "--check", "--report", report) == 1
    found = [(f["code"], f["line"]) for f in gauntlet.review_findings(json.loads(report.read_text()))]
    assert ("PT910", 10) in found and not any(line > 18 for _, line in found), found


def test_a_cpu_fallback_through_a_star_imported_torch_is_no_finding(tmp_path):
    """Grounded-SAM's grounded_fast_sam.py (blind round 11, false): no ``import torch`` of its
    own, torch through ``from FastSAM.tools import *``, and a device that already falls back
    to the CPU. Its ``"cuda"`` is in the arm of ``torch.cuda.is_available()``: guarded."""
    root = make_tree(tmp_path / "repo", {
        "tools.py": "import torch\n\n\ndef load(path, device):\n    return torch.zeros(2, device=device)\n",
        "demo.py": "import argparse\n\nfrom tools import *\n\n\ndef parse_args():\n"
                   "    parser = argparse.ArgumentParser()\n"
                   '    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n'
                   '    parser.add_argument("--device", type=str, default=device)\n'
                   "    return parser.parse_args()\n\n\nprint(load('x', parse_args().device).device)\n",
    })
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 0
    data = json.loads(report.read_text())
    assert gauntlet.review_findings(data) == []
    assert data["ledger"]["counts"]["unaccounted"] == 0 and data["ledger"]["counts"]["guarded"] == 1


FA3 = '''\
import torch
from flash_attn import flash_attn_func as flash_attn_func_v2

try:
    from flash_attn_interface import flash_attn_func as flash_attn_func_v3

    SUPPORT_FA3 = True
except:
    SUPPORT_FA3 = False


def flash_attn_func(q, k, v):
    if SUPPORT_FA3:
        return flash_attn_func_v3(q, k, v)[0]
    return flash_attn_func_v2(q, k, v)


print(flash_attn_func(*(torch.randn(1, 4, 2, 8) for _ in range(3))).shape)
'''


def test_code_under_a_flag_its_own_try_import_sets_is_a_note_and_the_port_runs(tmp_path):
    """Open-Sora's mmdit/math.py (blind round 14): FlashAttention-3's call runs only under
    `if SUPPORT_FA3:`, a flag the failed `try` import leaves False off CUDA, where the FA2
    call beside it is ported. The FA3 finding is a note; the port runs on the CPU."""
    root = make_tree(tmp_path / "repo", {"mmdit_math.py": FA3})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--write") == 0
    assert porter("migrate", root, "--check", "--report", report) == 0
    fa3 = findings(report)[("mmdit_math.py", "TP101")]
    assert fa3["severity"] == "info" and "its CUDA-only import succeeded, line 14" in fa3["message"]
    import subprocess
    done = subprocess.run([sys.executable, str(root / "mmdit_math.py")], capture_output=True, text=True, cwd=root,
                          env={"PATH": "/usr/bin:/bin", "PORTER_QUIET": "1", "CUDA_VISIBLE_DEVICES": ""}, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "torch.Size([1, 4, 2, 8])", done.stderr
