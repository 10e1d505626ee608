"""The xFormers family through the real CLI, on the xformers_vit fixture (a DINOv2-style
ViT package): the availability flag a branch still stops on, the helpers beside
`memory_efficient_attention`, a `try` whose handler raises in a file that only builds a
bias, an import inside `forward`, and a `try` whose handler is a PyTorch fallback.

Without xFormers (this machine, like a Mac) the original stops at import ("xFormers is
required for training"); ported, it trains on the CPU through the runtime's twins with
nothing left for a human. With CUDA simulated, the flags keep the original's value
(False where xFormers is missing), so the CUDA path is the original one.
"""

import importlib.util
import json
import shutil
import subprocess

import pytest

from porter_test_utils import FIXTURES, python_without_porter, run_porter

REPO = FIXTURES / "repos" / "xformers_vit"

pytestmark = pytest.mark.skipif(importlib.util.find_spec("xformers") is not None,
                                reason="xFormers is installed here: the twins' PyTorch path is not taken")


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("xformers_vit")
    original, port = base / "original", base / "port"
    shutil.copytree(REPO, original)
    shutil.copytree(REPO, port)
    done = run_porter("migrate", port, "--write", "--output-format", "json")
    assert done.returncode in (0, 1), done.stderr.decode()
    return original, port, json.loads(done.stdout)


def _train(tree):
    return subprocess.run(python_without_porter("train.py"), cwd=tree, capture_output=True, text=True,
                          timeout=300, env={"PORTER_QUIET": "1", "PATH": "/usr/bin:/bin"})


def test_the_original_stops_and_the_port_trains_on_the_cpu(trees):
    original, port, _ = trees
    before = _train(original)
    assert before.returncode != 0 and "xFormers is required for training" in before.stderr
    after = _train(port)
    assert after.returncode == 0, after.stderr[-2000:]
    assert "step 1 loss" in after.stdout


def test_nothing_is_left_for_a_human_and_each_change_is_said(trees):
    _, port, report = trees
    findings = [(file["path"], f["code"], f["action"]) for file in report["files"] for f in file["findings"]]
    assert [f for f in findings if f[2] != "note"] == []
    rewrites = [(file["path"], f["code"]) for file in report["files"] for f in file["rewrites"]]
    assert sorted(p for p, code in rewrites if code == "TP204") == [  # unbind, scaled_index_add, index_select_cat
        "vit/heads.py", "vit/layers/attention.py", "vit/layers/block.py", "vit/layers/block.py"]
    assert ("vit/layers/attention.py", "TP201") in rewrites and ("train.py", "TP201") in rewrites
    attention = (port / "vit" / "layers" / "attention.py").read_text()
    assert 'XFORMERS_AVAILABLE = porter_runtime.twins_stand_in("xformers")' in attention
    assert "XFORMERS_AVAILABLE = True" in attention  # the try stays: it still says what ran
    block = (port / "vit" / "layers" / "block.py").read_text()
    assert "xFormers is required for using nested tensors" not in block  # the stop on its own flag goes
    train = (port / "train.py").read_text()
    assert "xFormers is required for training" not in train and "from xformers" not in train
    head = (port / "vit" / "heads.py").read_text()
    assert "from xformers" not in head and "def forward(self, x: Tensor) -> Tensor:\n        B, N, C" in head
    assert (port / "vit" / "loss.py").read_text() == (REPO / "vit" / "loss.py").read_text()  # a real fallback


def test_check_after_write_is_clean_and_a_second_write_changes_nothing(trees):
    _, port, _ = trees
    check = run_porter("migrate", port, "--check")
    assert check.returncode == 0, check.stdout.decode()[-2000:]
    before = {p: p.read_bytes() for p in port.rglob("*.py")}
    again = run_porter("migrate", port, "--write")
    assert again.returncode == 0
    assert {p: p.read_bytes() for p in port.rglob("*.py")} == before


SIMULATED_CUDA = """
import warnings
import torch
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
warnings.simplefilter("ignore")
import vit.layers.attention as attention, vit.layers.block as block
print(attention.XFORMERS_AVAILABLE, block.XFORMERS_AVAILABLE)
x = torch.randn(2, 5, 32)
print(tuple(attention.MemEffAttention(32)(x).shape))  # no bias: the original's own PyTorch path
"""


def test_with_cuda_simulated_the_flags_keep_the_originals_values(trees):
    original, port, _ = trees
    outputs = []
    for tree in (original, port):
        (tree / "simulated_cuda.py").write_text(SIMULATED_CUDA)
        done = subprocess.run(python_without_porter("simulated_cuda.py"), cwd=tree, capture_output=True,
                              text=True, timeout=300, env={"PORTER_QUIET": "1", "PATH": "/usr/bin:/bin"})
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] == "False False\n(2, 5, 32)\n"
