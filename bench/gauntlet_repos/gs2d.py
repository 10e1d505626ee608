"""hbb1/2d-gaussian-splatting: the README's train / render (bounded mesh) commands and metrics.py, tiny.

- ``train``: ``python train.py -s <NeRF-synthetic scene> -m <model>`` on a synthetic blender ``lego``
  (transforms_{train,test}.json with camera_angle_x, 3 train + 1 test RGBA PNGs at 32x32, and a 256-point
  ``points3d.ply`` that readNerfSyntheticInfo uses instead of drawing its 100k random points), ``--eval`` (the test
  split stays apart), ``--iterations 3``; ``--densify_from_iter 1 --densification_interval 2`` so densify_and_prune
  (clone, split, prune) runs at iteration 2; ``--test_iterations 3`` so training_report renders the test and train
  views; the Gaussians (point_cloud/iteration_3/point_cloud.ply) and a training checkpoint (chkpnt3.pth) are saved.
  ``--port 0``: network_gui binds the viewer's listening socket to a free port (the default 6009 can be taken on a
  shared machine).
- ``train-resume-gpu-checkpoint``: the same command with ``--start_checkpoint`` on a checkpoint as a GPU machine
  writes it (``(gaussians.capture(), 3)``: the six Parameters, densification statistics and the Adam state of the
  six named parameter groups, every storage tagged cuda:0; prepare() writes it with ``save_cuda_checkpoint``);
  train.py loads it with a plain ``torch.load(checkpoint)`` and trains iterations 4-5 (densification at 4).
- ``render``: ``python render.py -m <model> -s <scene>`` (bounded TSDF mesh extraction): the train and test
  renders (renders/, gt/, vis/depth tiff), then open3d's ScalableTSDFVolume mesh (fuse.ply) and its post-processed
  copy (fuse_post.ply); ``--mesh_res 32`` (voxel_size = depth_trunc / mesh_res) and ``--num_cluster 1`` (the default
  50 indexes past the cluster list of a small mesh).
- ``metrics``: ``python metrics.py -m <model>``: SSIM, PSNR and LPIPS (VGG) of the test renders, results.json.

Left out: ``render.py --unbounded`` (marching_cubes_with_contraction asserts resolution % 512 == 0 and always
evaluates 512^3 points per block: far too big for the CPU), ``--render_path`` (240 frames and an ffmpeg video), the
scripts/ evaluations (datasets and GT point clouds).

Not from the network: lpipsPyTorch's VGG16 (torchvision ``vgg16(weights=IMAGENET1K_V1)``) and its linear heads
(``vgg.pth`` from raw.githubusercontent.com) both come through torch hub: prepare() writes random state dicts
under TORCH_HOME/hub/checkpoints (the VGG's tensors expanded from one small storage each).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"TORCH_HOME": "{tree}/" + G + "/torch", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
DATA = f"{G}/data/lego"
MODEL = f"{G}/out/lego"
RESUMED = f"{G}/out/lego_resume"
GPU_CKPT = f"{G}/gpu/chkpnt3.pth"
TRAIN = f"python train.py -s {DATA} --eval --port 0 --densify_from_iter 1 --densification_interval 2"
SIZE = 32
POINTS = 256
SH_DEGREE = 3


def _spherical(theta: float, phi: float, radius: float):
    """A camera-to-world matrix (NeRF/OpenGL convention) on a sphere, looking at the origin."""
    import numpy as np

    trans = np.eye(4)
    trans[2, 3] = radius
    p, t = phi / 180.0 * np.pi, theta / 180.0 * np.pi
    rot_phi = np.array([[1, 0, 0, 0], [0, np.cos(p), -np.sin(p), 0], [0, np.sin(p), np.cos(p), 0], [0, 0, 0, 1]])
    rot_theta = np.array([[np.cos(t), 0, -np.sin(t), 0], [0, 1, 0, 0], [np.sin(t), 0, np.cos(t), 0], [0, 0, 0, 1]])
    flip = np.array([[-1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]])
    return flip @ rot_theta @ rot_phi @ trans


def _blender(root: Path, rng) -> None:
    """nerf_synthetic's layout: transforms_{train,test}.json, RGBA PNGs (file_path without suffix), points3d.ply."""
    import json

    import numpy as np
    from PIL import Image

    angles = iter([-60.0, 0.0, 60.0, 30.0])
    for split, count in (("train", 3), ("test", 1)):
        (root / split).mkdir(parents=True, exist_ok=True)
        frames = []
        for i in range(count):
            rgba = rng.integers(0, 256, size=(SIZE, SIZE, 4), dtype=np.uint8)
            rgba[..., 3] = 255
            Image.fromarray(rgba, mode="RGBA").save(root / split / f"r_{i}.png")
            frames.append({"file_path": f"./{split}/r_{i}", "rotation": 0.0126,
                           "transform_matrix": _spherical(next(angles), -30.0, 4.0).tolist()})
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": 0.6911, "frames": frames}))
    # The layout storePly writes (x y z nx ny nz red green blue), in the cube readNerfSyntheticInfo draws from.
    header = ("ply\nformat ascii 1.0\nelement vertex %d\nproperty float x\nproperty float y\nproperty float z\n"
              "property float nx\nproperty float ny\nproperty float nz\nproperty uchar red\nproperty uchar green\n"
              "property uchar blue\nend_header\n" % POINTS)
    xyz = rng.random((POINTS, 3)) * 2.0 - 1.0
    rgb = rng.integers(0, 256, size=(POINTS, 3))
    lines = [f"{x:.6f} {y:.6f} {z:.6f} 0 0 0 {r} {g} {b}" for (x, y, z), (r, g, b) in zip(xyz, rgb)]
    (root / "points3d.ply").write_text(header + "\n".join(lines) + "\n")


def _gpu_checkpoint(path: Path) -> None:
    """``(gaussians.capture(), 3)`` as train.py's torch.save writes it on a GPU machine after 3 iterations."""
    import torch
    from torch import nn

    generator = torch.Generator().manual_seed(1)
    n = POINTS
    xyz = nn.Parameter(torch.rand(n, 3, generator=generator) * 2 - 1)
    f_dc = nn.Parameter(torch.randn(n, 1, 3, generator=generator) * 0.3)
    f_rest = nn.Parameter(torch.zeros(n, (SH_DEGREE + 1) ** 2 - 1, 3))
    opacity = nn.Parameter(torch.full((n, 1), -2.0))
    scaling = nn.Parameter(torch.full((n, 2), -2.5) + 0.1 * torch.randn(n, 2, generator=generator))
    rotation = nn.Parameter(torch.rand(n, 4, generator=generator))
    groups = [{"params": [p], "lr": 0.001, "name": name} for p, name in
              ((xyz, "xyz"), (f_dc, "f_dc"), (f_rest, "f_rest"), (opacity, "opacity"), (scaling, "scaling"),
               (rotation, "rotation"))]
    optimizer = torch.optim.Adam(groups, lr=0.0, eps=1e-15)
    for group in groups:
        group["params"][0].grad = torch.randn(group["params"][0].shape, generator=generator) * 1e-3
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    captured = (0, xyz, f_dc, f_rest, scaling, rotation, opacity, torch.zeros(n), torch.zeros(n, 1),
                torch.zeros(n, 1), optimizer.state_dict(), 4.4)
    save_cuda_checkpoint((captured, 3), path)


def _random_vgg(tree: Path) -> None:
    """torchvision's VGG16 ImageNet checkpoint (random, each tensor one small storage expanded) and lpips' VGG heads."""
    import math
    import os

    import torch
    import torchvision
    from torchvision.models import VGG16_Weights

    hub = tree / G / "torch" / "hub" / "checkpoints"
    hub.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in torchvision.models.vgg16().state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    state = {}
    for key, shape in shapes.items():
        if len(shape) == 1:
            state[key] = torch.zeros(shape)
        else:
            small = torch.randn(shape[0], 1, *shape[2:], generator=generator)
            small *= math.sqrt(2.0 / math.prod(shape[2:])) / shape[1]
            state[key] = small.expand(shape)
    torch.save(state, hub / os.path.basename(VGG16_Weights.IMAGENET1K_V1.url))
    heads = {f"lin{i}.model.1.weight": torch.rand(1, c, 1, 1, generator=generator) * 0.1
             for i, c in enumerate((64, 128, 256, 512, 512))}
    torch.save(heads, hub / "vgg.pth")


def prepare(tree: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    _blender(tree / DATA, rng)
    _gpu_checkpoint(tree / GPU_CKPT)
    _random_vgg(tree)


STEPS = [
    Step("train", f"{TRAIN} -m {MODEL} --iterations 3 --test_iterations 3 --save_iterations 3 "
                  "--checkpoint_iterations 3",
         outputs=[f"{MODEL}/point_cloud/iteration_3/point_cloud.ply", f"{MODEL}/chkpnt3.pth", f"{MODEL}/cfg_args"],
         env=ENV, timeout=600),
    Step("train-resume-gpu-checkpoint",
         f"{TRAIN} -m {RESUMED} --iterations 5 --start_checkpoint {GPU_CKPT} --test_iterations 5 "
         "--save_iterations 5 --checkpoint_iterations 5",
         outputs=[f"{RESUMED}/point_cloud/iteration_5/point_cloud.ply", f"{RESUMED}/chkpnt5.pth"],
         env=ENV, timeout=600),
    Step("render", f"python render.py -m {MODEL} -s {DATA} --mesh_res 32 --num_cluster 1",
         outputs=[f"{MODEL}/train/ours_3/renders/00000.png", f"{MODEL}/test/ours_3/renders/00000.png",
                  f"{MODEL}/test/ours_3/vis/depth_00000.tiff", f"{MODEL}/train/ours_3/fuse.ply",
                  f"{MODEL}/train/ours_3/fuse_post.ply"],
         env=ENV, timeout=600),
    Step("metrics", f"python metrics.py -m {MODEL}", outputs=[f"{MODEL}/results.json", f"{MODEL}/per_view.json"],
         env=ENV, timeout=600),
]
