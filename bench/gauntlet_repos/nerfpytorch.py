"""yenchenlin/nerf-pytorch: the README's commands, tiny.

- ``train-lego``: ``python run_nerf.py --config configs/lego.txt`` (blender synthetic data: no_batching, half_res,
  white_bkgd, viewdirs, precrop, coarse + fine networks) on a synthetic ``lego`` scene prepare() writes in the
  blender layout (transforms_{train,val,test}.json and RGBA PNGs: 4 train, 2 val, 2 test views at 32x32, 16x16 after
  --half_res), for 4 iterations: checkpoints at 2 and 4 (--i_weights), the spiral videos and the test set at 4
  (--i_video, --i_testset).
- ``continue-lego``: the same command again: it reloads its own latest checkpoint (000004.tar, the repository's
  default reload; global_step 3) and trains iterations 4 to 6 (000006.tar).
- ``render-lego-test``: the README's "To test NeRF": ``--config configs/lego.txt --render_only`` with --render_test
  (its own flag: the test views, not the spiral), from the reloaded 000006.tar (its global_step is 5: the loop saves
  before counting the step, so the folder is renderonly_test_000005).
- ``train-fern``: ``python run_nerf.py --config configs/fern.txt`` (LLFF forward-facing data: NDC rays, random ray
  batching over all images with the per-epoch torch.randperm shuffle, raw_noise_std 1) on a synthetic ``fern``
  (poses_bounds.npy for 10 forward-facing cameras, images/ at 48x64 and images_8/ at 6x8, which --factor 8 reads
  without running ImageMagick) for 4 iterations (N_rand 128 over 8 training views: an epoch every 3 iterations).
- ``render-fern-pretrained``: the README's "Pre-trained Models" then "To test": ``python run_nerf.py --config
  configs/fern.txt --render_only`` on ``logs/fern_test/200000.tar`` as downloaded (the pre-trained logs placed in
  ./logs), here a checkpoint of the tree's own NeRF (coarse, fine and Adam state) that prepare() writes as a CUDA
  machine's ``torch.save`` does (every storage tagged cuda:0): the 120-view spiral and its video.

Scaled by the repository's own flags: the networks (--netdepth 6 keeps the skip connection at layer 4, --netwidth 16,
the same for the fine network), the positional encodings (--multires 4, --multires_views 2), rays (--N_rand) and
samples per ray (--N_samples/--N_importance 8), --precrop_iters 2, and the logging periods. The training loop's length
is hard-coded (``N_iters = 200000 + 1``, no flag), so the train steps run run_nerf.py through ``_gauntlet/nerf.py``,
which caps tqdm's ``trange`` (run_nerf's loop: ``for i in trange(start, N_iters)``) at a given last iteration and runs
run_nerf.py as ``__main__`` with its own command line (its ``torch.set_default_tensor_type`` line included).
imageio is pinned to 2.27.0: load_llff.py reads PNGs with ``imageio.imread(f, ignoregamma=True)``, which imageio >= 2.28
refuses (the Pillow v3 plugin has no such argument), on every device.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
LOGS = f"{G}/logs"
NET = ("--netdepth 6 --netwidth 16 --netdepth_fine 6 --netwidth_fine 16 --multires 4 --multires_views 2 "
       "--N_samples 8 --N_importance 8")
LEGO = (f"--config configs/lego.txt --datadir {G}/data/nerf_synthetic/lego --basedir {LOGS} --expname lego "
        f"{NET} --N_rand 64 --precrop_iters 2 --i_print 1 --i_weights 2 --i_video 4 --i_testset 4")
FERN = f"--config configs/fern.txt --datadir {G}/data/nerf_llff_data/fern --basedir {LOGS} {NET}"
FERN_TRAIN = f"{FERN} --expname fern --N_rand 128 --i_print 1 --i_weights 2 --i_video 4 --i_testset 4"
ENV = {"OMP_NUM_THREADS": "1"}

WRAPPER = r'''
"""gauntlet: run_nerf.py's training loop up to iteration STOP (see bench/gauntlet_repos/nerfpytorch.py).
python _gauntlet/nerf.py STOP [ARGS]"""
import runpy
import sys
from pathlib import Path

import tqdm

ROOT = Path(__file__).resolve().parent.parent
STOP = int(sys.argv[1])
_trange = tqdm.trange


def trange(start, stop, *args, **kwargs):  # run_nerf: `for i in trange(start, N_iters)`, N_iters = 200001
    return _trange(start, min(stop, STOP + 1), *args, **kwargs)


tqdm.trange = trange  # run_nerf.py's `from tqdm import tqdm, trange` finds this one
script = ROOT / "run_nerf.py"
sys.argv = [str(script)] + sys.argv[2:]
sys.path.insert(0, str(ROOT))  # as `python run_nerf.py` puts the script's folder first
runpy.run_path(str(script), run_name="__main__")
'''

# Only to build the pre-trained fern checkpoint in prepare(): the tree's own NeRF class (run_nerf_helpers), with the
# step's network flags, in a child process from the tree's root.
_PRETRAINED = r"""
import sys, torch
sys.path.insert(0, ".")
from run_nerf_helpers import NeRF, get_embedder
torch.manual_seed(0)
embed_fn, input_ch = get_embedder(4, 0)           # --multires 4
_, input_ch_views = get_embedder(2, 0)            # --multires_views 2
kw = dict(D=6, W=16, input_ch=input_ch, output_ch=5, skips=[4], input_ch_views=input_ch_views, use_viewdirs=True)
coarse, fine = NeRF(**kw), NeRF(**kw)
params = list(coarse.parameters()) + list(fine.parameters())
optimizer = torch.optim.Adam(params=params, lr=5e-4, betas=(0.9, 0.999))
loss = sum((p ** 2).sum() for p in params)
loss.backward()
optimizer.step()
torch.save({'global_step': 200000, 'network_fn_state_dict': coarse.state_dict(),
            'network_fine_state_dict': fine.state_dict(), 'optimizer_state_dict': optimizer.state_dict()},
           sys.argv[1])
"""


def _spherical(theta: float, phi: float, radius: float):
    """load_blender.pose_spherical in numpy: a camera on a sphere looking at the origin (blender's convention)."""
    import numpy as np

    trans = np.eye(4)
    trans[2, 3] = radius
    p, t = phi / 180.0 * np.pi, theta / 180.0 * np.pi
    rot_phi = np.array([[1, 0, 0, 0], [0, np.cos(p), -np.sin(p), 0], [0, np.sin(p), np.cos(p), 0], [0, 0, 0, 1]])
    rot_theta = np.array([[np.cos(t), 0, -np.sin(t), 0], [0, 1, 0, 0], [np.sin(t), 0, np.cos(t), 0], [0, 0, 0, 1]])
    flip = np.array([[-1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]])
    return flip @ rot_theta @ rot_phi @ trans


def _blender(root: Path, rng) -> None:
    import json

    import numpy as np
    from PIL import Image

    angles = iter(np.linspace(-180, 180, 9)[:-1])
    for split, count in (("train", 4), ("val", 2), ("test", 2)):
        (root / split).mkdir(parents=True, exist_ok=True)
        frames = []
        for i in range(count):
            rgba = rng.integers(0, 256, size=(32, 32, 4), dtype=np.uint8)
            Image.fromarray(rgba, mode="RGBA").save(root / split / f"r_{i}.png")
            frames.append({"file_path": f"./{split}/r_{i}", "rotation": 0.0126,
                           "transform_matrix": _spherical(float(next(angles)), -30.0, 4.0).tolist()})
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": 0.6911, "frames": frames}))


def _llff(root: Path, rng, count: int = 10) -> None:
    """poses_bounds.npy as LLFF writes it: per image a 3x5 [R | t | hwf] in its [down, right, back] column order
    (load_llff turns it into [right, up, back]) and near/far bounds; forward-facing cameras on a small grid."""
    import numpy as np
    from PIL import Image

    rows = []
    for i in range(count):
        right_up_back = np.eye(3)
        down_right_back = np.stack([-right_up_back[:, 1], right_up_back[:, 0], right_up_back[:, 2]], 1)
        t = np.array([0.1 * (i % 5) - 0.2, 0.1 * (i // 5) - 0.05, 0.02 * i])
        pose = np.concatenate([down_right_back, t[:, None], np.array([[48.0], [64.0], [50.0]])], 1)
        rows.append(np.concatenate([pose.reshape(-1), [2.0, 6.0]]))
    for folder, (h, w) in (("images", (48, 64)), ("images_8", (6, 8))):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).save(
                root / folder / f"IMG_{i:04d}.png")
    np.save(root / "poses_bounds.npy", np.array(rows, dtype=np.float64))


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    _blender(tree / G / "data" / "nerf_synthetic" / "lego", rng)
    _llff(tree / G / "data" / "nerf_llff_data" / "fern", rng)
    (tree / G / "nerf.py").write_text(WRAPPER)

    local = tree / G / "cpu_fern.tar"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", _PRETRAINED, str(local)], cwd=tree, env=env, check=True)
    save_cuda_checkpoint(torch.load(local, map_location="cpu"), tree / LOGS / "fern_test" / "200000.tar")
    local.unlink()


STEPS = [
    Step("train-lego", f"python {G}/nerf.py 4 {LEGO}",
         outputs=[f"{LOGS}/lego/000002.tar", f"{LOGS}/lego/000004.tar", f"{LOGS}/lego/lego_spiral_000004_rgb.mp4",
                  f"{LOGS}/lego/lego_spiral_000004_disp.mp4", f"{LOGS}/lego/testset_000004/000.png"],
         env=ENV, timeout=300),
    Step("continue-lego", f"python {G}/nerf.py 6 {LEGO}", outputs=[f"{LOGS}/lego/000006.tar"], env=ENV, timeout=300),
    Step("render-lego-test", f"python run_nerf.py {LEGO} --render_only --render_test",
         outputs=[f"{LOGS}/lego/renderonly_test_000005/000.png", f"{LOGS}/lego/renderonly_test_000005/video.mp4"],
         env=ENV, timeout=300),
    Step("train-fern", f"python {G}/nerf.py 4 {FERN_TRAIN}",
         outputs=[f"{LOGS}/fern/000004.tar", f"{LOGS}/fern/fern_spiral_000004_rgb.mp4",
                  f"{LOGS}/fern/testset_000004/000.png"], env=ENV, timeout=300),
    Step("render-fern-pretrained", f"python run_nerf.py {FERN} --expname fern_test --render_only",
         outputs=[f"{LOGS}/fern_test/renderonly_path_200000/000.png",
                  f"{LOGS}/fern_test/renderonly_path_200000/video.mp4"], env=ENV, timeout=300),
]
