"""End to end on fixtures/repos/flow_classes: every class of CUDA value of issue 27 in one repository.

Unported, the trainer stops on this CPU machine. After one ``--write`` and no edit it
trains 2 steps in a Gloo group of one (under DDP, and under FSDP bound by
``functools.partial``), checkpoints, resumes from the checkpoint and writes its samples; ``--check --fail-on changes`` is then clean. What cannot run off
CUDA by nature (a conda ``pytorch-cuda`` pin, a CUDA wheel index, a kernel fetched from
the Hub, and in tool scripts a name bound only under a CUDA guard, ``nvidia-smi``,
``assert x.is_cuda`` and apex's ``None`` fallback called anyway) is named, with a
suggestion.
"""

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from porter_test_utils import FIXTURES, python_without_porter, run_porter

REPO = FIXTURES / "repos" / "flow_classes"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(repo: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """One process of a torchrun launch of world size 1, as the test sets it up."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PORTER_QUIET": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(_free_port()), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(python_without_porter("train.py", "--out", str(out), *extra), cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_unported_trainer_stops_on_cpu(copy_tree, tmp_path):
    repo = copy_tree(REPO, "original")
    proc = train(repo, tmp_path / "out")
    assert proc.returncode != 0 and "Does not support training without GPU" in proc.stderr
    on_cpu = train(repo, tmp_path / "out", "--cpu")  # past the trainer's own check: the set-up's
    assert on_cpu.returncode != 0 and "distributed training requires CUDA" in on_cpu.stderr


@pytest.mark.slow
def test_ported_once_it_trains_resumes_and_writes_on_cpu(copy_tree, tmp_path):
    repo = copy_tree(REPO, "port")
    proc = run_porter("migrate", repo, "--write")
    report = proc.stderr.decode()
    assert proc.returncode in (0, 1), report
    # the index that dist.setup() returns reaches the sampler, in another module
    assert "sampler.sample_loop(evaluated, 5, device=porter_runtime.device(device))" in (repo / "train.py").read_text()
    assert 'device: str = field(default=porter_runtime.device_str())' in (repo / "config.py").read_text()
    model = (repo / "flowlib" / "model.py").read_text()
    assert "self.to(porter_runtime.device(self.device))" in model
    assert 'factory_kwargs = {"device": porter_runtime.device(porter_runtime.current_device()), ' in model
    assert 'flash-attn>=2.5; sys_platform != "darwin"' in (repo / "requirements.txt").read_text()
    # Gloo can't gather an input that requires grad (the loss)
    assert "dist.all_gather_into_tensor(losses, porter_runtime.collective_input(loss.reshape(1)))" in (
        repo / "flowlib" / "dist.py").read_text()
    # named, with the line and what to do
    assert "environment.yml:7:3 DEP104 conda package pytorch-cuda" in report
    assert "pyproject.toml:14:8 DEP105 https://download.pytorch.org/whl/cu121" in report
    assert "tools/gpu_report.py:10:20 PT908 `n_gpus` is bound only when CUDA is available" in report
    assert "tools/fused_bench.py:14:17 PT911 `FusedAdam` is None off CUDA" in report
    assert "tools/gpu_report.py:12:5 PT111 `subprocess.run` runs `nvidia-smi`" in report
    assert "tools/gpu_report.py:16:5 PT910 asserts that `x` is a CUDA tensor" in report
    dist_py = (repo / "flowlib" / "dist.py").read_text()
    # the module's own availability flag, read by a requirement; the f-string device; FSDP bound by partial
    assert 'porter_runtime.require_device("distributed training requires CUDA")' in dist_py
    assert "HAS_CUDA = torch.cuda.is_available()" in dist_py  # on CUDA the flag is what it was
    assert 'porter_runtime.set_device(porter_runtime.device(f"cuda:{local_rank}"))' in dist_py
    assert ("functools.partial(porter_runtime.fsdp_syncing(FSDP), device_id=porter_runtime.device(local_rank), "
            "sync_module_states=True, use_orig_params=True)") in dist_py
    # Gloo has no future for a reduce-scatter
    assert "porter_runtime.work_future(dist.reduce_scatter_tensor(shard, flat, async_op=True), shard)" in dist_py
    # an `elif torch.cuda.is_available():` whose `else` stops the run
    assert 'porter_runtime.require_device("Does not support training without GPU")' in (repo / "train.py").read_text()
    # a note: not one of the concise lines (issue 45), said in the full output
    assert "dist.py:10:12 PT202" not in report
    full = run_porter("migrate", copy_tree(REPO, "notes"), "--output-format", "full").stderr.decode()
    assert "flowlib/dist.py:10:12" in full and "PT202" in full and "read only by requirements" in full
    # Hugging Face: flash attention as a dataclass default, a TrainingArguments subclass (its paged
    # optimizer default), a device map gathered with the loader's keywords (transformers is not
    # installed here: the rewrites are checked, and the runtime's parts in tests/runtime)
    hf = (repo / "hf" / "finetune.py").read_text()
    assert 'field(default=porter_runtime.attn_implementation("flash_attention_2"))' in hf
    assert "    def __post_init__(self):\n        porter_runtime.training_arguments(self)\n" in hf
    assert '"device_map": {"": porter_runtime.device(local_rank)}}' in hf
    assert "hf/finetune.py:35:18 TP607 `kernels.get_kernel` downloads" in report
    assert "tensorflow-gpu = {version = \"^2.12\", optional = true, markers = \"sys_platform != 'darwin'\"}" in (
        repo / "pyproject.toml").read_text()
    # a metrics function's `cuda=` switch, set by the trainer
    assert "metrics.token_entropy(tokens, cfg.vocab, cuda=porter_runtime.is_cuda())" in (repo / "train.py").read_text()
    assert "checkpoint.py:" not in report and "PT999" not in report  # `model` is a parameter; no touchpoint left
    out = tmp_path / "out"
    first = train(repo, out)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "step 1 loss" in first.stdout and (out / "last.pt").exists()
    resumed = train(repo, out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step 3 loss" in resumed.stdout and "step 0 " not in resumed.stdout
    samples = json.loads((out / "samples_0.json").read_text())
    assert samples["step"] == 4 and len(samples["tokens"][0]) == 6 and samples["probe"] == 1.0
    assert samples["entropy"] >= 0.0
    # FSDP, through the partial: trains and resumes from the same checkpoint
    fsdp_out = tmp_path / "fsdp"
    sharded = train(repo, fsdp_out, "--strategy", "fsdp")
    assert sharded.returncode == 0, sharded.stderr[-3000:]
    # one process, the same seed and batch: FSDP's first loss is DDP's (before any update)
    assert sharded.stdout.split(" scale ")[0] == first.stdout.split(" scale ")[0]
    assert train(repo, fsdp_out, "--strategy", "fsdp", "--resume").returncode == 0
    assert json.loads((fsdp_out / "samples_0.json").read_text())["step"] == 4
    check = run_porter("migrate", repo, "--check", "--fail-on", "changes")
    assert check.returncode == 0, check.stdout.decode()[-2000:]
