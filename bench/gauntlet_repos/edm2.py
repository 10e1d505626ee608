"""EDM2's README commands, tiny: dataset_tool.py ``convert`` on synthetic 16x16 PNGs in two class folders (the labels
come from the folder names), once as is and once to 8x8 with the README's ``--transform=center-crop-dhariwal``;
``encode`` of the 16x16 archive to VAE latents (8x8x4 mean/std, 8 channels) through a tiny random diffusers
AutoencoderKL laid out where load_stability_vae looks for 'stabilityai/sd-vae-ft-mse' ($DNNLIB_CACHE_DIR/diffusers);
train_edm2.py with the smallest preset (edm2-img512-xxs: 64 channels, the --channels minimum) for two iterations of 4
images (--batch/--duration/--status/--snapshot/--checkpoint) on the 8x8 pixel dataset, under ``torchrun --standalone
--nproc_per_node=2`` (the README's launcher), and resumed as the README resumes (the same command line again) from a
training-state-*.pt written as a CUDA machine writes it (the repository's own CheckpointIO.save, storages tagged
cuda:0); reconstruct_phema.py on a folder of raw snapshots; generate_images.py from the trained snapshot (EDM2
sampler), with autoguidance (the post-hoc EMA reconstruction as the guiding network), from a latent model decoded
through the VAE, and from the torchrun run's snapshot under torchrun with 2 processes and --subdirs;
calculate_metrics.py ``ref`` (FID and FD_DINOv2) and ``calc`` (FD_DINOv2: FID's Frechet distance is scipy's sqrtm of
a 2048x2048 matrix, over two minutes on this shared runner); count_flops.py on the trained snapshot.

Not run, for the shared 2-core runner's budget: a training run on the latent dataset (the latent model is a pickle
prepare() writes), toy_example.py plot (over 300 s here: 16k-sample trajectories and 400x400 density grids) and
train (4096 iterations of 4096 samples, no flag to shorten it), calculate_metrics.py gen under torchrun (torchrun's
argument parser takes gen's --num for an abbreviation of its own --numa-binding). dataset_tool.py decode is not run:
it lists only image files, so on the .npy archive encode writes it decodes nothing (a repository bug).

Nothing is downloaded. dnnlib's ``open_url`` looks a URL up in ``$DNNLIB_CACHE_DIR/downloads/<md5(url)>_*`` first:
prepare() writes there a stand-in for the Inception-v3 pickle calculate_metrics.py names (a fixed random projection
to 2048 features). DINOv2 comes from ``torch.hub.load('facebookresearch/dinov2:main', ...)`` with the hub directory
$DNNLIB_CACHE_DIR/torch_hub: prepare() writes a hubconf.py there whose ``dinov2_vitl14`` is a tiny random module with
DINOv2-L's 1024 features. The raw snapshots for reconstruct_phema.py (the README downloads them with rclone) are small
Precond networks of the tree's own classes at two training times and the two EMA lengths training writes.

The steps put a ``sitecustomize`` on PYTHONPATH restoring ``Sampler.__init__(data_source)`` (misc.InfiniteSampler
calls ``super().__init__(dataset)``; newer torch refuses it on every device); the resume sets
TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (the training state holds a dnnlib.EasyDict, which torch >= 2.6 refuses
weights-only everywhere). The original fails its first CUDA step, dataset-encode, at dataset_tool.py:401
(``.to('cuda')``), and train at torch_utils/distributed.py:41 (nccl).
"""

import hashlib
from pathlib import Path

from _recipe import SAMPLER_SHIM, Step, cuda_tags, write_images

G = "_gauntlet"
CACHE = f"{G}/dnnlib-cache"
SITE = f"{G}/site"
ENV = {"OMP_NUM_THREADS": "1", "DNNLIB_CACHE_DIR": "{tree}/" + CACHE, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg",
       "PYTHONPATH": "{tree}/" + SITE}

SITECUSTOMIZE = '''\
# gauntlet: a torch API edm2 relies on and newer torch dropped; not a CUDA matter.
''' + SAMPLER_SHIM

INCEPTION = "https://api.ngc.nvidia.com/v2/models/nvidia/research/stylegan3/versions/1/files/metrics/inception-2015-12-05.pkl"

DETECTORS = '''\
"""gauntlet: stand-ins for the feature detectors calculate_metrics.py downloads. Fixed random projections of pooled
pixels, not Inception-v3 or DINOv2."""
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


class TinyDINOv2(torch.nn.Module):
    def __init__(self):
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        self.proj = torch.nn.Linear(3 * 4 * 4, 1024)
        with torch.no_grad():
            self.proj.weight.copy_(torch.randn(1024, 48, generator=generator) / 8)
            self.proj.bias.zero_()

    def forward(self, x):
        return self.proj(torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1))
'''

HUBCONF = '''\
"""gauntlet: a stand-in for facebookresearch/dinov2's hubconf (no download)."""
dependencies = ["torch"]


def dinov2_vitl14(*args, **kwargs):
    import gauntlet_detectors
    return gauntlet_detectors.TinyDINOv2()
'''

PIX_RUN = f"{G}/runs/pix"
LAT_PKL = "pretrained/edm2-img16-latent-0000002-0.100.pkl"
DDP_RUN = f"{G}/runs/ddp"
RESUME_RUN = f"{G}/runs/resume"
LAUNCH2 = "torchrun --standalone --nproc_per_node=2"
# Two iterations of 4 images; status every iteration; snapshots at 1Ki (the one at 0 kimg is always written);
# no checkpoint unless asked (a training state of this network is ~560 MB).
TRAIN = ("train_edm2.py --outdir={out} --data={data} --preset=edm2-img512-xxs --batch=4 --duration={duration} "
         "--status=4 --snapshot=1Ki --checkpoint={checkpoint}")


def _md5_name(url: str) -> str:
    return hashlib.md5(url.encode("utf-8")).hexdigest() + "_" + url.rsplit("/", 1)[-1]


def _tiny_vae(folder: Path) -> None:
    """A tiny random diffusers AutoencoderKL (2x down, 4 latent channels) in the layout of a Hugging Face cache, where
    load_stability_vae('stabilityai/sd-vae-ft-mse') looks with local_files_only=True ($DNNLIB_CACHE_DIR/diffusers)."""
    import diffusers
    import torch

    torch.manual_seed(0)
    vae = diffusers.AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                                  up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16),
                                  layers_per_block=1, latent_channels=4, norm_num_groups=8, sample_size=16)
    cache = folder / "models--stabilityai--sd-vae-ft-mse"
    revision = "0" * 40
    snapshot = cache / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    vae.save_pretrained(snapshot)
    (cache / "refs").mkdir(exist_ok=True)
    (cache / "refs" / "main").write_text(revision)


def prepare(tree: Path) -> None:
    import pickle
    import sys

    import torch

    work = tree / G
    write_images(work / "images", count=8, size=16, classes=("cat", "dog"))
    cache = tree / CACHE
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    _tiny_vae(cache / "diffusers")
    hub = cache / "torch_hub" / "facebookresearch_dinov2_main"
    hub.mkdir(parents=True, exist_ok=True)
    (hub / "hubconf.py").write_text(HUBCONF)
    site = tree / SITE
    site.mkdir(parents=True, exist_ok=True)
    (site / "gauntlet_detectors.py").write_text(DETECTORS)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)

    sys.path.insert(0, str(tree))
    sys.path.insert(0, str(site))
    try:
        import dnnlib
        import gauntlet_detectors
        from torch_utils import distributed as dist
        from training import encoders, networks_edm2, phema, training_loop

        torch.manual_seed(0)
        with open(downloads / _md5_name(INCEPTION), "wb") as handle:
            pickle.dump(gauntlet_detectors.TinyInception().eval().requires_grad_(False), handle)

        # Raw snapshots for reconstruct_phema.py, as training writes them (network-snapshot-KIMG-STD.pkl, the EMA
        # moved to the CPU in float16), from a small Precond of the tree's own classes: 8x8 RGB, 2 classes.
        raw = work / "raw-snapshots"
        raw.mkdir(parents=True, exist_ok=True)
        small = dict(img_resolution=8, img_channels=3, label_dim=2, model_channels=16, channel_mult=[1, 2],
                     num_blocks=1, attn_resolutions=[4])
        for nimg in (1024, 2048):
            for std in (0.050, 0.100):
                net = networks_edm2.Precond(**small).eval().requires_grad_(False).to(torch.float16)
                data = dnnlib.EasyDict(encoder=encoders.StandardRGBEncoder(), loss_fn=training_loop.EDM2Loss(),
                                       dataset_kwargs=dict(class_name="training.dataset.ImageFolderDataset",
                                                           path=f"{G}/pix8.zip", use_labels=True), ema=net)
                with open(raw / f"network-snapshot-{nimg // 1000:07d}-{std:.3f}.pkl", "wb") as handle:
                    pickle.dump(data, handle)

        # A latent-diffusion model pickle like the README's ImageNet-512 ones: the network on 8x8x4 latents and the
        # StabilityVAEEncoder (pickled without its VAE, which generate_images.py loads from the Hugging Face cache).
        net = networks_edm2.Precond(**dict(small, img_channels=4)).eval().requires_grad_(False).to(torch.float16)
        data = dnnlib.EasyDict(encoder=encoders.StabilityVAEEncoder(), loss_fn=training_loop.EDM2Loss(),
                               dataset_kwargs=dict(class_name="training.dataset.ImageFolderDataset",
                                                   path=f"{G}/lat.zip", use_labels=True), ema=net)
        (work / "pretrained").mkdir(parents=True, exist_ok=True)
        with open(work / LAT_PKL, "wb") as handle:
            pickle.dump(data, handle)

        # A training state at 8 images, as a CUDA machine writes it (CheckpointIO.save, every storage tagged cuda:0),
        # in the run directory the resume step trains in again: the network train_edm2.py builds for the 8x8 pixel
        # dataset with --preset=edm2-img512-xxs, Adam after one step, the post-hoc EMA's two averages.
        torch.manual_seed(0)
        net = networks_edm2.Precond(img_resolution=8, img_channels=3, label_dim=2, model_channels=64, dropout=0.0,
                                    use_fp16=True).train().requires_grad_(True)
        loss_fn = training_loop.EDM2Loss(P_mean=-0.4, P_std=1.0)
        optimizer = torch.optim.Adam(net.parameters(), betas=(0.9, 0.99))
        images = torch.rand([4, 3, 8, 8]) * 2 - 1
        labels = torch.nn.functional.one_hot(torch.tensor([0, 1, 0, 1]), 2).to(torch.float32)
        loss_fn(net=net, images=images, labels=labels).sum().mul(1 / 4).backward()
        for g in optimizer.param_groups:
            g["lr"] = 1e-5
        optimizer.step()
        ema = phema.PowerFunctionEMA(net=net)
        ema.update(cur_nimg=8, batch_size=4)
        state = dnnlib.EasyDict(cur_nimg=8, total_elapsed_time=1.0)
        run = tree / RESUME_RUN
        run.mkdir(parents=True, exist_ok=True)
        with cuda_tags():
            dist.CheckpointIO(state=state, net=net, loss_fn=loss_fn, optimizer=optimizer, ema=ema).save(
                str(run / "training-state-0000000.pt"), verbose=False)
    finally:
        sys.path.remove(str(site))
        sys.path.remove(str(tree))
        for name in [m for m in sys.modules if m.split(".")[0] in ("dnnlib", "training", "torch_utils",
                                                                    "gauntlet_detectors")]:
            del sys.modules[name]


PIX_SNAP = f"{PIX_RUN}/network-snapshot-0000000-0.100.pkl"
LAT_SNAP = f"{G}/{LAT_PKL}"
DDP_SNAP = f"{DDP_RUN}/network-snapshot-0000000-0.050.pkl"
PHEMA = f"{G}/phema/phema-0000002-0.075.pkl"

STEPS = [
    # the README's step 2 (convert with center-crop-dhariwal), at 8x8 from 16x16 sources, and as is at 16x16
    Step("dataset-convert", f"python dataset_tool.py convert --source={G}/images --dest={G}/pix16.zip && "
                            f"python dataset_tool.py convert --source={G}/images --dest={G}/pix8.zip "
                            "--resolution=8x8 --transform=center-crop-dhariwal",
         outputs=[f"{G}/pix16.zip", f"{G}/pix8.zip"], env=ENV, timeout=120),
    # the README's step 3: pixels to VAE latents
    Step("dataset-encode", f"python dataset_tool.py encode --source={G}/pix16.zip --dest={G}/lat.zip",
         outputs=[f"{G}/lat.zip"], env=ENV, timeout=180),
    # the README's training command, one process, on the pixel dataset and on the latent dataset
    Step("train", "python " + TRAIN.format(out=PIX_RUN, data=f"{G}/pix8.zip", duration=8, checkpoint=0),
         outputs=[PIX_SNAP, f"{PIX_RUN}/stats.jsonl", f"{PIX_RUN}/log.txt"], env=ENV, timeout=420),
    Step("train-torchrun", f"{LAUNCH2} " + TRAIN.format(out=DDP_RUN, data=f"{G}/pix8.zip", duration=4, checkpoint=0),
         outputs=[DDP_SNAP, f"{DDP_RUN}/stats.jsonl"], env=ENV, timeout=480),
    # "To resume training, simply run the same train_edm2.py command line again": from the CUDA-written state at 8
    # images to 16, saving a checkpoint at the end
    Step("train-resume", "python " + TRAIN.format(out=RESUME_RUN, data=f"{G}/pix8.zip", duration=12, checkpoint="1Ki"),
         outputs=[f"{RESUME_RUN}/stats.jsonl", f"{RESUME_RUN}/training-state-0000000.pt"],
         env={**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}, timeout=480),
    Step("reconstruct-phema", f"python reconstruct_phema.py --indir={G}/raw-snapshots --outdir={G}/phema "
                              "--outstd=0.075",
         outputs=[PHEMA], env=ENV, timeout=120),
    Step("generate", f"python generate_images.py --net={PIX_SNAP} --outdir={G}/out/gen --seeds=0-3 --batch=4 --steps=4",
         outputs=[f"{G}/out/gen/000000.png", f"{G}/out/gen/000003.png"], env=ENV, timeout=240),
    Step("generate-autoguidance", f"python generate_images.py --net={PIX_SNAP} --gnet={PHEMA} --guidance=2.0 "
                                  f"--outdir={G}/out/autog --seeds=4-5 --steps=4 --class=1",
         outputs=[f"{G}/out/autog/000005.png"], env=ENV, timeout=240),
    Step("generate-latent", f"python generate_images.py --net={LAT_SNAP} --outdir={G}/out/lat --seeds=0-1 --steps=4",
         outputs=[f"{G}/out/lat/000001.png"], env=ENV, timeout=240),
    Step("generate-torchrun", f"{LAUNCH2} generate_images.py --net={DDP_SNAP} --outdir={G}/out/ddp --subdirs "
                              "--seeds=0-7 --batch=2 --steps=4",
         outputs=[f"{G}/out/ddp/000000/000000.png", f"{G}/out/ddp/000000/000007.png"], env=ENV, timeout=300),
    Step("metrics-ref", f"python calculate_metrics.py ref --data={G}/pix8.zip --dest={G}/refs/pix8.pkl",
         outputs=[f"{G}/refs/pix8.pkl"], env=ENV, timeout=240),
    Step("metrics-calc", f"python calculate_metrics.py calc --images={G}/out/ddp --ref={G}/refs/pix8.pkl --num=8 "
                         "--metrics=fd_dinov2",
         env=ENV, timeout=240),
    Step("count-flops", f"python count_flops.py {PIX_SNAP}", env=ENV, timeout=180),
]
