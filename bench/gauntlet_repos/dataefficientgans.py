"""DiffAugment-stylegan2-pytorch's README commands, tiny (the tree is that sub-project of
mit-han-lab/data-efficient-gans): dataset_tool.py turns synthetic 8x8 PNGs into a dataset zip; train.py trains the
README's default configuration (--cfg=low_shot, DiffAugment 'color,translation,cutout') for its minimum 1 kimg at 8x8
(--batch=64, --metrics=none, 1 data-loader worker) on one process and with --gpus=2 (torch.multiprocessing.spawn +
nccl in the repository); the same with ADA instead of DiffAugment (--DiffAugment= , the stylegan2-ada path through
training/augment.py); a fine-tune (--resume) from a network pickle the recipe writes as a training run saves it;
generate.py and generate_gif.py (the README's sampling commands, scaled down by their own --seeds / --num-cols /
--num-phases / --transition-frames / --static-frames / --resolution) from the pickle training wrote.

Network width: this train.py (stylegan2-ada-pytorch's) has no --cbase/--cmax flags; it hard-codes channel_base
32768 and channel_max 512, so even at 8x8 every layer has 512 channels (one batch of 8 took ~16 s per phase on the
CPU, the 32x32 grid of fakes training_loop.py renders per snapshot ~10 minutes). The train steps therefore run
``_gauntlet/tiny_train.py``, which imports the tree's train.py, wraps its own ``setup_training_loop_kwargs`` to set
channel_base=64 / channel_max=8 in the G and D kwargs it returns (what StyleGAN3's --cbase/--cmax flags do), and calls
train.main() with the step's arguments. Nothing else in train.py, the loop or the networks is touched; spawned ranks
get the same kwargs (they are pickled into the spawn).

The pickles are ``pickle.dump``s of the tree's own persistent networks (torch_utils.persistence stores each module's
source inside the pickle), moved ``.cpu()`` as training_loop.py does before saving, so a CUDA machine's pickle holds
CPU storages too. Built with the tree's code in prepare(), the pickle carries the tree's (on the port: the ported)
network source; a pickle from a real GPU run carries the unported source.

The steps set OMP_NUM_THREADS=1 and put a ``sitecustomize`` on PYTHONPATH restoring behaviour the repository was
written for (torch 1.7-1.9, Pillow < 10) that current releases dropped; without each, the original fails on every
device: ``Sampler.__init__(data_source)`` (misc.InfiniteSampler calls it; torch >= 2.2 removed the argument),
Pillow's ``Image.ANTIALIAS`` (generate_gif.py resizes with it; Pillow 10 removed it, LANCZOS is the same filter),
and DistributedDataParallel's broadcast of rank 0's buffers at construction: training_loop.py wraps the networks with
``broadcast_buffers=False`` and relies on that broadcast to give every rank the same ``noise_const`` buffers (each rank
builds its networks under its own seed); torch 1.x broadcast every buffer at construction whatever the flag said,
torch 2.13 skips them under ``broadcast_buffers=False``, and misc.check_ddp_consistency then fails at the first
snapshot (``AssertionError: Generator.synthesis.b4.conv1.noise_const``, on any device). The shim passes
``forward_sync_buffers=False`` instead, torch 2.13's spelling of the old meaning.

Not run: calc_metrics.py and training metrics (they download Inception), projector.py (downloads VGG16), the README's
pretrained models (TensorFlow pickles converted by legacy.py, downloaded)."""

from pathlib import Path

from _recipe import SAMPLER_SHIM, Step, write_images

G = "_gauntlet"
SITE = f"{G}/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "OMP_NUM_THREADS": "1"}
CBASE, CMAX = 64, 8

SITECUSTOMIZE = '''\
# gauntlet: APIs DiffAugment-stylegan2-pytorch (written for torch 1.7-1.9, Pillow < 10) relies on and newer releases
# dropped; not CUDA matters.
''' + SAMPLER_SHIM + '''try:
    from torch.nn.parallel import DistributedDataParallel as _DDP

    _ddp_init = _DDP.__init__

    def _ddp_init_sync_buffers(self, *args, **kwargs):  # training_loop.py wraps with broadcast_buffers=False
        if kwargs.get("broadcast_buffers") is False and "forward_sync_buffers" not in kwargs:
            del kwargs["broadcast_buffers"]  # torch 1.x still broadcast rank 0's buffers at construction
            kwargs["forward_sync_buffers"] = False
        _ddp_init(self, *args, **kwargs)

    _DDP.__init__ = _ddp_init_sync_buffers
except Exception:
    pass
try:
    from PIL import Image as _Image

    if not hasattr(_Image, "ANTIALIAS"):  # Pillow >= 10 removed the alias; generate_gif.py resizes with it
        _Image.ANTIALIAS = _Image.LANCZOS
except Exception:
    pass
'''

TINY_TRAIN = f'''\
"""gauntlet: train.py with its networks' width turned down. This train.py has no --cbase/--cmax flags (it hard-codes
channel_base=32768, channel_max=512); set them to {CBASE}/{CMAX} in the kwargs its own setup_training_loop_kwargs
returns, then run its main() with this command's arguments. Nothing else is changed."""
import os
import sys

sys.path.insert(0, os.getcwd())

import train  # noqa: E402


def _tiny(setup):
    def wrapped(**config_kwargs):
        desc, args = setup(**config_kwargs)
        for kwargs in (args.G_kwargs.synthesis_kwargs, args.D_kwargs):
            kwargs.channel_base = {CBASE}
            kwargs.channel_max = {CMAX}
        return desc, args
    return wrapped


if __name__ == "__main__":
    train.setup_training_loop_kwargs = _tiny(train.setup_training_loop_kwargs)
    sys.argv[0] = "train.py"
    train.main()  # pylint: disable=no-value-for-parameter
'''

# train.py's own flags, scaled down: its minimum --kimg=1 at batch 64 (16 steps), no metrics, 1 loader worker.
TRAIN = ("python -u {G}/tiny_train.py --outdir={out} --data={G}/tiny-8x8.zip --gpus={gpus} --batch=64 --kimg=1 "
         "--metrics=none --workers=1{extra}")
DESC = "tiny-8x8-low_shot-kimg1-batch64"
RUN = f"{G}/runs/00000-{DESC}-color-translation-cutout"
PRETRAINED = f"{G}/pretrained/tiny-8x8.pkl"


def _snapshot(tree: Path, path: Path) -> None:
    """A network pickle as training_loop.py saves it: G, D, G_ema (each a deep copy, eval, requires_grad off, .cpu()),
    augment_pipe None (DiffAugment runs in the loss) and training_set_kwargs, built from the tree's own classes with
    the kwargs train.py builds for the default --cfg=low_shot at 8x8 (widths as tiny_train.py sets them)."""
    import copy
    import pickle
    import sys

    import torch

    sys.path.insert(0, str(tree))
    try:
        import dnnlib

        torch.manual_seed(0)
        common = dict(c_dim=0, img_resolution=8, img_channels=3)
        G_kwargs = dict(class_name="training.networks.Generator", z_dim=512, w_dim=512,
                        mapping_kwargs=dict(num_layers=2),
                        synthesis_kwargs=dict(channel_base=CBASE, channel_max=CMAX, num_fp16_res=4, conv_clamp=256))
        D_kwargs = dict(class_name="training.networks.Discriminator", block_kwargs={}, mapping_kwargs={},
                        epilogue_kwargs=dict(mbstd_group_size=4), channel_base=CBASE, channel_max=CMAX,
                        num_fp16_res=4, conv_clamp=256)
        net_G = dnnlib.util.construct_class_by_name(**G_kwargs, **common).train().requires_grad_(False)
        net_D = dnnlib.util.construct_class_by_name(**D_kwargs, **common).train().requires_grad_(False)
        data = dict(training_set_kwargs=dict(class_name="training.dataset.ImageFolderDataset",
                                             path=f"{G}/tiny-8x8.zip", use_labels=False, max_size=8, xflip=False,
                                             resolution=8),
                    G=net_G, D=net_D, G_ema=copy.deepcopy(net_G).eval(), augment_pipe=None)
        for key, value in data.items():
            if isinstance(value, torch.nn.Module):
                data[key] = copy.deepcopy(value).eval().requires_grad_(False).cpu()
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            pickle.dump(data, handle)
    finally:
        sys.path.remove(str(tree))


def prepare(tree: Path) -> None:
    work = tree / G
    write_images(work / "images", count=8, size=8, class_folders=False)
    site = tree / SITE
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "tiny_train.py").write_text(TINY_TRAIN)
    _snapshot(tree, tree / PRETRAINED)


STEPS = [
    Step("dataset", f"python dataset_tool.py --source={G}/images --dest={G}/tiny-8x8.zip",
         outputs=[f"{G}/tiny-8x8.zip"], env=ENV, timeout=120),
    Step("train", TRAIN.format(G=G, out=f"{G}/runs", gpus=1, extra=""),
         outputs=[f"{RUN}/network-snapshot-000000.pkl", f"{RUN}/network-snapshot-000001.pkl",
                  f"{RUN}/fakes000001.png", f"{RUN}/stats.jsonl"], env=ENV, timeout=300),
    Step("generate", f"python generate.py --outdir={G}/out --seeds=1-2 "
                     f"--network={RUN}/network-snapshot-000001.pkl",
         outputs=[f"{G}/out/seed0001.png", f"{G}/out/seed0002.png"], env=ENV, timeout=120),
    Step("generate_gif", f"python generate_gif.py --output={G}/tiny.gif --seed=0 --num-rows=1 --num-cols=2 "
                         f"--num-phases=2 --transition-frames=2 --static-frames=1 --resolution=16 "
                         f"--network={RUN}/network-snapshot-000001.pkl",
         outputs=[f"{G}/tiny.gif"], env=ENV, timeout=120),
    Step("resume", TRAIN.format(G=G, out=f"{G}/runs-resume", gpus=1, extra=f" --resume={PRETRAINED}"),
         outputs=[f"{G}/runs-resume/00000-{DESC}-color-translation-cutout-resumecustom/network-snapshot-000001.pkl"],
         env=ENV, timeout=300),
    Step("train-ada", TRAIN.format(G=G, out=f"{G}/runs-ada", gpus=1, extra=" --DiffAugment="),
         outputs=[f"{G}/runs-ada/00000-{DESC}/network-snapshot-000001.pkl"], env=ENV, timeout=300),
    Step("ddp", TRAIN.format(G=G, out=f"{G}/runs-ddp", gpus=2, extra=""),
         outputs=[f"{G}/runs-ddp/00000-{DESC}-color-translation-cutout/network-snapshot-000001.pkl"],
         env=ENV, timeout=300),
]
