"""PT004 on devices passed by position, through the real CLI: an FSDP2-style device mesh
(`init_device_mesh("cuda", ...)`, lingua) and a FlexAttention block mask made with its
device as the sixth argument (attention-gym). The original fails here; the port runs on
the CPU, a one-process Gloo mesh and a causal block mask that matches SDPA's."""

import os
import socket
import subprocess

from porter_test_utils import python_without_porter, run_porter

SCRIPT = '''\
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.attention.flex_attention import create_block_mask, flex_attention


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def main():
    mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),), mesh_dim_names=("dp",))
    q, k, v = (torch.randn(1, 2, 32, 16, device="cuda") for _ in range(3))
    block_mask = create_block_mask(causal, 1, 1, 32, 32, "cuda")
    out = flex_attention(q, k, v, block_mask=block_mask)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    total = out.sum().detach().reshape(1)
    dist.all_reduce(total)
    print(mesh.device_type, torch.allclose(out, ref, atol=1e-5), total.numel())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def _env():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port), "PORTER_QUIET": "1"}


def test_devices_passed_by_position_are_ported_and_run_on_the_cpu(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    original = subprocess.run(python_without_porter("train.py"), cwd=tmp_path, capture_output=True, text=True,
                              env=_env(), timeout=300)
    assert original.returncode != 0
    done = run_porter("migrate", tmp_path, "--write")
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    ported = (tmp_path / "train.py").read_text()
    assert 'init_device_mesh(porter_runtime.device_type(), (int(os.environ["WORLD_SIZE"]),)' in ported
    assert "create_block_mask(causal, 1, 1, 32, 32, porter_runtime.device())" in ported
    run = subprocess.run(python_without_porter("train.py"), cwd=tmp_path, capture_output=True, text=True,
                         env=_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["cpu", "True", "1"]
