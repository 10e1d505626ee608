"""A device module looked up by name (PT115), ported and run on the CPU.

torchtune's ``cleanup_before_training`` calls ``empty_cache`` and
``reset_peak_memory_stats`` on ``getattr(torch, device_type)``; off CUDA that is torch.cpu
(or torch.mps), which has neither. The original fails on the CPU; the port runs.
"""

import subprocess
import sys

from click.testing import CliRunner

from porter.cli.app import cli
from test_cli import make_tree

MEMORY = '''\
import torch


def get_device_type():
    return "cuda" if torch.cuda.is_available() else "cpu"


def get_torch_device_namespace():
    device_type = get_device_type()
    try:
        return getattr(torch, device_type)
    except AttributeError:
        return torch.cuda


def cleanup_before_training():
    namespace = get_torch_device_namespace()
    namespace.empty_cache()
    namespace.reset_peak_memory_stats()
    return namespace.max_memory_allocated()


if __name__ == "__main__":
    print("peak", cleanup_before_training())
'''


def run(root):
    return subprocess.run([sys.executable, "memory.py"], cwd=root, capture_output=True, text=True,
                          env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "PORTER_QUIET": "1"})


def test_the_original_fails_and_the_port_runs(tmp_path):
    root = make_tree(tmp_path / "repo", {"memory.py": MEMORY})
    before = run(root)
    assert before.returncode != 0 and "has no attribute 'empty_cache'" in before.stderr
    result = CliRunner().invoke(cli, ["migrate", str(root), "--write", "-j", "1"])
    assert result.exit_code == 0, result.output
    text = (root / "memory.py").read_text()
    assert "porter_runtime.device_module(getattr(torch, device_type))" in text
    after = run(root)
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == "peak 0"
    # a second migration changes nothing
    assert CliRunner().invoke(cli, ["migrate", str(root), "--write", "-j", "1"]).exit_code == 0
    assert (root / "memory.py").read_text() == text


MESH = '''\
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh


class ParallelDims:
    def __init__(self, dp_shard):
        self.dp_shard = dp_shard

    def build_mesh(self, device_type):
        return init_device_mesh(device_type, mesh_shape=(self.dp_shard,), mesh_dim_names=("dp_shard",))


if __name__ == "__main__":
    cfg_device = "cuda"  # torchtune's configs: `device: cuda`, passed as cfg.device
    mesh = ParallelDims(dp_shard=1).build_mesh(cfg_device)
    print("mesh", mesh.device_type, mesh.size())
    dist.destroy_process_group()
'''


def test_a_mesh_made_for_a_configured_cuda_type_runs_on_the_cpu(tmp_path):
    root = make_tree(tmp_path / "repo", {"parallel.py": MESH})
    env = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin", "PORTER_QUIET": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29533", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}

    def launch():
        return subprocess.run([sys.executable, "parallel.py"], cwd=root, capture_output=True, text=True, env=env,
                              timeout=300)

    before = launch()
    assert before.returncode != 0 and "cuda" in before.stderr.lower(), before.stderr
    assert CliRunner().invoke(cli, ["migrate", str(root), "--write", "-j", "1"]).exit_code == 0
    assert "init_device_mesh(porter_runtime.mesh_device_type(device_type)," in (root / "parallel.py").read_text()
    after = launch()
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == "mesh cpu 1"
