"""One finding per construct, through the real CLI: a device split (PT602) under an
availability guard porter left as is shares that guard's finding (PT202), so one of the
two is a note; a ``torch.load(**kwargs)`` wrapper whose every caller passes
``map_location`` is a note (PT601). ``--check`` right after ``--write`` passes."""

import json

from click.testing import CliRunner

from porter.cli.app import cli
from test_cli import make_tree

FLAG = '''\
import torch

cuda = torch.cuda.is_available()
generator = Generator()
if cuda:
    generator = generator.cuda()

Tensor = torch.cuda.FloatTensor if cuda else torch.Tensor
valid = Tensor(imgs.size(0), 1).fill_(1.0)
'''

INLINE = '''\
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
generator = Generator().to(device)
Tensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.Tensor
valid = Tensor(imgs.size(0), 1).fill_(1.0)
'''

DIST_UTIL = '''\
import io

import torch as th


def load_state_dict(path, **kwargs):
    with open(path, "rb") as f:
        data = f.read()
    return th.load(io.BytesIO(data), **kwargs)
'''

CALLERS = '''\
from guided import dist_util


def resume(model, path):
    model.load_state_dict(dist_util.load_state_dict(path, map_location="cpu"))
    opt = dist_util.load_state_dict(
        path + ".opt", map_location=dist_util.dev()
    )
    return opt
'''


def porter(*args):
    result = CliRunner().invoke(cli, [*map(str, args), "-j", "1"])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code


def items(report):
    data = json.loads(report.read_text())
    return {(entry["path"], item["line"], item["code"]): item.get("severity", "")
            for entry in data["files"] for item in entry["findings"]}


def test_a_split_under_a_flag_left_as_is_is_a_note_and_on_the_guards_line_the_guard_is(tmp_path):
    root = make_tree(tmp_path / "repo", {"cyclegan.py": FLAG, "esrgan.py": INLINE})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    found = items(report)
    assert found[("cyclegan.py", 3, "PT202")] == ""  # the flag: port it and its uses follow
    assert found[("cyclegan.py", 8, "PT602")] == "info"
    # inline, the type is ported (porter_runtime.legacy_tensor_type) and so is its guard:
    # on a Mac the split now picks the stand-in, which builds on the device; nothing is left
    assert ("esrgan.py", 5, "PT602") not in found and ("esrgan.py", 5, "PT202") not in found


def test_a_split_under_a_flag_kept_for_its_legacy_types_stays_a_finding(tmp_path):
    # PyTorch-GAN's bicyclegan form: PT202 keeps this flag (admitting MPS would pick
    # torch.cuda.FloatTensor on a Mac) and says so on its line; the split that reads it
    # is where the fix goes (build tensors on the runtime's device), so both stay findings.
    kept = FLAG.replace("cuda = torch.cuda.is_available()", "cuda = True if torch.cuda.is_available() else False")
    root = make_tree(tmp_path / "repo", {"bicyclegan.py": kept})
    report = tmp_path / "r.json"
    porter("migrate", root, "--check", "--report", report)
    found = items(report)
    assert found[("bicyclegan.py", 3, "PT202")] == ""
    # the split's CUDA arm is ported (legacy_tensor_type, the type itself on CUDA): the flag
    # is what is left to act on
    assert ("bicyclegan.py", 8, "PT602") not in found


def test_a_load_wrapper_every_caller_maps_is_a_note_and_one_unmapped_call_keeps_it(tmp_path):
    mapped = make_tree(tmp_path / "mapped", {"guided/dist_util.py": DIST_UTIL, "guided/train_util.py": CALLERS})
    unmapped = make_tree(tmp_path / "unmapped", {"guided/dist_util.py": DIST_UTIL, "guided/train_util.py": CALLERS,
                                                 "sample.py": "from guided import dist_util\n"
                                                              "state = dist_util.load_state_dict(path)\n"})
    report = tmp_path / "mapped.json"
    porter("migrate", mapped, "--check", "--report", report)
    assert items(report)[("guided/dist_util.py", 9, "PT601")] == "info"
    # one call without a location: the wrapper's `**kwargs` gets the runtime's location first
    # (a caller's own still wins), a rewrite rather than a finding (InternLM, blind round 18)
    report = tmp_path / "unmapped.json"
    porter("migrate", unmapped, "--check", "--report", report)
    assert ("guided/dist_util.py", 9, "PT601") not in items(report)
    rewrites = [r for e in json.loads(report.read_text())["files"] if e["path"] == "guided/dist_util.py"
                for r in e["rewrites"] if r["code"] == "PT601"]
    assert [r["line"] for r in rewrites] == [9]


def test_write_then_check_is_clean(tmp_path):
    root = make_tree(tmp_path / "repo", {"cyclegan.py": FLAG, "esrgan.py": INLINE,
                                         "guided/dist_util.py": DIST_UTIL, "guided/train_util.py": CALLERS})
    porter("migrate", root, "--write")
    before = {p: p.read_bytes() for p in root.rglob("*.py")}
    assert porter("migrate", root, "--check") in (0, 1)
    report = tmp_path / "r.json"
    porter("migrate", root, "--write", "--report", report)
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == before  # idempotent
    data = json.loads(report.read_text())
    assert not any(entry.get("status") == "changed" for entry in data["files"])


TRITON_OPS = '''\
import torch

try:
    import triton
    import triton.language as tl
except ImportError:
    raise RuntimeError("triton import failed; try `pip install --pre triton`")


@triton.jit
def dtw_kernel(cost, trace, x, x_stride, cost_stride, trace_stride, N, M, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.store(cost + offsets, tl.load(x + offsets))
'''

TIMING = '''\
import torch


def dtw_cuda(x, BLOCK_SIZE=1024):
    from .triton_ops import dtw_kernel

    dtw_kernel[(1,)](x, x, x, 0, 0, 0, 1, 1, BLOCK_SIZE=BLOCK_SIZE)
    return x


def dtw(x):
    if x.is_cuda:
        try:
            return dtw_cuda(x)
        except RuntimeError:
            pass
    return x.cpu().numpy()
'''

TIMING_TEST = '''\
import pytest
import torch

from whisper.timing import dtw_cuda


@pytest.mark.requires_cuda
def test_dtw_cuda_equivalence():
    assert dtw_cuda(torch.randn(3, 4).cuda()) is not None
'''


def test_a_module_imported_only_where_cuda_is_is_notes_and_one_import_elsewhere_keeps_findings(tmp_path):
    files = {"whisper/__init__.py": "", "whisper/triton_ops.py": TRITON_OPS, "whisper/timing.py": TIMING,
             "tests/test_timing.py": TIMING_TEST}
    gated = make_tree(tmp_path / "gated", files)
    eager = make_tree(tmp_path / "eager", {**files, "bench.py": "from whisper.timing import dtw_cuda\ndtw_cuda(x)\n"})
    for root, severity in ((gated, "info"), (eager, "")):
        report = tmp_path / f"{root.name}.json"
        porter("migrate", root, "--check", "--report", report)
        found = items(report)
        assert found[("whisper/triton_ops.py", 4, "TP603")] == severity
        assert found[("whisper/triton_ops.py", 11, "TP601")] == severity
    porter("migrate", gated, "--write")
    assert porter("migrate", gated, "--check") == 0


LINEAR_NAMES = '''\
import bitsandbytes as bnb
import torch


def find_all_linear_names(args, model):
    cls = bnb.nn.Linear4bit if args.bits == 4 else (bnb.nn.Linear8bitLt if args.bits == 8 else torch.nn.Linear)
    names = set()
    for name, module in model.named_modules():
        if isinstance(module, cls):
            names.add(name.split(".")[-1])
    return list(names)


def build(args):
    cls = bnb.nn.Linear4bit if args.bits == 4 else torch.nn.Linear
    return cls(64, 64)
'''


def test_a_bnb_class_only_tested_against_is_a_note_and_one_built_a_finding(tmp_path):
    root = make_tree(tmp_path / "repo", {"qlora.py": LINEAR_NAMES})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    found = items(report)
    assert found[("qlora.py", 6, "TP502")] == "info"
    assert found[("qlora.py", 15, "TP502")] == ""


VAL = '''\
import torch


def main(opt):
    opt.half = torch.cuda.is_available() and opt.device != "cpu"  # FP16 for fastest results
    use_cuda = torch.cuda.is_available() and opt.device != "cpu"
    return opt, use_cuda
'''


def test_a_half_precision_flag_set_only_on_cuda_is_a_note_and_a_device_flag_a_finding(tmp_path):
    root = make_tree(tmp_path / "repo", {"val.py": VAL})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    found = items(report)
    assert found[("val.py", 5, "PT202")] == "info"
    assert found[("val.py", 6, "PT202")] == ""


EXPORT = '''\
import torch


def simplify(model_onnx, f):
    cuda = torch.cuda.is_available()
    check_requirements(("onnxruntime-gpu" if cuda else "onnxruntime", "onnxslim"))
    return model_onnx


def paddle(w, device):
    cuda = torch.cuda.is_available() and device.type != "cpu"
    check_requirements("paddlepaddle-gpu" if cuda else "paddlepaddle>=3.0.0")
    if cuda:
        config.enable_use_gpu(memory_pool_init_size_mb=2048, device_id=0)
'''


def test_a_flag_that_only_picks_package_names_is_a_note_and_one_guarding_code_a_finding(tmp_path):
    root = make_tree(tmp_path / "repo", {"export.py": EXPORT})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    found = items(report)
    assert found[("export.py", 5, "PT202")] == "info"
    assert found[("export.py", 11, "PT202")] == ""


XFORMERS_MODEL = '''\
import math

import torch.nn as nn
from xformers.ops import SwiGLU


def init_weights(module, n_embd, n_layer):
    for name, p in module.named_parameters():
        if name == "w3.weight" and isinstance(module, SwiGLU):
            nn.init.normal_(p, mean=0.0, std=1 / math.sqrt(n_embd) / n_layer)


class LLaMAMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.swiglu = SwiGLU(config.n_embd, config.intermediate_size, bias=False)
'''


def test_an_xformers_class_only_tested_against_is_a_note_and_one_built_a_finding(tmp_path):
    root = make_tree(tmp_path / "repo", {"model.py": XFORMERS_MODEL})
    report = tmp_path / "r.json"
    assert porter("migrate", root, "--check", "--report", report) == 1
    found = items(report)
    assert found[("model.py", 9, "TP203")] == "info"
    assert found[("model.py", 16, "TP203")] == ""
