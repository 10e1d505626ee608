"""PT202 on a check that only keeps a question about CUDA's own device from being asked
without CUDA (``not torch.cuda.is_available() or torch.cuda.is_bf16_supported()``): a note
through the real CLI, left as written by ``--write``; the same shape around anything else
stays a finding."""

import json
import sys
from pathlib import Path

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
