"""The ledger (porter.project.touchpoints.ledger): every CUDA touchpoint in exactly one state, through the real CLI."""

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from textwrap import dedent

import pytest
from porter.rules import cuda_only_package

from porter.project import requirements
from porter.project.touchpoints import ledger
from porter.rulebase import cuda_packages
from porter.edits import unused_imports
from porter.engine.process import Options, process_file
from porter.engine.registry import all_rules
from porter.report.summary import build, ledger_line, to_markdown
from porter.engine.run import RunConfig, run

REPOS = Path(__file__).resolve().parent.parent / "fixtures" / "repos"


def porter_json(root: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "porter", "migrate", str(root), "--format", "json"],
                          capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return json.loads(proc.stdout)


def assert_adds_up(report: dict) -> Counter:
    data = report["ledger"]
    total: Counter = Counter()
    findings = {f["path"]: f["findings"] for f in report["files"]}
    for item in data["files"]:
        states = Counter(t["state"] for t in item["touchpoints"])
        assert set(states) <= set(ledger.STATES)
        assert sum(item["counts"].values()) == len(item["touchpoints"]) and states == +Counter(item["counts"])
        named = {(f["line"], f["column"]) for f in findings.get(item["path"], []) if f["code"] == ledger.CODE}
        for t in item["touchpoints"]:
            if t["state"] == "unaccounted":
                assert (t["line"], t["column"]) in named, f"{item['path']}:{t['line']} {t['what']} has no PT999"
            if t["state"] in ("rewritten", "reported"):
                assert t["detail"] in {r.code for r in all_rules()}
            if t["state"] == "guarded":
                assert t["detail"].startswith("line ")
        total += states
    assert +Counter(data["counts"]) == total
    pt999 = sum(1 for fs in findings.values() for f in fs if f["code"] == ledger.CODE)
    assert pt999 == data["counts"]["unaccounted"]
    return total


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in REPOS.iterdir() if p.is_dir()))
def test_the_ledger_adds_up_on_every_fixture_repo(name):
    total = assert_adds_up(porter_json(REPOS / name))
    assert sum(total.values()) > 0
    print(f"{name}: {dict(total)}")


def write(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, code in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dedent(code))
    return tmp_path


def touchpoints(root: Path, rules=None) -> dict[str, list[ledger.Touchpoint]]:
    result = run(RunConfig([root], root, Options(rules=list(all_rules()) if rules is None else rules)))
    return {f.path: f.ledger for f in result.files}, result


def test_an_unresolved_import_is_named_with_its_line(tmp_path):
    """An extension the repository's own build compiles, and not installed: a CUDA touchpoint."""
    root = write(tmp_path, {
        "layers.py": """\
            import torch
            import numpy as np
            import yaml

            from helpers import util
            import pointops
        """,
        "helpers.py": "util = 1\n",
        "requirements.txt": "PyYAML>=6\n",
        "lib/setup.py": """\
            from setuptools import setup
            from torch.utils.cpp_extension import BuildExtension, CUDAExtension

            setup(name="pointops", ext_modules=[CUDAExtension("pointops", ["src/pointops_api.cpp", "src/knn.cu"])],
                  cmdclass={"build_ext": BuildExtension})
        """,
    })
    found, result = touchpoints(root)
    [t] = found["layers.py"]
    assert (t.line, t.column, t.kind, t.state) == (6, 1, "unresolved-import", "unaccounted")
    [finding] = [f for f in next(f for f in result.files if f.path == "layers.py").findings if f.code == "PT999"]
    assert finding.line == 6 and "pointops" in finding.message and "ModuleNotFoundError" in finding.message
    assert "the repository's own build compiles" in finding.message
    assert "PyTorch implementation" in finding.suggestion


def test_an_extension_built_through_an_alias_of_cudaextension_is_named(tmp_path):
    """Deformable-DETR's models/ops/setup.py binds `extension = CUDAExtension` where CUDA is and
    calls `extension("MultiScaleDeformableAttention", ...)`: the import of that name fails off
    CUDA (a silent blocker at first contact, round 14), now named as the build's extension."""
    root = write(tmp_path, {
        "models/ops/functions/ms_deform_attn_func.py": "import torch\n\nimport MultiScaleDeformableAttention as MSDA\n",
        "models/ops/setup.py": """\
            import torch
            from setuptools import setup
            from torch.utils.cpp_extension import CUDA_HOME, CppExtension, CUDAExtension

            def get_extensions():
                extension = CppExtension
                if torch.cuda.is_available() and CUDA_HOME is not None:
                    extension = CUDAExtension
                return [extension("MultiScaleDeformableAttention", ["src/vision.cpp"])]

            setup(name="MultiScaleDeformableAttention", ext_modules=get_extensions())
        """,
    })
    found, _ = touchpoints(root)
    [t] = found["models/ops/functions/ms_deform_attn_func.py"]
    assert (t.line, t.state) == (3, "unaccounted") and "the repository's own build compiles" in t.detail


def test_an_undeclared_import_with_no_sign_of_cuda_is_no_finding(tmp_path):
    """Real repositories import pip packages their manifests forget (mpi4py, submitit,
    natsort): not installed here, but nothing says CUDA, so nothing for a human."""
    root = write(tmp_path, {
        "dist_util.py": """\
            import torch
            from mpi4py import MPI
            import submitit
            import fused_softmax_cuda
        """,
        "requirements.txt": "torch\n",
    })
    found, result = touchpoints(root)
    states = {t.what: (t.kind, t.state) for t in found["dist_util.py"]}
    assert states == {"import mpi4py": ("undeclared-import", "inert"), "import submitit": ("undeclared-import", "inert"),
                      "import fused_softmax_cuda": ("unresolved-import", "unaccounted")}
    mpi = next(t for t in found["dist_util.py"] if t.what == "import mpi4py")
    assert "not installed and not declared, with no sign of CUDA" in mpi.detail
    assert [f.message for f in result.files[0].findings if f.code == "PT999"] == [
        "CUDA touchpoint `import fused_softmax_cuda` that no rule ported or named: resolves to no module of the "
        "tree, the standard library or the declared dependencies (a compiled CUDA extension by its name): "
        "ModuleNotFoundError off CUDA"]


def test_a_local_module_shadows_the_table(tmp_path):
    root = write(tmp_path, {"adam_atan2.py": "class AdamATan2: pass\n", "train.py": "from adam_atan2 import AdamATan2\n"})
    found, _ = touchpoints(root)
    assert found["train.py"] == []


@pytest.mark.parametrize("code,state,detail", [
    ("import os\nv = os.environ['CUDA_VISIBLE_DEVICES']\n", "unaccounted", "KeyError"),
    ("import os\nv = os.environ.get('CUDA_VISIBLE_DEVICES', '')\n", "inert", "default"),
    ("import os\nos.environ['NCCL_DEBUG'] = 'INFO'\n", "inert", "sets"),
    ("import torch\ntorch.cuda.manual_seed_all(0)\n", "inert", "answers without CUDA"),
    ("import torch\ntry:\n    f()\nexcept torch.cuda.OutOfMemoryError:\n    pass\n", "inert", "answers"),
    ("print('cuda')\n", "inert", "message"),
    ("def f(d):\n    return d == 'cuda'\n", "inert", "compar"),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import flash_attn\n", "inert", "type checking"),
    ("import torch\nif torch.cuda.is_available():\n    name = torch.cuda.get_device_name()\n", "guarded", "line 2"),
    ("if is_pointops_available():\n    import pointops\n", "inert", "optional dependency"),
    ("def f():\n    if not has_pointops():\n        raise ImportError('pip install pointops')\n    import pointops\n",
     "inert", "checked first at line 2"),
    ("def f():\n    import pointops_cuda\n", "unaccounted", "ModuleNotFoundError"),
    ("def f():\n    import pointops\n", "inert", "no sign of CUDA"),
    ("m = DDP(model, device_ids=None)\n", "inert", "None"),
    ("m = DDP(model, device_ids=ids)\n", "unaccounted", "device_ids"),
    ("import porter_runtime\nm = DDP(model, device_ids=porter_runtime.ddp_device_ids(r))\n", "inert", "porter_runtime"),
    # porter's own output through a package's copy: a second pass finds nothing new (improved-diffusion)
    ("from pkg import porter_runtime\nm = DDP(model, device_ids=porter_runtime.ddp_device_ids(r))\n", "inert",
     "porter_runtime"),
    ("from . import porter_runtime\nd = porter_runtime.device(f'cuda:{r % 8}')\n", "inert",
     "porter_runtime.device"),
    ("import porter_runtime\nimport torch\nporter_runtime.set_default_tensor_type(torch.cuda.HalfTensor)\n", "inert",
     "handed to `porter_runtime.set_default_tensor_type`"),  # llama's generation.py, second pass
    # a name that picks a kernel, not a device: S4's backend, flash-linear-attention's conv_backend, StyleGAN's impl
    ("class SSMKernel:\n    def __init__(self, d, backend: str = 'cuda'):\n        self.backend = backend\n", "inert",
     "`backend` picks an implementation"),
    ("y = bias_act(x, b, impl='cuda')\n", "inert", "`impl` picks an implementation"),
    ("layer = Mamba2(d, conv_backend=\"cuda\")\n", "inert", "`conv_backend` picks"),
    ("def f(device: str = 'cuda'):\n    return device\n", "unaccounted", "names a CUDA device"),
    ("import torch.distributed as dist\ndist.init_process_group(backend='nccl')\n", "unaccounted", "NCCL"),
])
def test_states(tmp_path, code, state, detail):
    """The ledger's own judgement: no rule runs."""
    root = write(tmp_path, {"m.py": code})
    found, _ = touchpoints(root, rules=[])
    last = found["m.py"][-1]
    assert last.state == state and detail in last.detail, last


def test_rewritten_and_reported_carry_the_rule_code(tmp_path):
    root = write(tmp_path, {"m.py": """\
        import torch
        x = torch.zeros(2).cuda()
        torch.cuda.synchronize()
    """})
    found, _ = touchpoints(root)
    assert {(t.what, t.state, t.detail) for t in found["m.py"]} == {
        (".cuda()", "rewritten", "PT001"), ("torch.cuda.synchronize()", "rewritten", "PT101")}


def test_a_rewritten_parameter_default_is_rewritten_not_unaccounted(tmp_path):
    """PT005 rewrites ``device="cuda"`` from the parameter's name; the touchpoint is the
    string (latent-diffusion's encoders, minDiffusion's train functions)."""
    root = write(tmp_path, {"m.py": """\
        import torch

        class FrozenCLIPEmbedder(torch.nn.Module):
            def __init__(self, version="ViT-L/14", device="cuda", max_length=77):
                super().__init__()
                self.device = device

        def train(n_epoch: int = 100, *, device: str = "cuda:1") -> None:
            torch.zeros(n_epoch, device=device)
    """})
    found, _ = touchpoints(root)
    assert {(t.what, t.state, t.detail) for t in found["m.py"]} == {
        ("'cuda'", "rewritten", "PT005"), ("'cuda:1'", "rewritten", "PT005")}


def test_the_ledger_does_not_depend_on_the_rules_that_ran(tmp_path):
    """With no rule selected, the same touchpoints are found (and unaccounted)."""
    root = write(tmp_path, {"m.py": "import torch\nx = torch.zeros(2).cuda()\n"})
    path = root / "m.py"
    every = process_file(path, "m.py", Options(rules=list(all_rules())), None)
    none = process_file(path, "m.py", Options(rules=[]), None)
    assert [(t.line, t.kind) for t in every.ledger] == [(t.line, t.kind) for t in none.ledger]
    assert none.ledger[0].state == "unaccounted" and not none.findings  # PT999 not selected


def test_segments_and_whole_file_give_the_same_ledger(tmp_path, monkeypatch):
    path = REPOS / "imagenet_ddp" / "main.py"
    options = Options(rules=list(all_rules()))
    reduced = process_file(path, "main.py", options, None)
    monkeypatch.setenv("PORTER_SEGMENTS", "0")
    whole = process_file(path, "main.py", options, None)
    assert reduced.ledger == whole.ledger and reduced.ledger


def test_reports_show_the_ledger(tmp_path):
    root = write(tmp_path, {"m.py": "import torch\nimport knn_cuda_ext\nx = torch.zeros(2).cuda()\n"})
    _, result = touchpoints(root)
    report = build(result, "dry-run")
    assert report["schema_version"] == 1
    assert report["ledger"]["counts"] == {"rewritten": 1, "reported": 0, "guarded": 0, "inert": 0, "unaccounted": 1}
    assert "| `m.py` | 1 | 0 | 0 | 0 | 1 |" in to_markdown(report)
    assert ledger_line(report) == ("ledger: 2 CUDA touchpoints in the code: 1 rewritten, 0 under a finding or note, "
                                  "0 guarded, 0 inert, 1 unaccounted")


def test_one_table_of_cuda_only_packages():
    assert unused_imports.CUDA_ONLY_PACKAGES is cuda_packages.IMPORT_ROOTS
    assert requirements.CUDA_ONLY is cuda_packages.DISTRIBUTIONS
    assert cuda_only_package._PACKAGES["fused_dense_lib"] == cuda_packages.advice_for("fused_dense_lib")
    for module in ("flash_attn", "flash_attn_interface", "xformers.ops", "apex.normalization", "amp_C",
                   "fused_layer_norm_cuda", "bitsandbytes", "triton.language", "deepspeed", "mamba_ssm",
                   "causal_conv1d", "liger_kernel", "adam_atan2", "cuml", "cudf", "cupy", "pycuda.driver",
                   "tensorrt", "numba.cuda", "pynvml", "rotary_emb", "dropout_layer_norm", "flash_attn_2_cuda"):
        assert cuda_packages.is_cuda_only_module(module), module
    for module in ("numba", "torch", "onnxruntime", "flash_attention"):
        assert not cuda_packages.is_cuda_only_module(module), module
    assert requirements.is_cuda_only("cupy-cuda12x") and not requirements.is_cuda_only("nvidia-ml-py")


def test_a_backend_handed_to_the_repositorys_method_that_only_compares_it_is_inert(tmp_path):
    # distributed_shampoo's parallelism strategies and their unit test
    root = write(tmp_path, {
        "shampoo/__init__.py": "",
        "shampoo/parallelism.py": """\
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel as DDP


            class SingleGPUStrategy:
                def wrap_model(self, model, local_rank, backend, device_mesh=None):
                    return model


            class DDPStrategy:
                def wrap_model(self, model, local_rank, backend, device_mesh=None):
                    if backend == "nccl":
                        return DDP(model, device_ids=[local_rank], output_device=local_rank)
                    return DDP(model)


            class Launcher:
                def start(self, backend):
                    dist.init_process_group(backend=backend)
        """,
        "shampoo/tests/parallelism_test.py": """\
            import torch.nn as nn
            from shampoo.parallelism import DDPStrategy, Launcher, SingleGPUStrategy


            def test_wrap_model_returns_unwrapped_model():
                model = nn.Linear(10, 5)
                assert SingleGPUStrategy().wrap_model(model, 0, "nccl") is model
                DDPStrategy().wrap_model(model, 0, backend="nccl")


            def test_launcher():
                Launcher().start("nccl")
        """,
    })
    found, _ = touchpoints(root)
    strings = [(t.line, t.state, t.detail) for t in found["shampoo/tests/parallelism_test.py"] if t.kind == "string"]
    assert [(line, state) for line, state, _ in strings] == [(7, "inert"), (8, "inert"), (12, "unaccounted")]
    assert "only compares it or leaves it unused (each of its 2 definitions)" in strings[0][2]


def test_a_parameter_named_torch_is_the_callers_object_not_a_touchpoint(tmp_path):
    """``def f(torch): torch.cuda.synchronize()`` (the rules leave it: a shadowed name) was
    PT999 for the ledger; the module's own ``torch.cuda.synchronize()`` still is one."""
    import json

    from porter_test_utils import run_porter

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "m.py").write_text("import torch\n\n\ndef f(torch):\n    torch.cuda.synchronize()\n\n\n"
                                   "g = lambda torch: torch.cuda.synchronize()\n")
    (tmp_path / "n.py").write_text("import torch\n\n\ndef f(x):\n    torch.cuda.ipc_collect()\n")
    proc = run_porter("migrate", tmp_path, "--output-format", "json", "--select", "PT999")
    data = {f["path"]: f for f in json.loads(proc.stdout)["files"]}
    assert not data.get("m.py", {}).get("findings")
    assert [x["line"] for x in data["n.py"]["findings"]] == [5]


def test_an_import_the_port_removed_is_accounted_for_beside_one_it_kept(tmp_path):
    """MoBA (blind round 9): the port dropped ``from flash_attn import flash_attn_varlen_func``
    with its last use, but another import from the package stayed (flash-attn's private
    varlen forward, reported), so a text search for "from flash_attn" still found the
    package and the removed line was a PT999 that named nothing left in the port."""
    root = write(tmp_path, {
        "moba_efficient.py": """\
            import torch
            from flash_attn import flash_attn_varlen_func
            from flash_attn.flash_attn_interface import _flash_attn_varlen_forward


            def varlen(q, k, v, cu_seqlens, max_seqlen):
                return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, causal=True)


            def forward(q, k, v, cu_seqlens, max_seqlen):
                return _flash_attn_varlen_forward(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, 0.0, 1.0, True)
        """,
    })
    found, result = touchpoints(root)
    states = {t.line: t.state for t in found["moba_efficient.py"] if t.kind.endswith("import")}
    assert states[2] == "rewritten" and states[3] != "rewritten"
    lines = {f.line for f in next(f for f in result.files if f.path == "moba_efficient.py").findings
             if f.code == "PT999"}
    assert 2 not in lines


def test_a_ddp_device_list_is_ported_only_by_a_rewrite_of_all_of_it(tmp_path):
    """mmseg's train_segmentor in a vendored mmcv (LAVIS's annotator, ControlNet's, blind
    round 12): ``device_ids=[torch.cuda.current_device()]``. The rewrite of the call inside
    the list counted as porting the list, so the first run was silent and the run after
    ``--write`` found ``[porter_runtime.current_device()]``: ``--check`` not clean. Now both
    runs report it. DataParallel's ``device_ids`` is inert: it keeps the module off CUDA."""
    root = write(tmp_path, {
        "train.py": """\
            import torch
            from annotator.uniformer.mmcv.parallel import MMDataParallel, MMDistributedDataParallel


            def wrap(model, cfg, distributed):
                if distributed:
                    return MMDistributedDataParallel(model.cuda(), device_ids=[torch.cuda.current_device()])
                return MMDataParallel(model.cuda(cfg.gpu_ids[0]), device_ids=cfg.gpu_ids)
        """,
        "requirements.txt": "torch\n",
    })
    found, result = touchpoints(root)
    states = {(t.line, t.kind): t.state for t in found["train.py"]}
    assert states[(7, "ddp-device")] == "unaccounted" and states[(8, "ddp-device")] == "inert"
    first = [(f.code, f.message) for f in next(f for f in result.files if f.path == "train.py").findings
             if f.action == "review"]
    assert [code for code, _ in first] == ["PT999"]
    from porter_test_utils import run_porter

    assert run_porter("migrate", root, "--write", "-q").returncode == 0
    check = run_porter("migrate", root, "--check", "--output-format", "json")
    again = [x["code"] for f in json.loads(check.stdout)["files"] for x in f["findings"] if x["action"] == "review"]
    assert again == ["PT999"]


def test_an_attribute_test_of_torch_cuda_is_inert_and_a_string_spec_and_repeats_are_named_once(tmp_path):
    """Blind round 17: H2O's vendored DeepSpeed probes `hasattr(torch.cuda, "nvtx")` (hasattr
    never raises); ChatRWKV's `strategy="cuda fp16"` went unnamed; PixArt-alpha's
    `{512: 'cuda', 1024: 'cuda'}` was two findings for one construct."""
    root = write(tmp_path, {
        "nvtx.py": 'import torch\n\nif hasattr(torch.cuda, "nvtx"):\n    HAS_NVTX = True\n',
        "chat.py": 'from rwkv.model import RWKV\n\nmodel = RWKV(model="rwkv.pth", strategy="cuda fp16")\n',
        "demo.py": "t5_device = {512: 'cuda', 1024: 'cuda'}\nemb = Embedder(device=t5_device[size])\n",
    })
    found, result = touchpoints(root)
    assert [(t.kind, t.state) for t in found["nvtx.py"]] == [("torch.cuda", "inert")]
    [spec] = [t for t in found["chat.py"] if t.kind != "undeclared-import"]
    assert (spec.kind, spec.what, spec.state) == ("device-words", "'cuda fp16'", "unaccounted")
    assert [t.state for t in found["demo.py"]] == ["unaccounted", "reported"]
    findings = {f.path: [x for x in f.findings if x.code == "PT999"] for f in result.files}
    assert len(findings["demo.py"]) == 1 and "porter_runtime.device_type()" in findings["chat.py"][0].suggestion


def test_a_count_of_cudas_per_device_generators_guards_what_it_tests(tmp_path):
    """LLaMA-Adapter's gorilla/finetune (blind round 18): `hasattr(torch.cuda,
    "default_generators") and len(torch.cuda.default_generators) > 0` is False without CUDA
    (one generator per device, none there), and the `else` seeds with `torch.seed()`: two
    PT999 labelled false. The port runs on the CPU as it is."""
    code = dedent("""\
        import sys

        import torch


        def set_seed():
            if hasattr(torch.cuda, "default_generators") and len(torch.cuda.default_generators) > 0:
                device_idx = torch.cuda.current_device()
                seed = torch.cuda.default_generators[device_idx].seed()
            else:
                seed = int(torch.seed() % sys.maxsize)
            torch.manual_seed(seed)
            return seed


        print(set_seed() >= 0)
        """)
    root = write(tmp_path, {"revllama.py": code})
    found, result = touchpoints(root)
    assert sorted(t.state for t in found["revllama.py"]) == ["guarded", "guarded", "inert", "inert"]
    assert not [x for f in result.files for x in f.findings if x.code == "PT999"]
    ran = subprocess.run([sys.executable, "revllama.py"], cwd=root, capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert ran.returncode == 0 and ran.stdout.strip() == "True", ran.stderr
