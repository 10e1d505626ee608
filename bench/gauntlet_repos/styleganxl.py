"""StyleGAN-XL's README commands, tiny: dataset_tool.py turns synthetic PNGs into 16x16 and 32x32 dataset zips
(the README's `--resolution=... --transform=center-crop`); train.py runs the README's stem command (--cfg=stylegan3-t
--mirror=1 --syn_layers ...) at 16x16 with its own capacity flags turned down (--cbase/--cmax/--syn_layers,
--batch=2 --batch-gpu=2, --metrics=none, 1 data-loader worker) and the repository's own restart loop
(--restart_every=1: after its first tick train.py writes network-snapshot.pkl into the run directory and exits with
code 3, "Restart: exit with code 3"; a step takes 3 as success), on one process and with --gpus=2
(torch.multiprocessing.spawn + nccl in the repository); gen_images.py and gen_video.py (the README's sampling
commands: --trunc=0.7 --seeds --batch-sz 1, and a 1x1 grid with two frames by --w-frames) from a checkpoint; the
README's super-resolution stage (--superres --up_factor 2 --head_layers --path_stem) at 32x32 on that checkpoint; and
the restart from it (train.py run again on the run directory holding network-snapshot.pkl loads it and continues).

The checkpoint is written by prepare() as training_loop.py writes it on a CUDA machine: ``dill.dump`` of
dict(G, D, G_ema, augment_pipe, training_set_kwargs, progress) where the networks are pickled as they sit on the
device (training_loop.py comments out the ``.cpu()``), so on a GPU box every storage in it is tagged ``cuda:0``;
prepare() tags them so at pickling time (as ``save_cuda_checkpoint`` does for torch.save). Its networks are the tree's
own classes, built with the kwargs train.py builds for these flags, so on the port the pickled G carries the ported
network source (torch_utils.persistence stores it); a real GPU run's pickle carries the unported source.

The projected discriminator (train.py hard-codes backbones deit_base_distilled_patch16_224 and tf_efficientnet_lite0)
and the loss's classifier (deit_small_distilled_patch16_224, built whatever --cls_weight) are timm 0.4.12 models
created with pretrained=True: prepare() writes random weights (float16, to halve the disk) under the file names
timm's URLs give, in a torch hub cache at _gauntlet/torch, and the steps set TORCH_HOME to it. Nothing is downloaded.

Not run: calc_metrics.py and training metrics (they download Inception), run_inversion.py (downloads VGG16),
run_stylemc.py (CLIP weights), the OpenGL visualizer, gen_class_samplesheet.py (class-conditional ImageNet models).
The steps set OMP_NUM_THREADS=1 and put a ``sitecustomize`` on PYTHONPATH restoring ``Sampler.__init__(data_source)``
(misc.InfiniteSampler calls it; torch >= 2.2 removed the argument) and float Adam betas (train.py passes
betas=[0, 0.99]): both fail the original on every device with a current torch, as in the stylegan3 recipe."""

from pathlib import Path

from _recipe import Step, cuda_tags, write_images

G = "_gauntlet"
SITE = f"{G}/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "OMP_NUM_THREADS": "1", "TORCH_HOME": "{tree}/" + G + "/torch"}

SITECUSTOMIZE = '''\
# gauntlet: torch APIs stylegan-xl (written for torch 1.9) relies on and newer torch dropped; not CUDA matters.
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

FIRST_TICK = '''\
"""gauntlet: run a train.py command unchanged; once it prints its first status line ("tick 0 ..."), end it and its
spawned workers (its own process group) and exit 0. If it exits first, exit with its status."""
import os
import signal
import subprocess
import sys

process = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                           text=True, bufsize=1)
for line in process.stdout:
    sys.stdout.write(line)
    sys.stdout.flush()
    if line.startswith("tick 0 "):
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        print("gauntlet: first tick reached; training stopped")
        sys.exit(0)
sys.exit(process.wait())
'''

CBASE, CMAX, SYN_LAYERS, BATCH = 64, 8, 3, 2

# train.py's own flags, scaled down. `|| [ $? -eq 3 ]`: the restart loop's exit code after a tick with a checkpoint.
TRAIN = ("{launcher}python -u train.py --outdir={out} --cfg=stylegan3-t --data={G}/tiny{res}.zip --gpus={gpus} --batch={batch} "
         "--batch-gpu={batch_gpu} --mirror=1 --snap=1 --tick=1 --kimg=1 --syn_layers=" + str(SYN_LAYERS)
         + f" --cbase={CBASE} --cmax={CMAX} --metrics=none --workers=1 --restart_every=1" + "{extra}"
         " || [ $? -eq 3 ]")

RUN = "00000-stylegan3-t-tiny16-gpus1-batch2"
CKPT = f"{G}/runs-restart/{RUN}/network-snapshot.pkl"

TIMM_MODELS = ("deit_base_distilled_patch16_224", "tf_efficientnet_lite0", "deit_small_distilled_patch16_224")


def _fake_timm_weights(tree: Path) -> None:
    """Random weights for timm's pretrained=True, where torch.hub looks for them (TORCH_HOME/hub/checkpoints)."""
    import os

    import torch

    os.environ["TORCH_HOME"] = str(tree / G / "torch")
    import timm

    folder = tree / G / "torch" / "hub" / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for name in TIMM_MODELS:
        model = timm.create_model(name, pretrained=False)
        url = model.default_cfg["url"]
        state = {k: (v.half() if v.is_floating_point() else v) for k, v in model.state_dict().items()}
        torch.save(state, folder / url.rsplit("/", 1)[-1])


def _cuda_checkpoint(tree: Path, path: Path) -> None:
    """network-snapshot.pkl as training_loop.py writes it on rank 0 of a CUDA run with --restart_every: dill.dump of
    the networks as they sit on the device (storages tagged cuda:0) and the progress counters."""
    import sys

    import dill
    import torch

    sys.path.insert(0, str(tree))
    try:
        import dnnlib

        torch.manual_seed(0)
        common = dict(c_dim=0, img_resolution=16, img_channels=3)
        # what train.py builds for --cfg=stylegan3-t --batch=2 --cbase --cmax --syn_layers
        G_kwargs = dnnlib.EasyDict(class_name="training.networks_stylegan3_resetting.Generator", z_dim=64, w_dim=512,
                                   mapping_kwargs=dnnlib.EasyDict(rand_embedding=False, num_layers=2),
                                   channel_base=CBASE * 2, channel_max=CMAX * 2,
                                   magnitude_ema_beta=0.5 ** (BATCH / (20 * 1e3)), conv_kernel=3,
                                   use_radial_filters=False, num_layers=SYN_LAYERS)
        D_kwargs = dnnlib.EasyDict(class_name="pg_modules.discriminator.ProjectedDiscriminator",
                                   backbones=["deit_base_distilled_patch16_224", "tf_efficientnet_lite0"],
                                   diffaug=True, interp224=True,
                                   backbone_kwargs=dnnlib.EasyDict(cout=64, expand=True, proj_type=2, num_discs=4,
                                                                   cond=False))
        net_G = dnnlib.util.construct_class_by_name(**G_kwargs, **common).train().requires_grad_(False)
        net_D = dnnlib.util.construct_class_by_name(**D_kwargs, **common).train().requires_grad_(False)
        import copy

        data = dict(G=net_G, D=net_D, G_ema=copy.deepcopy(net_G).eval(), augment_pipe=None,
                    training_set_kwargs=dict(class_name="training.dataset.ImageFolderDataset",
                                             path=f"{G}/tiny16.zip", use_labels=False, max_size=8, xflip=True,
                                             resolution=16, random_seed=0))
        data["progress"] = {"cur_nimg": torch.LongTensor([BATCH]), "cur_tick": torch.LongTensor([0]),
                            "batch_idx": torch.LongTensor([1]), "best_fid": 9999,
                            "pl_mean": torch.zeros([])}
        path.parent.mkdir(parents=True, exist_ok=True)
        with cuda_tags(), open(path, "wb") as handle:
            dill.dump(data, handle)
    finally:
        sys.path.remove(str(tree))


def prepare(tree: Path) -> None:
    work = tree / G
    write_images(work / "images", count=8, size=32, class_folders=False)
    site = tree / SITE
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "first_tick.py").write_text(FIRST_TICK)
    _fake_timm_weights(tree)
    _cuda_checkpoint(tree, tree / CKPT)


def _train(out, res=16, gpus=1, batch=BATCH, extra="", first_tick=False):
    launcher = f"python {G}/first_tick.py " if first_tick else ""
    return TRAIN.format(out=out, G=G, res=res, gpus=gpus, batch=batch, batch_gpu=batch // gpus, extra=extra,
                        launcher=launcher)


STEPS = [
    Step("dataset16", f"python dataset_tool.py --source={G}/images --dest={G}/tiny16.zip --resolution=16x16 "
                      "--transform=center-crop", outputs=[f"{G}/tiny16.zip"], env=ENV, timeout=120),
    Step("dataset32", f"python dataset_tool.py --source={G}/images --dest={G}/tiny32.zip --resolution=32x32 "
                      "--transform=center-crop", outputs=[f"{G}/tiny32.zip"], env=ENV, timeout=120),
    Step("train", _train(f"{G}/runs"),
         outputs=[f"{G}/runs/{RUN}/network-snapshot.pkl", f"{G}/runs/{RUN}/fakes_init.png",
                  f"{G}/runs/{RUN}/fakes000000.png"], env=ENV, timeout=300),
    Step("gen_images", f"python gen_images.py --outdir={G}/out --trunc=0.7 --seeds=10-11 --batch-sz 1 "
                       f"--network={CKPT}",
         outputs=[f"{G}/out/seed0010.png", f"{G}/out/seed0011.png"], env=ENV, timeout=180),
    Step("gen_video", f"python gen_video.py --output={G}/lerp.mp4 --trunc=0.7 --seeds=0-1 --grid=1x1 --w-frames=2 "
                      f"--network={CKPT}", outputs=[f"{G}/lerp.mp4"], env=ENV, timeout=180),
    Step("superres", _train(f"{G}/runs-superres", res=32, extra=f" --superres --up_factor=2 --head_layers=4 "
                                                                 f"--path_stem={CKPT}", first_tick=True),
         outputs=[f"{G}/runs-superres/00000-stylegan3-t-tiny32-gpus1-batch2/fakes_init.png"],
         env=ENV, timeout=300),
    Step("restart", _train(f"{G}/runs-restart"),
         outputs=[CKPT, f"{G}/runs-restart/{RUN}/stats.jsonl"], env=ENV, timeout=300),
    Step("ddp", _train(f"{G}/runs-ddp", gpus=2, batch=4, first_tick=True),
         outputs=[f"{G}/runs-ddp/00000-stylegan3-t-tiny16-gpus2-batch4/stats.jsonl"], env=ENV, timeout=300),
]
