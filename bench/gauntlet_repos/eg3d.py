"""EG3D's README commands, tiny (run from eg3d/, the README's `cd eg3d`): dataset_tool.py turns synthetic 128x128
PNGs with a dataset.json of camera labels (the README's 25-float label: a flattened 4x4 cam2world pose and a 3x3
intrinsics matrix) into a dataset zip; train.py runs the README's FFHQ configuration (--cfg=ffhq
--gen_pose_cond=True) at the smallest resolution it takes (128, the 2x superresolution module) with its own
capacity flags turned down (--cbase/--cmax/--map-depth, a 16x16 neural rendering, --batch=4, --mbstd-group=2,
--metrics=none), on one process and with --gpus=2 (torch.multiprocessing.spawn + nccl in the repo), and the
README's second-stage fine-tune (--resume from a network pickle, --neural_rendering_resolution_final);
gen_samples.py (images and a --shapes .mrc at a small --shape-res) and gen_videos.py (the README's 2x2 grid, two
frames by --w-frames) from that pickle.

Training stops after its first tick: ``_gauntlet/first_tick.py`` runs train.py unchanged and, once it prints its
``tick 0`` status line, ends it (its own process group) and exits 0; a train.py that exits earlier gives its own
exit status. By then train.py has built the networks on its device, printed the module summaries, made its CUDA
timing events, exported reals.png, run one batch through all four phases (Gmain, Greg, Dmain, Dreg: every
interval divides batch 0, so the lazy regularizers run too), recorded the events, updated G_ema and read the
memory statistics for the status line. What comes next is not run: train.py's minimum --kimg=1 is 1000 images, and
every snapshot first renders a fixed 32x32 grid of fakes (1024 images at 128x128; ~1.4 s an image on this shared
CPU), so one tick costs tens of minutes here.

The pickle is a ``pickle.dump`` of the tree's own persistent networks (torch_utils.persistence stores each
module's source inside the pickle), moved ``.cpu()`` as training_loop.py does before saving, so a CUDA machine's
pickle holds CPU storages too; its generator carries the 16x16 neural rendering resolution a run with these flags
leaves it. Built with the tree's code in prepare(), it carries the tree's (on the port: the ported) network source;
a pickle from a real GPU run carries the unported source.

calc_metrics.py is not run: every metric downloads NVIDIA's Inception (a TorchScript pickle) from a URL. The
visualizer is an OpenGL GUI. The steps set OMP_NUM_THREADS=1 and put a ``sitecustomize`` on PYTHONPATH restoring
``Sampler.__init__(data_source)`` (misc.InfiniteSampler calls it; torch >= 2.2 removed the argument: it fails the
original on every device). Nothing else is patched."""

import json
import math
from pathlib import Path

from _recipe import SAMPLER_SHIM, Step, write_images

G = "_gauntlet"
SITE = f"{G}/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "OMP_NUM_THREADS": "1"}

SITECUSTOMIZE = '''\
# gauntlet: a torch API eg3d (written for torch 1.11) relies on and newer torch dropped; not a CUDA matter.
''' + SAMPLER_SHIM

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

# train.py's own flags, scaled down: the smallest dataset resolution it takes (128), 4 channels at most in the
# backbone and discriminator, a 1-layer mapping network, a 16x16 neural rendering, batch 4 (minibatch-std groups of
# 2, so --gpus=2 takes 2 a process), 1 data-loader worker, no metrics; stopped after its first tick.
TRAIN = ("python {G}/first_tick.py python -u train.py --outdir={out} --cfg=ffhq --data={G}/tiny-128.zip --gpus={gpus} "
         "--batch=4 --mbstd-group=2 --gamma=1 --gen_pose_cond=True --kimg=1 --tick=1 --snap=1 --metrics=none "
         "--cbase=256 --cmax=4 --map-depth=1 --workers=1 --neural_rendering_resolution_initial=16")

PKL = f"{G}/pretrained/network-snapshot-000000.pkl"  # the fine-tune's and the generators' network pickle
FOCAL = 4.2647  # FFHQ's normalized focal length (gen_videos.py, the README's intrinsics)


def _pose(yaw: float, pitch: float, radius: float = 2.7, pivot=(0.0, 0.0, 0.2)) -> list[float]:
    """camera_utils.LookAtPoseSampler.sample's cam2world matrix, flattened, in plain Python (y up, no roll)."""
    phi = math.acos(1 - 2 * (pitch / math.pi))
    origin = [radius * math.sin(phi) * math.cos(math.pi - yaw), radius * math.cos(phi),
              radius * math.sin(phi) * math.sin(math.pi - yaw)]

    def normalize(v):
        n = math.sqrt(sum(x * x for x in v))
        return [x / n for x in v]

    def cross(a, b):
        return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]

    forward = normalize([p - o for p, o in zip(pivot, origin)])
    right = [-x for x in normalize(cross([0.0, 1.0, 0.0], forward))]
    up = normalize(cross(forward, right))
    rows = [[right[i], up[i], forward[i], origin[i]] for i in range(3)] + [[0.0, 0.0, 0.0, 1.0]]
    return [x for row in rows for x in row]


def _snapshot(tree: Path, G_kwargs: dict, D_kwargs: dict, path: Path) -> None:
    """A network pickle as training_loop.py saves it: G, D, G_ema, augment_pipe=None (each a deep copy, eval,
    requires_grad off, .cpu()) and training_set_kwargs, built from the tree's own classes."""
    import copy
    import pickle
    import sys

    import torch

    sys.path.insert(0, str(tree))
    try:
        import dnnlib

        torch.manual_seed(0)
        common = dict(c_dim=25, img_resolution=128, img_channels=3)
        net_G = dnnlib.util.construct_class_by_name(**G_kwargs, **common).train().requires_grad_(False)
        net_G.register_buffer("dataset_label_std", torch.ones([25]))
        net_G.neural_rendering_resolution = 16  # what --neural_rendering_resolution_initial=16 leaves in G_ema
        net_D = dnnlib.util.construct_class_by_name(**D_kwargs, **common).train().requires_grad_(False)
        data = dict(training_set_kwargs=dict(class_name="training.dataset.ImageFolderDataset",
                                             path=f"{G}/tiny-128.zip", use_labels=True, max_size=8, xflip=False,
                                             resolution=128, random_seed=0))
        for name, module in [("G", net_G), ("D", net_D), ("G_ema", copy.deepcopy(net_G).eval()),
                             ("augment_pipe", None)]:
            if module is not None:
                module = copy.deepcopy(module).eval().requires_grad_(False).cpu()
            data[name] = module
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            pickle.dump(data, handle)
    finally:
        sys.path.remove(str(tree))


def prepare(tree: Path) -> None:
    work = tree / G
    images = work / "images"
    written = write_images(images, count=8, size=128, class_folders=False)
    intrinsics = [FOCAL, 0.0, 0.5, 0.0, FOCAL, 0.5, 0.0, 0.0, 1.0]
    labels = [[p.name, _pose(math.pi / 2 + 0.3 * (i / 7 - 0.5), math.pi / 2 + 0.1 * (i % 3 - 1)) + intrinsics]
              for i, p in enumerate(written)]
    (images / "dataset.json").write_text(json.dumps({"labels": labels}))
    site = tree / SITE
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "first_tick.py").write_text(FIRST_TICK)

    # what train.py builds for --cfg=ffhq --gen_pose_cond=True --cbase=256 --cmax=4 --map-depth=1 at 128x128:
    # the second-stage fine-tune's starting point
    rendering = {
        "image_resolution": 128, "disparity_space_sampling": False, "clamp_mode": "softplus",
        "superresolution_module": "training.superresolution.SuperresolutionHybrid2X",
        "c_gen_conditioning_zero": False, "gpc_reg_prob": 0.5, "c_scale": 1, "superresolution_noise_mode": "none",
        "density_reg": 0.25, "density_reg_p_dist": 0.004, "reg_type": "l1", "decoder_lr_mul": 1,
        "sr_antialias": True, "depth_resolution": 48, "depth_resolution_importance": 48, "ray_start": 2.25,
        "ray_end": 3.3, "box_warp": 1, "avg_camera_radius": 2.7, "avg_camera_pivot": [0, 0, 0.2]}
    G_kwargs = dict(class_name="training.triplane.TriPlaneGenerator", z_dim=512, w_dim=512,
                    mapping_kwargs=dict(num_layers=1), channel_base=256, channel_max=4,
                    fused_modconv_default="inference_only", rendering_kwargs=rendering, num_fp16_res=0,
                    sr_num_fp16_res=4, sr_kwargs=dict(channel_base=256, channel_max=4,
                                                      fused_modconv_default="inference_only"),
                    conv_clamp=None)
    D_kwargs = dict(class_name="training.dual_discriminator.DualDiscriminator", block_kwargs=dict(freeze_layers=0),
                    mapping_kwargs={}, epilogue_kwargs=dict(mbstd_group_size=2), channel_base=256, channel_max=4,
                    disc_c_noise=0, num_fp16_res=4, conv_clamp=256)
    _snapshot(tree, G_kwargs, D_kwargs, tree / PKL)


RUN = G + "/runs/00000-ffhq-tiny-128-gpus{gpus}-batch4-gamma1"

STEPS = [
    Step("dataset", f"python dataset_tool.py --source={G}/images --dest={G}/tiny-128.zip",
         outputs=[f"{G}/tiny-128.zip"], env=ENV, timeout=120),
    Step("train", TRAIN.format(out=f"{G}/runs", G=G, gpus=1),
         outputs=[RUN.format(gpus=1) + "/reals.png", RUN.format(gpus=1) + "/training_options.json"], env=ENV,
         timeout=300),
    Step("gen_samples", f"python gen_samples.py --outdir={G}/out --trunc=0.7 --shapes=true --shape-res=32 "
                        f"--seeds=0-1 --network={PKL}",
         outputs=[f"{G}/out/seed0000.png", f"{G}/out/seed0001.png", f"{G}/out/seed0001.mrc"], env=ENV, timeout=240),
    Step("gen_videos", f"python gen_videos.py --outdir={G}/vid --trunc=0.7 --seeds=0-3 --grid=2x2 --w-frames=2 "
                       f"--network={PKL}",
         outputs=[f"{G}/vid/interpolation.mp4"], env=ENV, timeout=240),
    Step("resume", TRAIN.format(out=f"{G}/runs-resume", G=G, gpus=1)
         + f" --resume={PKL} --neural_rendering_resolution_final=32",
         outputs=[f"{G}/runs-resume/00000-ffhq-tiny-128-gpus1-batch4-gamma1/reals.png"], env=ENV, timeout=300),
    Step("ddp", TRAIN.format(out=f"{G}/runs-ddp", G=G, gpus=2),
         outputs=[RUN.format(gpus=2).replace("/runs/", "/runs-ddp/") + "/training_options.json"], env=ENV,
         timeout=300),
]
