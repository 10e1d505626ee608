"""NVlabs/SPADE (GauGAN, the pix2pixHD / CycleGAN option code base): the README's commands, tiny.

- ``train-coco``: ``python train.py --name [experiment_name] --dataset_mode coco --dataroot [path_to_coco_dataset]``
  on the COCO-Stuff sample the repository ships (``datasets/coco_stuff``: 13 train and 8 val images with label and
  instance maps; the README: "we put a few sample images in this code repo"), one epoch on 4 of them at 64x64 with
  the networks narrowed by the repository's own flags (--ngf/--ndf 8). Default --gpu_ids '0' (no --gpu_ids -1),
  default losses: hinge GAN, feature matching and the VGG19 perceptual loss.
- ``continue-coco``: the same with ``--continue_train`` for a second epoch (iter.txt and latest_net_[GD].pth, loaded
  by util.load_network's plain ``torch.load``).
- ``test-coco``: ``python test.py --name [name_of_experiment] --dataset_mode coco --dataroot ...`` on the trained
  checkpoint (--how_many 2, the val split of the shipped sample).
- ``test-cuda-checkpoint``: the README's "Generating Images Using Pretrained Model" (``python test.py --name
  coco_pretrained --dataset_mode coco --dataroot ...``) on a coco_pretrained/latest_net_G.pth that prepare() writes as
  a CUDA machine's ``torch.save`` would (every storage tagged cuda:0, ``save_cuda_checkpoint``). The repository's
  own save_network moves the net ``.cpu()`` before saving, so its own training runs write CPU storages; the
  downloaded checkpoints.tar.gz is of unknown provenance, and this step stands for a GPU-saved one.
- ``train-custom-vae``: the README's custom-dataset command (``--dataset_mode custom --label_dir --image_dir
  --label_nc``) with ``--use_vae`` (its "VAE-Style Training" section: netE, KLD loss) and --no_instance, on
  synthetic 4-class label maps and images, at 256x256 (the encoder takes no smaller crop) without the VGG loss.

Not from the network: torchvision.models.vgg19(pretrained=True) (VGGLoss) finds a random VGG19 state dict under
TORCH_HOME (torch hub checks the hash only on download), written small (expanded tensors: one small storage each).
sync_batchnorm: the README clones vacancy/Synchronized-BatchNorm-PyTorch and copies its sync_batchnorm/ into
models/networks/; PyPI's sync-batchnorm 0.0.1 is that folder, byte for byte, and prepare() copies it there.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
CKPT = f"{G}/checkpoints"
ENV = {"TORCH_HOME": "{tree}/" + G + "/torch"}
COCO = "--dataset_mode coco --dataroot datasets/coco_stuff"
# The networks and images scaled down by the repository's own flags (64x64 is the smallest crop the default
# 'normal' generator, 5 upsamplings from crop/32, and the 4-layer multiscale discriminator take comfortably).
NET = f"--checkpoints_dir {CKPT} --ngf 8"
TRAIN = (f"{NET} --ndf 8 --load_size 72 --crop_size 64 --batchSize 2 --max_dataset_size 4 --niter 1 "
         "--print_freq 1 --display_freq 1 --save_epoch_freq 1")
TEST = f"{NET} --load_size 64 --crop_size 64 --how_many 2 --results_dir {G}/results"
# The encoder (--use_vae) takes only --crop_size >= 256: it resizes its input to 256x256 and has its sixth
# stride-2 layer, which its 4x4 fc_mu/fc_var expect, only when crop_size >= 256 (encoder.py:31, :48); a smaller crop
# fails on any device. So this step runs at 256x256, one image, one iteration, and leaves out the VGG loss
# (--no_vgg_loss; train-coco runs it) to keep it within the CPU budget.
CUSTOM = (f"--dataset_mode custom --label_dir {G}/custom/labels --image_dir {G}/custom/images --label_nc 4 "
          f"--no_instance --use_vae {NET} --ndf 8 --load_size 256 --crop_size 256 --batchSize 1 --max_dataset_size 1 "
          "--niter 1 --print_freq 1 --display_freq 1 --save_epoch_freq 1 --no_vgg_loss")

# Only to build the pretrained generator's weights in prepare(): the tree's own options and define_G, with the
# repository's CPU flag (--gpu_ids -1), in a child process from the tree's root. The steps never pass it.
_GENERATOR = r"""
import sys, torch
sys.path.insert(0, ".")
out, sys.argv = sys.argv[1], ["test.py", *sys.argv[2:], "--gpu_ids", "-1"]
from options.test_options import TestOptions
import models.networks as networks
torch.manual_seed(0)
opt = TestOptions().parse()
torch.save(networks.define_G(opt).state_dict(), out)
"""


def _random_vgg19(path: Path) -> None:
    """A VGG19 state dict with random weights, every tensor a small storage expanded to its shape (300 KB, not 548 MB)."""
    import math

    import torch
    import torchvision

    with torch.device("meta"):
        shapes = {k: v.shape for k, v in torchvision.models.vgg19().state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    state = {}
    for key, shape in shapes.items():
        if len(shape) == 1:
            state[key] = torch.zeros(shape)
        else:
            # The same weights for every input channel, so they see the channels' mean (1 / in_channels), He-scaled
            # over the kernel; the gain 1.6 keeps the activations near their scale through the 16 convolutions
            # (1e-4 of it at relu5_1 without it; 1e12 with plain He scaling over fan_in).
            small = torch.randn(shape[0], 1, *shape[2:], generator=generator)
            small *= 1.6 * math.sqrt(2.0 / math.prod(shape[2:])) / shape[1]
            state[key] = small.expand(shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


def prepare(tree: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    import numpy as np
    import sync_batchnorm
    import torch
    from PIL import Image
    from torchvision.models import VGG19_Weights

    # README: "cp -rf Synchronized-BatchNorm-PyTorch/sync_batchnorm ." in models/networks/.
    target = tree / "models" / "networks" / "sync_batchnorm"
    if not target.exists():
        shutil.copytree(Path(sync_batchnorm.__file__).parent, target,
                        ignore=shutil.ignore_patterns("__pycache__"))

    _random_vgg19(tree / G / "torch" / "hub" / "checkpoints" / os.path.basename(VGG19_Weights.IMAGENET1K_V1.url))

    rng = np.random.default_rng(0)
    label_dir, image_dir = tree / G / "custom" / "labels", tree / G / "custom" / "images"
    for folder in (label_dir, image_dir):
        folder.mkdir(parents=True, exist_ok=True)
    for i in range(4):  # 4-class label maps (blocks of 10 pixels) and RGB images, paired by file name
        label = np.repeat(np.repeat(rng.integers(0, 4, size=(8, 8), dtype=np.uint8), 10, 0), 10, 1)
        Image.fromarray(label, mode="L").save(label_dir / f"img_{i:04d}.png")
        Image.fromarray(rng.integers(0, 256, size=(80, 80, 3), dtype=np.uint8)).save(image_dir / f"img_{i:04d}.png")

    local = tree / G / "cpu_net_G.pth"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", _GENERATOR, str(local), "--name", "coco_pretrained", *COCO.split(),
                    *TEST.split()], cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    save_cuda_checkpoint(torch.load(local, map_location="cpu"), tree / CKPT / "coco_pretrained" / "latest_net_G.pth")
    local.unlink()


STEPS = [
    Step("train-coco", f"python train.py --name gauntlet_coco {COCO} {TRAIN}",
         outputs=[f"{CKPT}/gauntlet_coco/latest_net_G.pth", f"{CKPT}/gauntlet_coco/latest_net_D.pth",
                  f"{CKPT}/gauntlet_coco/1_net_G.pth", f"{CKPT}/gauntlet_coco/web/images/*synthesized_image*.png"],
         env=ENV, timeout=300),
    Step("continue-coco", f"python train.py --name gauntlet_coco {COCO} {TRAIN} --continue_train --niter 2",
         outputs=[f"{CKPT}/gauntlet_coco/2_net_G.pth", f"{CKPT}/gauntlet_coco/2_net_D.pth"], env=ENV, timeout=300),
    Step("test-coco", f"python test.py --name gauntlet_coco {COCO} {TEST}",
         outputs=[f"{G}/results/gauntlet_coco/test_latest/index.html",
                  f"{G}/results/gauntlet_coco/test_latest/images/synthesized_image/*.png"], env=ENV, timeout=300),
    Step("test-cuda-checkpoint", f"python test.py --name coco_pretrained {COCO} {TEST}",
         outputs=[f"{G}/results/coco_pretrained/test_latest/images/synthesized_image/*.png"], env=ENV, timeout=300),
    Step("train-custom-vae", f"python train.py --name gauntlet_custom {CUSTOM}",
         outputs=[f"{CKPT}/gauntlet_custom/latest_net_G.pth", f"{CKPT}/gauntlet_custom/latest_net_E.pth"],
         env=ENV, timeout=300),
]
