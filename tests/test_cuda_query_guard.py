"""PT202 on a check that only keeps a question about CUDA's own device from being asked
without CUDA (``not torch.cuda.is_available() or torch.cuda.is_bf16_supported()``): a note
through the real CLI, left as written by ``--write``; the same shape around anything else
stays a finding."""

import json
import runpy
import sys
from pathlib import Path

import torch

from click.testing import CliRunner

from porter.cli.app import cli
from test_cli import make_tree

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gauntlet  # noqa: E402

PRECISION = '''\
import torch


def get_default_supported_precision(training: bool, tpu: bool = False) -> str:
    if tpu:
        return "32-true"
    if not torch.cuda.is_available() or torch.cuda.is_bf16_supported():
        return "bf16-mixed" if training else "bf16-true"
    return "16-mixed" if training else "16-true"


use_tf32 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
'''

NOT_A_QUERY = '''\
import torch


def precision(args) -> str:
    if not torch.cuda.is_available() or args.fp32:
        return "32-true"
    return "16-mixed"
'''


def porter(*args):
    result = CliRunner().invoke(cli, [*map(str, args), "-j", "1"])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code


def test_a_shielded_cuda_query_is_a_note(tmp_path):
    root = make_tree(tmp_path / "repo", {"lit_gpt/utils.py": PRECISION})
    report = tmp_path / "r.json"
    porter("migrate", root, "--check", "--report", report)
    data = json.loads(report.read_text())
    notes = [f for e in data["files"] for f in e["findings"] if f["code"] == "PT202"]
    assert [f["line"] for f in notes] == [7, 12]
    assert all(f["severity"] == "info" and "question about CUDA's own device" in f["message"] for f in notes)
    assert gauntlet.review_findings(data) == []


def test_write_keeps_the_check_and_check_is_clean_after(tmp_path):
    root = make_tree(tmp_path / "repo", {"lit_gpt/utils.py": PRECISION})
    assert porter("migrate", root, "--write") == 0
    text = (root / "lit_gpt/utils.py").read_text()
    assert "if not torch.cuda.is_available() or porter_runtime.is_bf16_supported():" in text  # PT604's query
    assert "use_tf32 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8" in text
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 0  # the rewritten query still shields
    assert gauntlet.review_findings(json.loads(report.read_text())) == []


def test_the_same_shape_around_a_flag_stays_a_finding(tmp_path):
    root = make_tree(tmp_path / "repo", {"train.py": NOT_A_QUERY})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    data = json.loads(report.read_text())
    assert [(f["code"], f["line"]) for f in gauntlet.review_findings(data)] == [("PT202", 5)]


ATTEND = '''\
import torch
from torch import nn


class Attend(nn.Module):
    def __init__(self, flash=False):
        super().__init__()
        self.flash = flash
        self.cuda_config = None

        if not torch.cuda.is_available() or not flash:
            return

        device_properties = torch.cuda.get_device_properties(torch.device("cuda"))
        if device_properties.major >= 8:
            self.cuda_config = "flash"
        else:
            self.cuda_config = "math"


def pick(flash):
    if not torch.cuda.is_available():
        return "cpu"
    props = torch.cuda.get_device_properties(0)
    return "flash" if flash and props.major >= 8 else "cuda"
'''


def test_an_early_exit_before_a_cuda_query_is_a_note_and_a_returned_choice_a_finding(tmp_path):
    # denoising-diffusion-pytorch's Attend: without CUDA __init__ ends where the CPU's does
    root = make_tree(tmp_path / "repo", {"attend.py": ATTEND})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    data = json.loads(report.read_text())
    pt202 = {f["line"]: f for e in data["files"] for f in e["findings"] if f["code"] == "PT202"}
    assert pt202[11]["severity"] == "info" and "question about CUDA's own device" in pt202[11]["message"]
    assert [(f["code"], f["line"]) for f in gauntlet.review_findings(data)] == [("PT202", 22)]
    assert porter("migrate", root, "--write") == 0
    assert "if not torch.cuda.is_available() or not flash:" in (root / "attend.py").read_text()


def test_an_availability_exit_around_a_block_is_no_shield_and_no_crash(tmp_path):
    root = make_tree(tmp_path / "repo", {"train.py": '''\
import torch


def setup(args):
    if not torch.cuda.is_available():
        for name in args.gpu_only:
            print(name)
    n = torch.cuda.device_count()
    if not torch.cuda.is_available(): return
    return torch.cuda.get_device_name(0), n
'''})
    report = tmp_path / "r.json"
    porter("migrate", root, "--check", "--report", report)
    data = json.loads(report.read_text())
    assert [e["status"] for e in data["files"]] != ["error"]
    pt202 = {f["line"]: f.get("severity", "") for e in data["files"] for f in e["findings"] if f["code"] == "PT202"}
    assert pt202[9] == "info" and pt202.get(5) != "info"


GPU_COUNT_SKIP = '''\
import pytest
import torch


@pytest.mark.parametrize(
    "tp_size",
    [
        pytest.param(
            2,
            marks=pytest.mark.skipif(
                not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                reason="requires >= 2 GPUs",
            ),
        ),
    ],
)
def test_tensor_parallel(tp_size):
    assert tp_size == 2
'''


def test_a_ported_count_still_shields_on_the_second_run(tmp_path):
    """Liger-Kernel's megatron test (blind round 10): the count PT104 ports is still a
    question about CUDA's devices, so the check stays a note and `--check` is clean after `--write`."""
    root = make_tree(tmp_path / "repo", {"test/test_tp.py": GPU_COUNT_SKIP})
    assert porter("migrate", root, "--write") == 0
    assert "not torch.cuda.is_available() or porter_runtime.device_count() < 2" in (root / "test/test_tp.py").read_text()
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 0
    assert gauntlet.review_findings(json.loads(report.read_text())) == []


EARLY_EXIT_ON_COUNT = '''\
import torch


def casting_devices(model):
    if torch.cuda.device_count() == 0:
        return [None]
    devices = ["cpu", "cuda:0"]
    if torch.cuda.device_count() > 1:
        devices.append(f"cuda:{torch.cuda.device_count() - 1}")
    return [None] + [d for d in devices if d != str(model.device)]
'''


def test_a_count_compared_with_zero_is_a_test_for_cuda_and_stays(tmp_path):
    """detectron2's tests/test_export_torchscript.py (blind round 9): ported, the count of 1
    off CUDA ran the CUDA cases on a Mac, and a second run found their "cuda:..." unported."""
    root = make_tree(tmp_path / "repo", {"tests/test_export.py": EARLY_EXIT_ON_COUNT})
    porter("migrate", root, "--write")
    assert (root / "tests/test_export.py").read_text() == EARLY_EXIT_ON_COUNT
    assert porter("migrate", root, "--check") == 0
    ported = runpy.run_path(str(root / "tests/test_export.py"))
    assert ported["casting_devices"](torch.nn.Linear(2, 2)) == [None]  # without CUDA, as the original


SEVERAL_GPU_TEST = '''\
import unittest

import torch


@unittest.skipUnless(torch.cuda.device_count() >= 2, "requires two CUDA devices")
class TestShardedMuon(unittest.TestCase):
    @property
    def device_type(self):
        return "cuda"

    def test_world(self):
        self.assertEqual(torch.device(self.device_type).type, "cuda")
'''


def test_a_ported_several_gpu_skip_still_skips_on_the_second_run(tmp_path):
    """torchtitan's flex_shard tests: `skipUnless(device_count() >= 2)` guards "cuda"; once PT104
    ports the count (1 off CUDA: still skipped on a Mac), the second run still reads it as a gate."""
    root = make_tree(tmp_path / "repo", {"tests/test_dist_muon.py": SEVERAL_GPU_TEST})
    assert porter("migrate", root, "--write") == 0
    assert "porter_runtime.device_count() >= 2" in (root / "tests/test_dist_muon.py").read_text()
    assert porter("migrate", root, "--check") == 0
