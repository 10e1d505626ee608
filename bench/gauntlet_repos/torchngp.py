"""ashawkey/torch-ngp: the README's "Instant-ngp NeRF" commands (main_nerf.py), tiny.

- ``train-fox``: ``python main_nerf.py data/fox --workspace trial_nerf`` (fp32, the PyTorch ray marching: no
  --cuda_ray) on a synthetic ``fox`` (a colmap-style transforms.json with fl_x/fl_y/cx/cy/w/h and 5 JPEG frames at
  32x32 that prepare() writes; the first frame is the val split, the test split is 11 poses interpolated between two
  random frames), --iters 4: one epoch of the 4 training views and its checkpoint (ngp_ep0001.pth), then, as
  main_nerf.py does after training, the test renders and their video and save_mesh's marching-cubes mesh.
- ``continue-fox``: the same command with --iters 8: it reloads its latest checkpoint (use_checkpoint 'latest', the
  default: model, optimizer, scheduler, scaler, EMA) and trains epoch 2 (ngp_ep0002.pth).
- ``train-lego-O``: the README's blender command ``python main_nerf.py data/nerf_synthetic/lego --workspace
  trial_nerf -O --bound 1.0 --scale 0.8 --dt_gamma 0`` (-O: --fp16 --cuda_ray --preload) on a synthetic blender
  ``lego`` (transforms_{train,val,test}.json with camera_angle_x and RGBA PNGs at 32x32: 2 train, 1 val, 1 test),
  --iters 4; after training it evaluates the test split (PSNR and LPIPS: blender has ground truth), renders it and
  saves the mesh.
- ``test-lego-gpu-checkpoint``: the README's test mode, ``... -O --test``, from the trained checkpoint as a GPU
  machine writes it (``--ckpt PATH``: ngp_ep0002.pth re-saved by ``_gauntlet/gpu_checkpoint.py`` with every storage
  tagged cuda:0, as ``save_cuda_checkpoint`` does), in a workspace of its own: evaluation (PSNR, LPIPS), the test
  renders and video, the mesh.

Scaled down by the repository's own flags only: --iters, --num_rays, --num_steps (the PyTorch marcher's samples per
ray), --max_steps (the CUDA marcher's), --max_ray_batch. The hash grid (16 levels, 2^19 entries) and
save_mesh(resolution=256) are hard-coded in the repository, so they run at full size: every main_nerf.py run ends
with a 256^3 density query of the hash grid (16.7M points, about 3 CPU-minutes with a C++ CPU kernel), so the recipe
keeps to four runs.

Not from the network: lpips.LPIPS(net='alex') (PSNRMeter/LPIPSMeter in main_nerf.py) loads torchvision's
alexnet(pretrained=True) through torch hub: prepare() writes a random AlexNet state dict under TORCH_HOME
(expanded tensors: one small storage each); lpips' own linear heads ship in its wheel.
"""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
ENV = {"TORCH_HOME": "{tree}/" + G + "/torch", "OMP_NUM_THREADS": "1"}
FOX = f"python main_nerf.py {G}/data/fox --workspace {G}/trial_nerf --num_rays 64 --num_steps 16 --max_ray_batch 1024"
LEGO_DATA = f"{G}/data/nerf_synthetic/lego"
LEGO = (f"python main_nerf.py {LEGO_DATA} -O --bound 1.0 --scale 0.8 --dt_gamma 0 --num_rays 64 --max_steps 16 "
        "--max_ray_batch 1024")
GPU_CKPT = f"{G}/gpu/ngp_ep0002.pth"

# A step's helper: a checkpoint the tree wrote, re-saved as a CUDA machine's torch.save writes it (every storage
# tagged cuda:0; the same as _recipe.save_cuda_checkpoint, which a step cannot import).
GPU_CHECKPOINT = r'''
"""gauntlet: python _gauntlet/gpu_checkpoint.py SRC DST (see bench/gauntlet_repos/torchngp.py)."""
import os
import sys

import torch
from torch import serialization

src, dst = sys.argv[1], sys.argv[2]
state = torch.load(src, map_location="cpu", weights_only=False)
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
os.makedirs(os.path.dirname(dst), exist_ok=True)
torch.save(state, dst)
'''


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


def _fox(root: Path, rng, count: int = 5, size: int = 32) -> None:
    """instant-ngp's fox layout: transforms.json (intrinsics in pixels, w/h) and images/*.jpg."""
    import json

    import numpy as np
    from PIL import Image

    (root / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    for i in range(count):
        Image.fromarray(rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)).save(root / "images" / f"{i:04d}.jpg")
        frames.append({"file_path": f"images/{i:04d}.jpg",
                       "transform_matrix": _spherical(-60.0 + 30.0 * i, -20.0, 4.0).tolist()})
    transforms = {"fl_x": 30.0, "fl_y": 30.0, "cx": size / 2, "cy": size / 2, "w": size, "h": size, "frames": frames}
    (root / "transforms.json").write_text(json.dumps(transforms, indent=1))


def _blender(root: Path, rng, size: int = 32) -> None:
    """nerf_synthetic's layout: transforms_{train,val,test}.json (camera_angle_x) and RGBA PNGs without suffix in
    file_path."""
    import json

    import numpy as np
    from PIL import Image

    angles = iter(np.linspace(-180, 180, 5)[:-1])
    for split, count in (("train", 2), ("val", 1), ("test", 1)):
        (root / split).mkdir(parents=True, exist_ok=True)
        frames = []
        for i in range(count):
            rgba = rng.integers(0, 256, size=(size, size, 4), dtype=np.uint8)
            Image.fromarray(rgba, mode="RGBA").save(root / split / f"r_{i}.png")
            frames.append({"file_path": f"./{split}/r_{i}", "rotation": 0.0126,
                           "transform_matrix": _spherical(float(next(angles)), -30.0, 4.0).tolist()})
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": 0.6911, "frames": frames}))


def _random_alexnet(path: Path) -> None:
    """An AlexNet state dict with random weights, every tensor a small storage expanded to its shape."""
    import math

    import torch
    import torchvision

    with torch.device("meta"):
        shapes = {k: v.shape for k, v in torchvision.models.alexnet().state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    state = {}
    for key, shape in shapes.items():
        if len(shape) == 1:
            state[key] = torch.zeros(shape)
        else:
            small = torch.randn(shape[0], 1, *shape[2:], generator=generator)
            small *= math.sqrt(2.0 / math.prod(shape[2:])) / shape[1]
            state[key] = small.expand(shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(state, path)


def prepare(tree: Path) -> None:
    import os

    import numpy as np
    from torchvision.models import AlexNet_Weights

    rng = np.random.default_rng(0)
    _fox(tree / G / "data" / "fox", rng)
    _blender(tree / LEGO_DATA, rng)
    _random_alexnet(tree / G / "torch" / "hub" / "checkpoints" / os.path.basename(AlexNet_Weights.IMAGENET1K_V1.url))
    (tree / G / "gpu_checkpoint.py").write_text(GPU_CHECKPOINT)


STEPS = [
    Step("train-fox", f"{FOX} --iters 4",
         outputs=[f"{G}/trial_nerf/checkpoints/ngp_ep0001.pth", f"{G}/trial_nerf/results/ngp_ep0001_rgb.mp4",
                  f"{G}/trial_nerf/meshes/ngp_1.ply"], env=ENV, timeout=600),
    Step("continue-fox", f"{FOX} --iters 8",
         outputs=[f"{G}/trial_nerf/checkpoints/ngp_ep0002.pth", f"{G}/trial_nerf/results/ngp_ep0002_rgb.mp4"],
         env=ENV, timeout=600),
    Step("train-lego-O", f"{LEGO} --workspace {G}/trial_lego --iters 4",
         outputs=[f"{G}/trial_lego/checkpoints/ngp_ep0002.pth", f"{G}/trial_lego/results/ngp_ep0002_rgb.mp4",
                  f"{G}/trial_lego/meshes/ngp_2.ply"], env=ENV, timeout=600),
    Step("test-lego-gpu-checkpoint",
         f"python {G}/gpu_checkpoint.py {G}/trial_lego/checkpoints/ngp_ep0002.pth {GPU_CKPT} && "
         f"{LEGO} --workspace {G}/trial_lego_gpu --test --ckpt {GPU_CKPT}",
         outputs=[f"{G}/trial_lego_gpu/results/ngp_ep0002_rgb.mp4", f"{G}/trial_lego_gpu/meshes/ngp_2.ply"],
         env=ENV, timeout=600),
]
