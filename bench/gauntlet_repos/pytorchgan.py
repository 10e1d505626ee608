"""Three PyTorch-GAN trainers, tiny, run as its README shows (``cd implementations/X && python X.py``):
DCGAN and WGAN-GP (the ``cuda`` flag, ``torch.cuda.FloatTensor if cuda`` tensor types, autograd.grad
gradient penalty) on a synthetic MNIST that torchvision finds already "downloaded" (the four raw
idx files under data/mnist/MNIST/raw), and CycleGAN resuming (``--epoch 1``) from generator and
discriminator weights saved as on a GPU, on random image folders under data/.

ClusterGAN (whose helpers hard-code ``torch.cuda.FloatTensor`` and ``.cuda()``) is left out: past
that, its training loop steps the generator's optimizer before the discriminator's backward
through the same graph, which torch >= 1.5 rejects on any device."""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

CYCLE = "tinycycle"
CYCLE_FLAGS = (f"--dataset_name {CYCLE} --img_height 32 --img_width 32 --n_residual_blocks 1 --n_cpu 0 "
               "--batch_size 2 --decay_epoch 1 --sample_interval 1 --checkpoint_interval 1")


def _idx(path: Path, array) -> None:
    """An MNIST idx file (big-endian header: magic 0x08 uint8 + ndim, then each dim)."""
    import struct

    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype("uint8").tobytes())


def _mnist(root: Path, train: int, test: int) -> None:
    """torchvision's MNIST checks only that the four raw files exist (no checksum) before it
    would download, so these stand in for the real set."""
    import numpy as np

    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    generator = np.random.default_rng(0)
    for prefix, count in (("train", train), ("t10k", test)):
        _idx(raw / f"{prefix}-images-idx3-ubyte", generator.integers(0, 256, size=(count, 28, 28)))
        _idx(raw / f"{prefix}-labels-idx1-ubyte", generator.integers(0, 10, size=(count,)))


def _cyclegan_cuda_weights(tree: Path, epoch: int) -> None:
    """G_AB/G_BA/D_A/D_B state dicts as cyclegan.py saves them after ``epoch`` on a GPU (storages
    tagged cuda:0), built with the tree's own models.py at the recipe's sizes."""
    import importlib.util

    import torch

    folder = tree / "implementations" / "cyclegan"
    spec = importlib.util.spec_from_file_location("_gauntlet_cyclegan_models", folder / "models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    torch.manual_seed(0)
    shape = (3, 32, 32)
    nets = {"G_AB": models.GeneratorResNet(shape, 1), "G_BA": models.GeneratorResNet(shape, 1),
            "D_A": models.Discriminator(shape), "D_B": models.Discriminator(shape)}
    for name, net in nets.items():
        save_cuda_checkpoint(net.state_dict(), folder / "saved_models" / CYCLE / f"{name}_{epoch}.pth")


def prepare(tree: Path) -> None:
    _mnist(tree / "data" / "mnist", train=48, test=16)
    for seed, (split, domain, count) in enumerate([("train", "A", 4), ("train", "B", 4), ("test", "A", 5),
                                                   ("test", "B", 5)]):
        write_images(tree / "data" / CYCLE / split / domain, count, size=36, suffix=".jpg", seed=seed,
                     class_folders=False)
    _cyclegan_cuda_weights(tree, epoch=1)


STEPS = [
    Step("dcgan", "cd implementations/dcgan && python dcgan.py --n_epochs 1 --batch_size 16 --sample_interval 1",
         outputs=["implementations/dcgan/images/0.png", "implementations/dcgan/images/2.png"], timeout=180),
    Step("wgan_gp", "cd implementations/wgan_gp && python wgan_gp.py --n_epochs 1 --batch_size 16 --n_critic 1 "
         "--sample_interval 1", outputs=["implementations/wgan_gp/images/2.png"], timeout=180),
    Step("cyclegan-resume-cuda-checkpoint",
         f"cd implementations/cyclegan && python cyclegan.py --epoch 1 --n_epochs 2 {CYCLE_FLAGS}",
         outputs=[f"implementations/cyclegan/images/{CYCLE}/3.png"], timeout=180),
]
