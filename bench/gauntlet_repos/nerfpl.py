"""kwea123/nerf_pl (master): the README's commands, tiny.

- ``train-blender``: the README's Blender training (``python train.py --dataset_name blender --root_dir $BLENDER_DIR
  --N_importance 64 --img_wh 400 400 --noise_std 0 --num_epochs 16 --batch_size 1024 --optimizer adam --lr 5e-4
  --lr_scheduler steplr --decay_step 2 4 8 --decay_gamma 0.5 --exp_name exp``) on a synthetic blender scene that
  prepare() writes (transforms_{train,val,test}.json and RGBA PNGs: 2 train, 8 val (BlenderDataset's val split is
  always 8 images), 2 test views at 8x8), scaled by its own flags: --img_wh 8 8, --N_samples/--N_importance 8,
  --batch_size 64 (2 steps an epoch over the 128 training rays), --num_epochs 1, --chunk 4096. --num_gpus keeps its
  default 1 (Trainer(gpus=1)); PL's ModelCheckpoint writes ckpts/gauntlet_lego/*.ckpt after the epoch's validation,
  TestTubeLogger logs/gauntlet_lego/.
- ``eval-trained``: the README's ``python eval.py --root_dir $BLENDER --dataset_name blender --scene_name lego
  --img_wh 400 400 --N_importance 64 --ckpt_path $CKPT_PATH`` on that checkpoint (the test split's 2 views, the gif).
- ``eval-pretrained``: the same on a Lightning checkpoint of the tree's own NeRF pair that prepare() writes as a CUDA
  machine's ``torch.save`` does (every storage tagged cuda:0, ``save_cuda_checkpoint``): the README's "Pretrained
  models and logs" from the releases; with --save_depth (its .pfm depth maps).
- ``mesh``: ``python extract_color_mesh.py`` (README_mesh.md; the notebook's code as a script) on the pre-trained
  checkpoint, --N_grid 16 (a 16^3 occupancy grid), --img_wh 8 8 over the training views, and --sigma_threshold at
  the 70th percentile of that network's sigma on the grid (a random network's density has no natural level; prepare()
  computes it with the tree's own Embedding/NeRF, and the README_mesh guideline is to tune this threshold).

torchsearchsorted is a git submodule (aliutkus/torchsearchsorted at 1e0ffc3, a C++ CPU extension plus a CUDA one built
when nvcc is found), absent from the snapshot; the README installs it with ``cd torchsearchsorted; pip install .``.
prepare() writes the submodule's files (setup.py, the CPU wrapper, the Python package; the CUDA sources are left out:
setup.py builds them only when CUDA_HOME is set, which it is not on a machine without CUDA, a Mac included) into
``torchsearchsorted/`` and pip-installs it into the environment once (``--no-build-isolation``: a build-isolated
install would pull another torch). The pinned CPU wrapper does not compile against torch 2.x (``a.type()`` in
AT_DISPATCH, ``Tensor::data<T>()``): the two lines are taken as the submodule's own later commit (f6ace75, "updated
kernel and wrapper due to deprecations") changed them, ``a.scalar_type()`` and ``data_ptr<T>()``; not CUDA.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
DATA = f"{G}/data/nerf_synthetic/lego"
PRETRAINED = f"{G}/ckpts/lego_pretrained.ckpt"
SITE = f"{G}/site"
ENV = {"OMP_NUM_THREADS": "1", "PYTHONPATH": "{tree}/" + SITE}
# PyTorch Lightning 0.7.5 (requirements.txt's pin, which installs beside torch 2.13: torch>=1.1) accepts a scheduler only
# if isinstance(s, torch.optim.lr_scheduler._LRScheduler); torch >= 2.0 made _LRScheduler a deprecated subclass of
# LRScheduler that MultiStepLR no longer derives from, so Trainer.fit raises "Input <MultiStepLR> to lr schedulers is a
# invalid input" on every device. The steps' sitecustomize makes the old name the new class again (the repository's own
# GradualWarmupScheduler(_LRScheduler) then derives from LRScheduler, as _LRScheduler itself does); not a CUDA matter.
SITECUSTOMIZE = '''\
# gauntlet: torch < 2.0's scheduler base class for pytorch-lightning 0.7.5; not a CUDA matter.
try:
    import torch.optim.lr_scheduler as _lr_scheduler

    _lr_scheduler._LRScheduler = _lr_scheduler.LRScheduler
except Exception:
    pass
'''
SMALL = "--img_wh 8 8 --N_samples 8 --N_importance 8"
TRAIN = (f"--dataset_name blender --root_dir {DATA} {SMALL} --noise_std 0 --num_epochs 1 --batch_size 64 --chunk 4096 "
         "--optimizer adam --lr 5e-4 --lr_scheduler steplr --decay_step 2 4 8 --decay_gamma 0.5")
EVAL = f"--root_dir {DATA} --dataset_name blender {SMALL}"
MESH = (f"--root_dir {DATA} --dataset_name blender --scene_name {G}/mesh_lego --img_wh 8 8 --N_samples 8 --chunk 4096 "
        f"--N_grid 16 --ckpt_path {PRETRAINED} --sigma_threshold $(cat {G}/sigma_threshold.txt)")

# Only to build the pre-trained checkpoint in prepare(): the tree's own NeRF and Embedding, in a child process from
# the tree's root; also the sigma threshold for the mesh step (extract_color_mesh.py's grid, --N_grid 16).
_PRETRAINED = r"""
import sys, numpy as np, torch
sys.path.insert(0, ".")
from models.nerf import Embedding, NeRF
torch.manual_seed(0)
coarse, fine = NeRF(), NeRF()
state = {f"nerf_coarse.{k}": v for k, v in coarse.state_dict().items()}
state.update({f"nerf_fine.{k}": v for k, v in fine.state_dict().items()})
torch.save({"epoch": 15, "global_step": 160000, "state_dict": state}, sys.argv[1])
N = 16
x = np.linspace(-1.0, 1.0, N)
xyz = torch.FloatTensor(np.stack(np.meshgrid(x, x, x), -1).reshape(-1, 3))
with torch.no_grad():
    h = torch.cat([Embedding(3, 10)(xyz), Embedding(3, 4)(torch.zeros_like(xyz))], 1)
    sigma = np.maximum(fine(h)[:, -1].numpy(), 0)
open(sys.argv[2], "w").write(f"{float(np.percentile(sigma, 70)):.6g}\n")
"""

TORCHSEARCHSORTED = {
    'setup.py': r'''from setuptools import setup, find_packages
from torch.utils.cpp_extension import BuildExtension, CUDA_HOME
from torch.utils.cpp_extension import CppExtension, CUDAExtension

# In any case, include the CPU version
modules = [
    CppExtension('torchsearchsorted.cpu',
                 ['src/cpu/searchsorted_cpu_wrapper.cpp']),
]

# If nvcc is available, add the CUDA extension
if CUDA_HOME:
    modules.append(
        CUDAExtension('torchsearchsorted.cuda',
                      ['src/cuda/searchsorted_cuda_wrapper.cpp',
                       'src/cuda/searchsorted_cuda_kernel.cu'])
    )

tests_require = [
    'pytest',
]

# Now proceed to setup
setup(
    name='torchsearchsorted',
    version='1.1',
    description='A searchsorted implementation for pytorch',
    keywords='searchsorted',
    author='Antoine Liutkus',
    author_email='antoine.liutkus@inria.fr',
    packages=find_packages(where='src'),
    package_dir={"": "src"},
    ext_modules=modules,
    tests_require=tests_require,
    extras_require={
        'test': tests_require,
    },
    cmdclass={
        'build_ext': BuildExtension
    }
)
''',
    'src/cpu/searchsorted_cpu_wrapper.cpp': r'''#include "searchsorted_cpu_wrapper.h"
#include <stdio.h>

template<typename scalar_t>
int eval(scalar_t val, scalar_t *a, int64_t row, int64_t col, int64_t ncol, bool side_left)
{
    /* Evaluates whether a[row,col] < val <= a[row, col+1]*/

    if (col == ncol - 1)
    {
      // special case: we are on the right border
      if (a[row * ncol + col] <= val){
        return 1;}
      else {
        return -1;}
    }
    bool is_lower;
    bool is_next_higher;

    if (side_left) {
      // a[row, col] < v <= a[row, col+1]
      is_lower = (a[row * ncol + col] < val);
      is_next_higher = (a[row*ncol + col + 1] >= val);
    } else {
      // a[row, col] <= v < a[row, col+1]
      is_lower = (a[row * ncol + col] <= val);
      is_next_higher = (a[row * ncol + col + 1] > val);
    }
    if (is_lower && is_next_higher) {
        // we found the right spot
        return 0;
    } else if (is_lower) {
    	// answer is on the right side
        return 1;
    } else {
    	// answer is on the left side
        return -1;
    }
}

template<typename scalar_t>
int64_t binary_search(scalar_t*a, int64_t row, scalar_t val, int64_t ncol, bool side_left)
{
  /* Look for the value `val` within row `row` of matrix `a`, which
  has `ncol` columns.

  the `a` matrix is assumed sorted in increasing order, row-wise

  returns:
  * -1 if `val` is smaller than the smallest value found within that row of `a`
  * `ncol` - 1 if `val` is larger than the largest element of that row of `a`
  * Otherwise, return the column index `res` such that:
    - a[row, col] < val <= a[row, col+1]. (if side_left), or
    - a[row, col] < val <= a[row, col+1] (if not side_left).
   */

  //start with left at 0 and right at number of columns of a
  int64_t right = ncol;
  int64_t left = 0;

  while (right >= left) {
      // take the midpoint of current left and right cursors
      int64_t mid = left + (right-left)/2;

      // check the relative position of val: are we good here ?
      int rel_pos = eval(val, a, row, mid, ncol, side_left);
      // we found the point
      if(rel_pos == 0) {
          return mid;
      } else if (rel_pos > 0) {
        if (mid==ncol-1){return ncol-1;}
        // the answer is on the right side
        left = mid;
      } else {
        if (mid==0){return -1;}
        right = mid;
      }
  }
  return -1;
}

void searchsorted_cpu_wrapper(
    at::Tensor a,
    at::Tensor v,
    at::Tensor res,
    bool side_left)
{

  // Get the dimensions
  auto nrow_a = a.size(/*dim=*/0);
  auto ncol_a = a.size(/*dim=*/1);
  auto nrow_v = v.size(/*dim=*/0);
  auto ncol_v = v.size(/*dim=*/1);

  auto nrow_res = fmax(nrow_a, nrow_v);

  //auto acc_v = v.accessor<float, 2>();
  //auto acc_res = res.accessor<float, 2>();

  AT_DISPATCH_ALL_TYPES(a.scalar_type(), "searchsorted cpu", [&] {

      scalar_t* a_data = a.data_ptr<scalar_t>();
      scalar_t* v_data = v.data_ptr<scalar_t>();
      int64_t* res_data = res.data_ptr<int64_t>();

      for (int64_t row = 0; row < nrow_res; row++)
      {
          for (int64_t col = 0; col < ncol_v; col++)
          {
              // get the value to look for
              int64_t row_in_v = (nrow_v == 1) ? 0 : row;
              int64_t row_in_a = (nrow_a == 1) ? 0 : row;

              int64_t idx_in_v = row_in_v * ncol_v + col;
              int64_t idx_in_res = row * ncol_v + col;

              // apply binary search
              res_data[idx_in_res] = (binary_search(a_data, row_in_a, v_data[idx_in_v], ncol_a, side_left) + 1);
          }
      }
      });
  }

  PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("searchsorted_cpu_wrapper", &searchsorted_cpu_wrapper, "searchsorted (CPU)");
  }
''',
    'src/cpu/searchsorted_cpu_wrapper.h': r'''#ifndef _SEARCHSORTED_CPU
#define _SEARCHSORTED_CPU

#include <torch/extension.h>

void searchsorted_cpu_wrapper(
    at::Tensor a,
    at::Tensor v,
    at::Tensor res,
    bool side_left);

#endif''',
    'src/torchsearchsorted/__init__.py': r'''from .searchsorted import searchsorted
from .utils import numpy_searchsorted
''',
    'src/torchsearchsorted/searchsorted.py': r'''from typing import Optional

import torch

# trying to import the CPU searchsorted
SEARCHSORTED_CPU_AVAILABLE = True
try:
    from torchsearchsorted.cpu import searchsorted_cpu_wrapper
except ImportError:
    SEARCHSORTED_CPU_AVAILABLE = False

# trying to import the CUDA searchsorted
SEARCHSORTED_GPU_AVAILABLE = True
try:
    from torchsearchsorted.cuda import searchsorted_cuda_wrapper
except ImportError:
    SEARCHSORTED_GPU_AVAILABLE = False


def searchsorted(a: torch.Tensor, v: torch.Tensor,
                 out: Optional[torch.LongTensor] = None,
                 side='left') -> torch.LongTensor:
    assert len(a.shape) == 2, "input `a` must be 2-D."
    assert len(v.shape) == 2, "input `v` mus(t be 2-D."
    assert (a.shape[0] == v.shape[0]
            or a.shape[0] == 1
            or v.shape[0] == 1), ("`a` and `v` must have the same number of "
                                  "rows or one of them must have only one ")
    assert a.device == v.device, '`a` and `v` must be on the same device'

    result_shape = (max(a.shape[0], v.shape[0]), v.shape[1])
    if out is not None:
        assert out.device == a.device, "`out` must be on the same device as `a`"
        assert out.dtype == torch.long, "out.dtype must be torch.long"
        assert out.shape == result_shape, ("If the output tensor is provided, "
                                           "its shape must be correct.")
    else:
        out = torch.empty(result_shape, device=v.device, dtype=torch.long)

    if a.is_cuda and not SEARCHSORTED_GPU_AVAILABLE:
        raise Exception('torchsearchsorted on CUDA device is asked, but it seems '
                        'that it is not available. Please install it')
    if not a.is_cuda and not SEARCHSORTED_CPU_AVAILABLE:
        raise Exception('torchsearchsorted on CPU is not available. '
                        'Please install it.')

    left_side = 1 if side=='left' else 0
    if a.is_cuda:
        searchsorted_cuda_wrapper(a, v, out, left_side)
    else:
        searchsorted_cpu_wrapper(a, v, out, left_side)

    return out
''',
    'src/torchsearchsorted/utils.py': r'''import numpy as np


def numpy_searchsorted(a: np.ndarray, v: np.ndarray, side='left'):
    """Numpy version of searchsorted that works batch-wise on pytorch tensors
    """
    nrows_a = a.shape[0]
    (nrows_v, ncols_v) = v.shape
    nrows_out = max(nrows_a, nrows_v)
    out = np.empty((nrows_out, ncols_v), dtype=np.long)
    def sel(data, row):
        return data[0] if data.shape[0] == 1 else data[row]
    for row in range(nrows_out):
        out[row] = np.searchsorted(sel(a, row), sel(v, row), side=side)
    return out
''',
}


def _install_torchsearchsorted(tree: Path) -> None:
    """The submodule in ``torchsearchsorted/`` and ``pip install .`` from it (README), once per environment."""
    import importlib.util
    import os
    import subprocess
    import sys

    folder = tree / "torchsearchsorted"
    for name, text in TORCHSEARCHSORTED.items():
        if name.endswith(".cpp"):  # the submodule's later f6ace75: torch 2.x has neither of the two old calls
            text = text.replace("AT_DISPATCH_ALL_TYPES(a.type(),", "AT_DISPATCH_ALL_TYPES(a.scalar_type(),")
            text = text.replace("res.data<int64_t>()", "res.data_ptr<int64_t>()")
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    if importlib.util.find_spec("torchsearchsorted") is None:
        env = dict(os.environ, MAX_JOBS="1")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "."],
                       cwd=folder, env=env, check=True)


def _spherical(theta: float, phi: float, radius: float):
    """A camera on a sphere looking at the origin, in blender's convention (load_blender's pose_spherical)."""
    import numpy as np

    trans = np.eye(4)
    trans[2, 3] = radius
    p, t = phi / 180.0 * np.pi, theta / 180.0 * np.pi
    rot_phi = np.array([[1, 0, 0, 0], [0, np.cos(p), -np.sin(p), 0], [0, np.sin(p), np.cos(p), 0], [0, 0, 0, 1]])
    rot_theta = np.array([[np.cos(t), 0, -np.sin(t), 0], [0, 1, 0, 0], [np.sin(t), 0, np.cos(t), 0], [0, 0, 0, 1]])
    flip = np.array([[-1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 1]])
    return flip @ rot_theta @ rot_phi @ trans


def _blender(root: Path) -> None:
    import json

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    angles = iter(np.linspace(-180, 180, 13)[:-1])
    for split, count in (("train", 2), ("val", 8), ("test", 2)):
        (root / split).mkdir(parents=True, exist_ok=True)
        frames = []
        for i in range(count):
            rgba = rng.integers(0, 256, size=(8, 8, 4), dtype=np.uint8)
            Image.fromarray(rgba, mode="RGBA").save(root / split / f"r_{i}.png")
            frames.append({"file_path": f"./{split}/r_{i}", "rotation": 0.0126,
                           "transform_matrix": _spherical(float(next(angles)), -30.0, 4.0).tolist()})
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": 0.6911, "frames": frames}))


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import torch

    _install_torchsearchsorted(tree)
    (tree / SITE).mkdir(parents=True, exist_ok=True)
    (tree / SITE / "sitecustomize.py").write_text(SITECUSTOMIZE)
    _blender(tree / DATA)
    local = tree / G / "cpu_pretrained.ckpt"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", _PRETRAINED, str(local), str(tree / G / "sigma_threshold.txt")], cwd=tree,
                   env=env, check=True)
    save_cuda_checkpoint(torch.load(local, map_location="cpu"), tree / PRETRAINED)
    local.unlink()


STEPS = [
    Step("train-blender", f"python train.py {TRAIN} --exp_name gauntlet_lego",
         outputs=["ckpts/gauntlet_lego/*.ckpt", "logs/gauntlet_lego/version_0/*"], env=ENV, timeout=600),
    Step("eval-trained", f"python eval.py {EVAL} --scene_name gauntlet_lego "
                         "--ckpt_path $(ls ckpts/gauntlet_lego/*.ckpt | head -n 1)",
         outputs=["results/blender/gauntlet_lego/000.png", "results/blender/gauntlet_lego/001.png",
                  "results/blender/gauntlet_lego/gauntlet_lego.gif"], env=ENV, timeout=300),
    Step("eval-pretrained", f"python eval.py {EVAL} --scene_name gauntlet_pretrained --ckpt_path {PRETRAINED} "
                            "--save_depth",
         outputs=["results/blender/gauntlet_pretrained/001.png", "results/blender/gauntlet_pretrained/depth_001.pfm",
                  "results/blender/gauntlet_pretrained/gauntlet_pretrained.gif"], env=ENV, timeout=300),
    Step("mesh", f"python extract_color_mesh.py {MESH}", outputs=[f"{G}/mesh_lego.ply"], env=ENV, timeout=300),
]
