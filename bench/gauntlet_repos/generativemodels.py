"""Stability-AI/generative-models: the README's training command, `python main.py --base
configs/example_training/toy/mnist_cond.yaml` (class-conditional pixel-space EDM diffusion on MNIST through
PyTorch Lightning), with a second config the README's left-to-right merge puts on top (`_gauntlet/tiny.yaml`: one
res block a level, 2 sampling steps, batch 4, 2 steps, an image logged and last.ckpt saved every step,
the step checkpoints every 2: Lightning refuses two ModelCheckpoints with the same settings), on a
synthetic MNIST written in torchvision's raw layout under `.data/` (where sgm/data/mnist.py reads it; nothing is
downloaded). Then `main.py -r` resumes a run whose log directory (configs + last.ckpt) was written as on a CUDA
machine, and the same training on two devices (`lightning.trainer.devices=0,1,`: the config's own GPU list,
as `devices: 0,` picks one).

The README's sampling commands (scripts/sampling/simple_video_sample*.py, the streamlit demos) need SVD/SV3D/SDXL
weights, OpenCLIP ViT-H from the hub and `clip.load("ViT-L/14")` (a download with a fixed SHA-256) for the
watermark/NSFW filter, so they cannot run offline; the repository's sampler (EulerEDMSampler with classifier-free
guidance) and first-stage decode run inside training, through main.ImageLogger -> DiffusionEngine.log_images.
"""
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
# sgm/data/__init__.py imports sgm.data.dataset, which exits unless `sdata` (Stability-AI/datapipelines, a git
# install in the README, not on PyPI) imports; the MNIST path never calls it. A stub on PYTHONPATH stands in.
ENV = {"WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{G}/py"}
SDATA = """\
\"\"\"Stand-in for Stability-AI/datapipelines' sdata: the names sgm.data.dataset imports (unused on the MNIST path).\"\"\"


def _missing(*args, **kwargs):
    raise NotImplementedError("sdata stand-in (gauntlet recipe): webdataset pipelines are not part of the recipe")


create_dataset = create_loader = create_dummy_dataset = warn_and_continue = _missing
"""

TINY = """\
model:
  params:
    network_config:
      params:
        num_res_blocks: 1
        channel_mult: [1, 2]
    sampler_config:
      params:
        num_steps: 2
    # mnist_cond.yaml's IdentityFirstStage has no .decoder, which DiffusionEngine.decode_first_stage reads
    # (isinstance(self.first_stage_model.decoder, VideoDecoder)): the image logger fails on every device. A tiny
    # random KL autoencoder of the repository's own (no downsampling, 1 latent channel) takes its place.
    first_stage_config:
      target: sgm.models.autoencoder.AutoencoderKL
      params:
        embed_dim: 1
        monitor: val/rec_loss
        ddconfig:
          attn_type: vanilla
          double_z: True
          z_channels: 1
          resolution: 28
          in_channels: 1
          out_ch: 1
          ch: 32
          ch_mult: [1]
          num_res_blocks: 1
          attn_resolutions: []
          dropout: 0.0
        lossconfig:
          target: torch.nn.Identity
data:
  params:
    batch_size: 4
lightning:
  modelcheckpoint:
    params:
      every_n_train_steps: 1
  callbacks:
    metrics_over_trainsteps_checkpoint:
      params:
        every_n_train_steps: 2
    image_logger:
      params:
        batch_frequency: 1
        max_images: 2
        increase_log_steps: False
        log_images_kwargs:
          N: 2
          n_rows: 2
  trainer:
    max_epochs: 1
    max_steps: 2
"""


def _idx(path: Path, magic: int, dims, payload: bytes) -> None:
    import struct

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims) + payload)


def _mnist(root: Path, train: int = 16, test: int = 4) -> None:
    """torchvision's MNIST raw files (uncompressed idx), which MNIST(download=True) takes as already there."""
    import numpy as np

    g = np.random.default_rng(0)
    raw = root / "MNIST" / "raw"
    for prefix, n in (("train", train), ("t10k", test)):
        images = g.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        _idx(raw / f"{prefix}-images-idx3-ubyte", 0x803, (n, 28, 28), images.tobytes())
        _idx(raw / f"{prefix}-labels-idx1-ubyte", 0x801, (n,), labels.tobytes())


def prepare(tree: Path) -> None:
    import os
    import sys

    work = tree / G
    work.mkdir(parents=True, exist_ok=True)
    (work / "tiny.yaml").write_text(TINY)
    (work / "py" / "sdata").mkdir(parents=True, exist_ok=True)
    (work / "py" / "sdata" / "__init__.py").write_text(SDATA)
    _mnist(tree / ".data")  # 16 training images: 4 steps an epoch at batch 4, so a resume from step 1 reaches 3

    # A run as a CUDA machine leaves it: LOGDIR/configs/{now}-project.yaml and {now}-lightning.yaml (what
    # main.SetupCallback saves) and LOGDIR/checkpoints/last.ckpt after one step, every storage tagged cuda:0.
    # The checkpoint is a real Lightning checkpoint of the repository's DiffusionEngine, made here by one CPU step.
    from omegaconf import OmegaConf

    config = OmegaConf.merge(OmegaConf.load(tree / "configs/example_training/toy/mnist_cond.yaml"),
                             OmegaConf.load(work / "tiny.yaml"))
    lightning = config.pop("lightning")
    lightning.trainer.accelerator = "gpu"  # main.py sets it before SetupCallback saves the config
    # the resumed run goes on from step 1 to 3 (Lightning counts the checkpoint's epoch as done after max_steps)
    lightning.trainer.max_steps = 3
    lightning.trainer.max_epochs = 2
    run = work / "cuda_run"
    (run / "configs").mkdir(parents=True, exist_ok=True)
    OmegaConf.save(config, run / "configs" / "2026-01-01T00-00-00-project.yaml")
    OmegaConf.save(OmegaConf.create({"lightning": lightning}), run / "configs" / "2026-01-01T00-00-00-lightning.yaml")

    import torch
    import pytorch_lightning as pl

    here = os.getcwd()
    os.chdir(tree)  # MNISTLoader reads ".data/" from the working directory
    sys.path[:0] = [str(tree), str(work / "py")]
    try:
        from sgm.util import instantiate_from_config

        pl.seed_everything(0)
        model = instantiate_from_config(config.model)
        model.learning_rate = config.model.base_learning_rate
        data = instantiate_from_config(config.data)
        trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                             default_root_dir=str(work / "prepare_tmp"))
        trainer.fit(model, data)
        tmp = work / "prepare_tmp" / "last.ckpt"
        trainer.save_checkpoint(str(tmp))
        checkpoint = torch.load(str(tmp), map_location="cpu", weights_only=False)
        save_cuda_checkpoint(checkpoint, run / "checkpoints" / "last.ckpt")
        tmp.unlink()
    finally:
        sys.path.remove(str(tree))
        sys.path.remove(str(work / "py"))
        os.chdir(here)


TRAIN = (f"python main.py --base configs/example_training/toy/mnist_cond.yaml {G}/tiny.yaml --logdir {G}/logs "
         "--no_date True --no-test True")

STEPS = [
    Step("train", f"{TRAIN} -n mnist",
         outputs=[f"{G}/logs/mnist/checkpoints/last.ckpt", f"{G}/logs/mnist/images/train/samples_*.png",
                  f"{G}/logs/mnist/configs/*-project.yaml"], timeout=300, env=ENV),
    Step("resume", f"python main.py -r {G}/cuda_run/checkpoints/last.ckpt --no-test True",
         outputs=[f"{G}/cuda_run/checkpoints/trainstep_checkpoints/*step=000000002.ckpt",
                  f"{G}/cuda_run/images/train/samples_*.png"], timeout=300, env=ENV),
    Step("ddp", f"{TRAIN} -n mnist_ddp lightning.trainer.devices=0,1,",
         outputs=[f"{G}/logs/mnist_ddp/checkpoints/last.ckpt", f"{G}/logs/mnist_ddp/images/train/samples_*.png"],
         timeout=300, env=ENV),
]
