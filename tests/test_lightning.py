"""TP403 with Lightning 2.6.6 itself (lit-llama's and tinyllama's stand-in), installed from
PyPI into a scratch folder here: a Fabric script told `accelerator="cuda"` and FSDP (lit-llama's
pretraining, blind round 5) fails off CUDA as written, and its port trains on the CPU."""

import os
import subprocess
import sys

import pytest

from porter_test_utils import run_porter

PRETRAIN = """\
from functools import partial

import lightning as L
import torch
import torch.nn as nn
from lightning.fabric.strategies import FSDPStrategy
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


class Block(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        return x + self.mlp(x)


def main(devices: int = 1, max_iters: int = 3):
    auto_wrap_policy = partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    strategy = FSDPStrategy(auto_wrap_policy=auto_wrap_policy, activation_checkpointing=Block, limit_all_gathers=True)

    fabric = L.Fabric(accelerator="cuda", devices=devices, precision="32-true", strategy=strategy)
    fabric.launch()
    fabric.seed_everything(1337)
    model = nn.Sequential(Block(16), Block(16), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = fabric.setup(model, optimizer)
    for it in range(max_iters):
        x = torch.randn(8, 16, device=fabric.device)
        loss = model(x).pow(2).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        fabric.print(f"iter {it}: loss {loss.item():.4f}")
    fabric.print("device", fabric.device.type, "strategy", type(fabric.strategy).__name__)


if __name__ == "__main__":
    main()
"""
PINS = ["lightning==2.6.6", "lightning-utilities==0.15.3", "fsspec==2026.9.0", "pyyaml==6.0.4", "tqdm==4.67.1",
        "torchmetrics==1.9.0", "packaging==26.4", "typing_extensions==4.16.0"]


@pytest.fixture(scope="module")
def lightning_site(tmp_path_factory):
    where = tmp_path_factory.mktemp("lightning")
    got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(where), *PINS],
                         capture_output=True, text=True, timeout=600)
    if got.returncode != 0 or not (where / "lightning").is_dir():
        pytest.skip(f"Lightning 2.6.6 could not be installed here: {got.stderr.strip()[-200:]}")
    return where


def _run(tree, site):
    env = {**os.environ, "PYTHONPATH": str(site), "PORTER_QUIET": "1", "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "pretrain.py"], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_fabric_told_cuda_and_fsdp_trains_on_the_cpu_once_ported(tmp_path, lightning_site):
    tree = tmp_path / "repo"
    tree.mkdir()
    (tree / "pretrain.py").write_text(PRETRAIN)
    original = _run(tree, lightning_site)
    assert original.returncode != 0
    assert "`CUDAAccelerator` can not run on your system" in original.stderr

    done = run_porter("migrate", tree, "--write", "-q")
    assert done.returncode == 0, done.stderr
    text = (tree / "pretrain.py").read_text()
    assert 'accelerator=porter_runtime.lightning_accelerator("cuda")' in text
    assert "strategy=porter_runtime.lightning_strategy(strategy)" in text

    ported = _run(tree, lightning_site)
    assert ported.returncode == 0, ported.stderr[-2000:]
    assert "iter 2: loss" in ported.stdout
    assert "device cpu strategy SingleDeviceStrategy" in ported.stdout


FIT = """\
import argparse

import lightning as L
import torch
import torch.nn as nn


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.print(f"step {batch_idx}: loss {loss.item():.4f}")
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--accelerator", default="gpu")
    parser.add_argument("--strategy", default="deepspeed_stage_2")
    args = parser.parse_args()
    data = torch.utils.data.TensorDataset(torch.randn(16, 8), torch.randn(16, 1))
    trainer = L.Trainer(accelerator=args.accelerator, strategy=args.strategy, devices=1, max_steps=2,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(Regressor(), torch.utils.data.DataLoader(data, batch_size=4))
    print("strategy", type(trainer.strategy).__name__)
"""


def test_a_trainer_told_gpu_and_deepspeed_by_its_command_line_trains_on_the_cpu_once_ported(tmp_path, lightning_site):
    """RWKV-LM's shell scripts pass ``--accelerator gpu --strategy deepspeed_stage_2`` (blind
    round 8, silent then): the value the call reads is wrapped, whatever holds it."""
    tree = tmp_path / "repo"
    tree.mkdir()
    (tree / "pretrain.py").write_text(FIT)
    original = _run(tree, lightning_site)
    assert original.returncode != 0
    done = run_porter("migrate", tree, "--write", "-q")
    assert done.returncode == 0, done.stderr
    text = (tree / "pretrain.py").read_text()
    assert "accelerator=porter_runtime.lightning_accelerator(args.accelerator)" in text
    assert "strategy=porter_runtime.lightning_strategy(args.strategy)" in text
    ported = _run(tree, lightning_site)
    assert ported.returncode == 0, ported.stderr[-2000:]
    assert "step 1: loss" in ported.stdout and "strategy SingleDeviceStrategy" in ported.stdout
