"""EDM's README commands, tiny: dataset_tool.py turns synthetic 16x16 PNGs in two class folders (the labels come
from the folder names) into a dataset zip; train.py trains the README's class-conditional DDPM++ configuration
(--cond=1 --arch=ddpmpp, EDM preconditioning, the default augmentation, no --seed: the seed is drawn on the device
and broadcast) at 16x16 with its own capacity flags turned down (--cbase/--cres), for its minimum duration (1 kimg,
--tick/--snap/--dump=1), on one process and under ``torchrun --standalone --nproc_per_node=2`` (nccl in the repo);
a --resume from a training-state-*.pt written as a CUDA machine writes it (every storage tagged cuda:0) beside the
network-snapshot pickle it names; generate.py from the trained snapshot with the EDM sampler, with the README's
stochastic ImageNet settings, with the Figure 2a ablation sampler, and under torchrun with 2 processes; fid.py ref on
the dataset. Not run, for this shared 2-core runner's budget (each was tried on a hand-made CPU copy of the
original): example.py (the README's first command; four 64-image grids, the ImageNet one at 511 network evaluations:
over 300 s here even with 8-channel networks), fid.py calc (the same calculate_inception_stats as fid.py ref, then
scipy's sqrtm of a 2048x2048 matrix: ~200 s here), and an NCSN++/VP --fp16=1 --batch-gpu run (~110 s; fp16 is taken
only on CUDA). prepare() still writes example.py's four stand-in pickles.

Nothing is downloaded. dnnlib's ``open_url`` looks a URL up in ``$DNNLIB_CACHE_DIR/downloads/<md5(url)>_*`` first;
prepare() writes there tiny random stand-ins for the four pretrained pickles example.py names (each a
``{'ema': net}`` pickle of the tree's own persistent networks, with the preconditioning, architecture and label count
of the pickle it replaces: VP/DDPM++ for CIFAR-10 (10 classes), FFHQ and AFHQv2, EDM/ADM for ImageNet (1000 classes)),
and for the Inception-v3 detector fid.py names (a small fixed random projection of 4x4-pooled pixels to the 2048
features fid.py expects, defined in ``_gauntlet/site/gauntlet_inception.py``). The persistence pickles carry the
tree's (on the port: the ported) network source; real pretrained pickles carry the unported source.

The steps set OMP_NUM_THREADS=1 and put a ``sitecustomize`` on PYTHONPATH restoring ``Sampler.__init__(data_source)``
(misc.InfiniteSampler calls ``super().__init__(dataset)``; torch >= 2.2 removed the argument, so it fails the original
on every device). The resume step sets
TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1: training_loop.py torch.load()s a pickled network (persistence classes), which
torch >= 2.6 refuses weights-only on every device. Nothing else is patched."""

import hashlib
from pathlib import Path

from _recipe import SAMPLER_SHIM, Step, save_cuda_checkpoint, write_images

G = "_gauntlet"
SITE = f"{G}/site"
CACHE = f"{G}/dnnlib-cache"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "OMP_NUM_THREADS": "1", "DNNLIB_CACHE_DIR": "{tree}/" + CACHE}

SITECUSTOMIZE = '''\
# gauntlet: a torch API edm (written for torch 1.12) relies on and newer torch dropped; not a CUDA matter.
''' + SAMPLER_SHIM

INCEPTION = '''\
"""gauntlet: a stand-in for the Inception-v3 feature detector fid.py downloads (a pickled module called as
detector(images_uint8, return_features=True) -> [N, 2048] features). A fixed random projection, not Inception."""
import torch


class TinyInception(torch.nn.Module):
    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.register_buffer("proj", torch.randn(3 * 4 * 4, 2048, generator=generator) / 8)

    def forward(self, images, return_features=False):
        x = images.to(torch.float32) / 255
        x = torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1)
        return x @ self.proj
'''

PRETRAINED = "https://nvlabs-fi-cdn.nvidia.com/edm/pretrained"
DETECTOR = ("https://api.ngc.nvidia.com/v2/models/nvidia/research/stylegan3/versions/1/files/metrics/"
            "inception-2015-12-05.pkl")

# What train.py builds for --arch=ddpmpp (EDM preconditioning) with --cbase=8 --cres=1 at 16x16, 2 classes, the
# default --augment (augment_dim=9) and --dropout; the resume's network must match it parameter for parameter.
DDPMPP = dict(model_type="SongUNet", embedding_type="positional", encoder_type="standard", decoder_type="standard",
              channel_mult_noise=1, resample_filter=[1, 1], model_channels=8, channel_mult=[1])

TRAIN = ("python train.py --outdir={out} --data={G}/tiny-16x16.zip --cond=1 --arch=ddpmpp --cbase=8 --cres=1 "
         "--duration=0.001 --batch=64 --tick=1 --snap=1 --dump=1 --workers=1")
LAUNCH2 = "torchrun --standalone --nproc_per_node=2"


def _md5_name(url: str) -> str:
    return hashlib.md5(url.encode("utf-8")).hexdigest() + "_" + url.rsplit("/", 1)[-1]


def prepare(tree: Path) -> None:
    import copy
    import pickle
    import sys

    import torch

    work = tree / G
    write_images(work / "images", count=16, size=16, classes=("cat", "dog"))
    site = tree / SITE
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (site / "gauntlet_inception.py").write_text(INCEPTION)
    downloads = tree / CACHE / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)

    sys.path.insert(0, str(tree))
    sys.path.insert(0, str(site))
    try:
        import dnnlib  # noqa: F401  (the tree's own packages, so the pickles carry the tree's classes)
        import gauntlet_inception
        from training import augment, loss, networks

        torch.manual_seed(0)
        with open(downloads / _md5_name(DETECTOR), "wb") as handle:
            pickle.dump(gauntlet_inception.TinyInception().eval().requires_grad_(False), handle)

        def snapshot(net):
            return copy.deepcopy(net).eval().requires_grad_(False).cpu()

        # example.py's four pretrained pickles, tiny: same preconditioning, architecture family and labels.
        # 8 channels, one resolution level at 64x64 and no attention there, so the README's 511-NFE ImageNet grid
        # of 64 images takes seconds; the CIFAR-10 one keeps two levels and attention at 16x16.
        song = dict(model_type="SongUNet", model_channels=8, num_blocks=1, embedding_type="positional",
                    channel_mult_noise=1, encoder_type="standard", decoder_type="standard", resample_filter=[1, 1])
        examples = {
            "edm-cifar10-32x32-cond-vp.pkl": networks.VPPrecond(img_resolution=32, img_channels=3, label_dim=10,
                                                                channel_mult=[1, 1], attn_resolutions=[16], **song),
            "edm-ffhq-64x64-uncond-vp.pkl": networks.VPPrecond(img_resolution=64, img_channels=3, label_dim=0,
                                                               channel_mult=[1], attn_resolutions=[], **song),
            "edm-afhqv2-64x64-uncond-vp.pkl": networks.VPPrecond(img_resolution=64, img_channels=3, label_dim=0,
                                                                 channel_mult=[1], attn_resolutions=[], **song),
            "edm-imagenet-64x64-cond-adm.pkl": networks.EDMPrecond(
                img_resolution=64, img_channels=3, label_dim=1000, model_type="DhariwalUNet", model_channels=8,
                channel_mult=[1], num_blocks=1, attn_resolutions=[]),
        }
        for name, net in examples.items():
            with open(downloads / _md5_name(f"{PRETRAINED}/{name}"), "wb") as handle:
                pickle.dump(dict(ema=snapshot(net)), handle)

        # A training run's state at kimg 0, as a CUDA machine writes it: network-snapshot-000000.pkl (the EMA etc.,
        # moved .cpu() as training_loop.py does) and training-state-000000.pt (the live network and Adam's state,
        # torch.save'd from the GPU: every storage tagged cuda:0).
        net = networks.EDMPrecond(img_resolution=16, img_channels=3, label_dim=2, augment_dim=9, dropout=0.13,
                                  use_fp16=False, **DDPMPP).train().requires_grad_(True)
        loss_fn = loss.EDMLoss()
        pipe = augment.AugmentPipe(p=0.12, xflip=1e8, yflip=1, scale=1, rotate_frac=1, aniso=1, translate_frac=1)
        optimizer = torch.optim.Adam(net.parameters(), lr=10e-4, betas=[0.9, 0.999], eps=1e-8)
        images = torch.rand([4, 3, 16, 16]) * 2 - 1
        labels = torch.nn.functional.one_hot(torch.tensor([0, 1, 0, 1]), 2).to(torch.float32)
        loss_fn(net=net, images=images, labels=labels, augment_pipe=pipe).sum().backward()
        optimizer.step()
        run = work / "pretrained-run"
        run.mkdir(parents=True, exist_ok=True)
        data = dict(ema=snapshot(net), loss_fn=loss_fn, augment_pipe=copy.deepcopy(pipe),
                    dataset_kwargs=dict(class_name="training.dataset.ImageFolderDataset",
                                        path=f"{G}/tiny-16x16.zip", use_labels=True, xflip=False, cache=True,
                                        resolution=16, max_size=32))
        with open(run / "network-snapshot-000000.pkl", "wb") as handle:
            pickle.dump(data, handle)
        save_cuda_checkpoint(dict(net=net, optimizer_state=optimizer.state_dict()),
                             run / "training-state-000000.pt")
    finally:
        sys.path.remove(str(site))
        sys.path.remove(str(tree))
        for name in [m for m in sys.modules if m.split(".")[0] in ("dnnlib", "training", "torch_utils",
                                                                    "gauntlet_inception")]:
            del sys.modules[name]


RUN = f"{G}/runs/00000-tiny-16x16-cond-ddpmpp-edm-gpus1-batch64-fp32"
SNAP = f"{RUN}/network-snapshot-000001.pkl"

STEPS = [
    Step("dataset", f"python dataset_tool.py --source={G}/images --dest={G}/tiny-16x16.zip",
         outputs=[f"{G}/tiny-16x16.zip"], env=ENV, timeout=120),
    Step("train", TRAIN.format(out=f"{G}/runs", G=G),
         outputs=[SNAP, f"{RUN}/training-state-000001.pt", f"{RUN}/stats.jsonl"], env=ENV, timeout=300),
    Step("generate", f"python generate.py --outdir={G}/out --seeds=0-7 --batch=8 --steps=6 --network={SNAP}",
         outputs=[f"{G}/out/000000.png", f"{G}/out/000007.png"], env=ENV, timeout=180),
    Step("generate-stochastic", f"python generate.py --outdir={G}/out-sto --seeds=8-9 --steps=6 --S_churn=40 "
                                f"--S_min=0.05 --S_max=50 --S_noise=1.003 --class=1 --network={SNAP}",
         outputs=[f"{G}/out-sto/000009.png"], env=ENV, timeout=180),
    Step("generate-ablation", f"python generate.py --outdir={G}/out-abl --seeds=10-11 --steps=6 --solver=euler "
                              f"--disc=vp --schedule=vp --scaling=vp --network={SNAP}",
         outputs=[f"{G}/out-abl/000011.png"], env=ENV, timeout=180),
    Step("generate-torchrun", f"{LAUNCH2} generate.py --outdir={G}/out-ddp --seeds=0-7 --batch=2 --steps=4 "
                              f"--network={SNAP}",
         outputs=[f"{G}/out-ddp/000000.png", f"{G}/out-ddp/000007.png"], env=ENV, timeout=240),
    Step("fid-ref", f"python fid.py ref --data={G}/tiny-16x16.zip --dest={G}/fid-refs/tiny-16x16.npz",
         outputs=[f"{G}/fid-refs/tiny-16x16.npz"], env=ENV, timeout=240),
    Step("resume", TRAIN.format(out=f"{G}/runs-resume", G=G) + f" --resume={G}/pretrained-run/training-state-000000.pt",
         outputs=[f"{G}/runs-resume/00000-tiny-16x16-cond-ddpmpp-edm-gpus1-batch64-fp32/network-snapshot-000001.pkl"],
         env={**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}, timeout=300),
    Step("train-torchrun", f"{LAUNCH2} " + TRAIN.format(out=f"{G}/runs-ddp", G=G).replace("python ", "", 1),
         outputs=[f"{G}/runs-ddp/00000-tiny-16x16-cond-ddpmpp-edm-gpus2-batch64-fp32/network-snapshot-000001.pkl"],
         env=ENV, timeout=300),
]
