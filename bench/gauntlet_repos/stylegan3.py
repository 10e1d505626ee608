"""StyleGAN3's README commands, tiny: dataset_tool.py turns synthetic 8x8 PNGs into a dataset zip; train.py trains
the README's StyleGAN2 configuration for its minimum 1 kimg at 8x8 (--cbase/--cmax/--map-depth shrink it, ADA on as
the default, --metrics=none) on one process and with --gpus=2 (torch.multiprocessing.spawn + nccl in the repo);
a fine-tune (--resume) from a network pickle the recipe writes as a training run saves it; and gen_images.py from
the pickle training wrote and from a StyleGAN3-T pickle the recipe writes (the filtered_lrelu path, with
--translate/--rotate).

The pickles are ``pickle.dump``s of the tree's own persistent networks (torch_utils.persistence stores each
module's source inside the pickle), moved ``.cpu()`` as training_loop.py does before saving, so a CUDA machine's
pickle holds CPU storages too. Built with the tree's code in prepare(), the pickles carry the tree's (on the port:
the ported) network source; a pickle from a real GPU run carries the unported source.

StyleGAN3-T training itself is not run: its reference filtered_lrelu costs ~1 s per 32 images at 8x8 on this
CPU, and training_loop.py always renders a 32x32 grid of fakes (1024 images) per snapshot, so its minimum 1 kimg
is many minutes. The steps set OMP_NUM_THREADS=1 (oversubscribed CPU threads made training ~10x slower on the
shared 2-core runner) and put a ``sitecustomize`` on PYTHONPATH restoring two torch APIs the repository was
written for (torch 1.9), both of which fail the original on every device: ``Sampler.__init__(data_source)``
(misc.InfiniteSampler calls it; torch removed the argument) and Adam's ``betas=[0, 0.99]`` (an int and a float;
newer torch requires both floats). Nothing else is patched."""

from pathlib import Path

from _recipe import Step, write_images

G = "_gauntlet"
SITE = f"{G}/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "OMP_NUM_THREADS": "1"}

SITECUSTOMIZE = '''\
# gauntlet: torch APIs stylegan3 (written for torch 1.9) relies on and newer torch dropped; not CUDA matters.
try:
    import torch.optim as _optim
    import torch.utils.data as _data

    def _sampler_init(self, data_source=None):  # torch < 2.2 accepted (and ignored) the data source
        pass

    _data.Sampler.__init__ = _sampler_init

    _adam_init = _optim.Adam.__init__

    def _adam_init_float_betas(self, *args, **kwargs):  # train.py passes betas=[0, 0.99]
        if "betas" in kwargs:
            kwargs["betas"] = tuple(float(b) if isinstance(b, int) else b for b in kwargs["betas"])
        _adam_init(self, *args, **kwargs)

    _optim.Adam.__init__ = _adam_init_float_betas
except Exception:
    pass
'''

# train.py's own flags, scaled down: the smallest resolution its StyleGAN2 discriminator takes (8), 4 channels,
# a 1-layer mapping network, its minimum --kimg=1 and --tick=1, 1 data-loader worker, no metrics.
TRAIN = ("python train.py --outdir={out} --cfg=stylegan2 --data={G}/tiny-8x8.zip --gpus={gpus} --batch=64 "
         "--gamma=1 --kimg=1 --tick=1 --snap=1 --metrics=none --cbase=64 --cmax=4 --map-depth=1 --workers=1")
AUG = dict(xflip=1, rotate90=1, xint=1, scale=1, rotate=1, aniso=1, xfrac=1, brightness=1, contrast=1, lumaflip=1,
           hue=1, saturation=1)


def _snapshot(tree: Path, G_kwargs: dict, D_kwargs: dict, resolution: int, path: Path) -> None:
    """A network pickle as training_loop.py saves it: G, D, G_ema, augment_pipe (each a deep copy, eval,
    requires_grad off, .cpu()) and training_set_kwargs, built from the tree's own classes."""
    import copy
    import pickle
    import sys

    import torch

    sys.path.insert(0, str(tree))
    try:
        import dnnlib

        torch.manual_seed(0)
        common = dict(c_dim=0, img_resolution=resolution, img_channels=3)
        net_G = dnnlib.util.construct_class_by_name(**G_kwargs, **common).train().requires_grad_(False)
        net_D = dnnlib.util.construct_class_by_name(**D_kwargs, **common).train().requires_grad_(False)
        augment = dnnlib.util.construct_class_by_name(class_name="training.augment.AugmentPipe", **AUG)
        data = dict(G=net_G, D=net_D, G_ema=copy.deepcopy(net_G).eval(), augment_pipe=augment,
                    training_set_kwargs=dict(class_name="training.dataset.ImageFolderDataset",
                                             path=f"{G}/tiny-{resolution}x{resolution}.zip", use_labels=False,
                                             max_size=8, xflip=False, resolution=resolution, random_seed=0))
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

    D_kwargs = dict(class_name="training.networks_stylegan2.Discriminator", block_kwargs=dict(freeze_layers=0),
                    mapping_kwargs={}, epilogue_kwargs=dict(mbstd_group_size=4), channel_base=64, channel_max=4)
    # what train.py builds for --cfg=stylegan2 --cbase=64 --cmax=4 --map-depth=1: the fine-tune's starting point
    G2 = dict(class_name="training.networks_stylegan2.Generator", z_dim=512, w_dim=512,
              mapping_kwargs=dict(num_layers=1), channel_base=64, channel_max=4,
              fused_modconv_default="inference_only")
    _snapshot(tree, G2, D_kwargs, 8, work / "pretrained" / "stylegan2-tiny-8x8.pkl")
    # what train.py builds for --cfg=stylegan3-t --cbase=256 --cmax=8 at 16x16, for gen_images.py
    G3 = dict(class_name="training.networks_stylegan3.Generator", z_dim=512, w_dim=512,
              mapping_kwargs=dict(num_layers=2), channel_base=256, channel_max=8,
              magnitude_ema_beta=0.5 ** (32 / (20 * 1e3)))
    _snapshot(tree, G3, {**D_kwargs, "channel_base": 256, "channel_max": 8}, 16,
              work / "pretrained" / "stylegan3-t-tiny-16x16.pkl")


RUN = f"{G}/runs/00000-stylegan2-tiny-8x8-gpus1-batch64-gamma1"

STEPS = [
    Step("dataset", f"python dataset_tool.py --source={G}/images --dest={G}/tiny-8x8.zip",
         outputs=[f"{G}/tiny-8x8.zip"], env=ENV, timeout=120),
    Step("train", TRAIN.format(out=f"{G}/runs", G=G, gpus=1),
         outputs=[f"{RUN}/network-snapshot-000001.pkl", f"{RUN}/fakes000001.png"], env=ENV, timeout=300),
    Step("gen_images", f"python gen_images.py --outdir={G}/out --trunc=1 --seeds=0-1 "
                       f"--network={RUN}/network-snapshot-000001.pkl",
         outputs=[f"{G}/out/seed0000.png", f"{G}/out/seed0001.png"], env=ENV, timeout=180),
    Step("gen_images-stylegan3", f"python gen_images.py --outdir={G}/out3 --trunc=0.7 --seeds=2 "
                                 f"--translate=0.3,1 --rotate=10 --network={G}/pretrained/stylegan3-t-tiny-16x16.pkl",
         outputs=[f"{G}/out3/seed0002.png"], env=ENV, timeout=180),
    Step("resume", TRAIN.format(out=f"{G}/runs-resume", G=G, gpus=1)
         + f" --resume={G}/pretrained/stylegan2-tiny-8x8.pkl",
         outputs=[f"{G}/runs-resume/00000-stylegan2-tiny-8x8-gpus1-batch64-gamma1/network-snapshot-000001.pkl"],
         env=ENV, timeout=300),
    Step("ddp", TRAIN.format(out=f"{G}/runs-ddp", G=G, gpus=2),
         outputs=[f"{G}/runs-ddp/00000-stylegan2-tiny-8x8-gpus2-batch64-gamma1/network-snapshot-000001.pkl"],
         env=ENV, timeout=300),
]
