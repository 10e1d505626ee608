"""ajbrock/BigGAN-PyTorch: the README's commands, tiny.

- ``make-hdf5``: ``scripts/utils/prepare_data.sh``'s first line (``python make_hdf5.py --dataset I128 --batch_size 256
  --data_root data``) on a synthetic ImageFolder (``data/ImageNet/<class>/*.png``, 2 classes of 4 images) at the
  repository's smallest ImageNet resolution (``--dataset I32``), with --batch_size/--chunk_size 4 and no workers.
- ``inception-moments``: its second line (``python calculate_inception_moments.py --dataset I128_hdf5 --data_root
  data``) on that HDF5 file: the Inception-v3 pool features of the 8 images, saved as ``I32_inception_moments.npz``
  (train.py and sample.py load it). torchvision's ``inception_v3(pretrained=True)`` finds a random Inception-v3 state
  dict under TORCH_HOME (torch hub checks the hash only on download): the code is not edited.
- ``train``: ``scripts/launch_BigGAN_bs256x8.sh`` (--parallel --shuffle --load_in_mem, 8 G and D accumulations, hier,
  shared embedding, ortho init, EMA, G_eval_mode, multi-epoch sampler) scaled down by its own flags: --dataset
  I32_hdf5, --G_ch/--D_ch 4, attention at 16x16 (--G_attn/--D_attn 16: 64 is past a 32x32 net), --batch_size 2 with 2
  G and D accumulations, one epoch of the 8 images (2 iterations), --save_every 2 (weights, a copy, fixed samples,
  the 20 class sample sheets and the 3 interpolation sheets), --num_workers 0, --base_root _gauntlet.
- ``sample``: ``scripts/sample_BigGAN_bs256x8.sh`` (sample.py with the training flags, --skip_init --use_ema
  --G_eval_mode, --sample_npz --sample_random --sample_sheets --sample_interps) on the weights the training wrote.
- ``sample-cuda-checkpoint``: the same (less --sample_sheets --sample_interps) on a copy of those weights re-saved as a CUDA machine
  saves them (every storage tagged cuda:0; utils.load_weights calls a bare torch.load), as the README's pretrained
  checkpoints come.
- ``resume-cuda-checkpoint``: the README's fine-tuning ("run the same launch script but with the --resume
  argument", --experiment_name to pick the weights) on that CUDA-saved copy: --num_epochs 2 (the multi-epoch sampler
  restarts at the saved iteration, 2 iterations an epoch) and one save, at iteration 4 (--save_every 4).

Not run: the IS/FID test (train_fns.test, sample.py's --sample_inception_metrics and --sample_trunc_curves). Its FID
is a 50-step Newton-Schulz matrix square root of a 2048x2048 matrix (about 2.6 TFLOP, minutes on one shared core),
and --no_fid, the repository's way around it, raises on any device (inception_utils.py:307 deletes mu and sigma,
unbound when no_fid). So --test_every stays past the run's iterations; train.py and sample.py still load the Inception
net and the moments (prepare_inception_metrics), and inception-moments runs the net.
"""

import shlex
from pathlib import Path

from _recipe import Step, cuda_tags, write_images

HERE = Path(__file__).resolve().parent
G = "_gauntlet"
SITE = f"{G}/site"
# TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: utils.load_weights' bare torch.load of state_dict.pth, whose config holds the
# nn.ReLU modules G_nl/D_nl name, which torch >= 2.6's weights_only default refuses (torch 1.0 had no such default).
ENV = {"TORCH_HOME": "{tree}/" + G + "/torch", "OMP_NUM_THREADS": "1", "PYTHONPATH": "{tree}/" + SITE,
       "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
# The repository was written for torch 1.0; what torch 2.13 changed under it, restored (not CUDA matters: the original,
# with every "cuda" made "cpu", fails there without it).
SITECUSTOMIZE = '''\
# gauntlet: torch 1.0 behaviour BigGAN-PyTorch relies on; not a CUDA matter.
try:
    import torch as _torch

    def _init_subclass(cls, **kwargs):
        # utils.Distribution (z_ and y_, a torch.Tensor subclass with its own .to()): torch >= 1.7 hands the subclass
        # on to every result computed from it (G's images), whose .to() then reads a dist_type they never had
        # (AttributeError in save_image). torch 1.0 returned plain tensors: the subclass's documented opt-out.
        if cls.__name__ == "Distribution" and cls.__module__ == "utils":
            cls.__torch_function__ = _torch._C._disabled_torch_function_impl

    _torch.Tensor.__init_subclass__ = classmethod(_init_subclass)
except Exception:
    pass
'''
DATA = f"{G}/data"

# scripts/launch_BigGAN_bs256x8.sh, its sizes scaled down by its own flags.
TRAIN_FLAGS = (
    "--dataset I32_hdf5 --parallel --shuffle --num_workers 0 --batch_size 2 --load_in_mem "
    "--num_G_accumulations 2 --num_D_accumulations 2 "
    "--num_D_steps 1 --G_lr 1e-4 --D_lr 4e-4 --D_B2 0.999 --G_B2 0.999 "
    "--G_attn 16 --D_attn 16 "
    "--G_nl inplace_relu --D_nl inplace_relu "
    "--SN_eps 1e-6 --BN_eps 1e-5 --adam_eps 1e-6 "
    "--G_ortho 0.0 "
    "--G_shared "
    "--G_init ortho --D_init ortho "
    "--hier --dim_z 120 --shared_dim 128 "
    "--G_eval_mode "
    "--G_ch 4 --D_ch 4 "
    "--ema --use_ema --ema_start 20000 "
    "--test_every 1000 --save_every 2 --num_best_copies 5 --num_save_copies 2 --seed 0 "
    "--use_multiepoch_sampler --num_epochs 1 "
    f"--base_root {G}"
)
# scripts/sample_BigGAN_bs256x8.sh: the training flags, then its sampling flags (less the inception metrics and
# truncation curves: see the module's docstring).
SAMPLE_FLAGS = (f"{TRAIN_FLAGS} --skip_init --G_batch_size 4 --use_ema --G_eval_mode "
                "--sample_npz --sample_num_npz 8 --sample_random --sample_sheets --sample_interps")
# The same without the 20 class sheets (a minute of CPU; ``sample`` and every save in training draw them) and the
# interpolation sheets (interp_sheet writes into the folder sample_sheet makes: without it, FileNotFoundError).
CUDA_SAMPLE_FLAGS = SAMPLE_FLAGS.replace(" --sample_sheets --sample_interps", "")


def cuda_copy(source: str, target: str) -> None:
    """Every .pth under ``source`` (the weights train.py wrote) re-saved under ``target`` as a CUDA machine writes
    them: every storage tagged cuda:0. A step runs this after training: the state dicts' layout is the tree's own.
    The copy's samples folder is made too, as training leaves one: sample.py writes --sample_npz's file into it
    before anything there makes it (on any device)."""
    import torch

    target_dir = Path(target)
    target_dir.mkdir(parents=True, exist_ok=True)
    (target_dir.parent.parent / "samples" / target_dir.name).mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(source).glob("*.pth")):
        obj = torch.load(path, map_location="cpu", weights_only=False)
        with cuda_tags():
            torch.save(obj, str(target_dir / path.name))


def _random_inception(path: Path) -> None:
    """An Inception-v3 state dict (with its aux head, as the pretrained download has) with random weights, every
    weight a small storage expanded to its shape (a few hundred KB, not 104 MB); BatchNorm at the identity."""
    import math

    import torch
    import torchvision

    with torch.device("meta"):
        state = torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=False).state_dict()
    generator = torch.Generator().manual_seed(0)
    out = {}
    for key, value in state.items():
        shape = value.shape
        if key.endswith("num_batches_tracked"):
            out[key] = torch.zeros((), dtype=torch.long)
        elif key.endswith("running_var") or (key.endswith(".weight") and len(shape) == 1):
            out[key] = torch.ones(1).expand(shape)
        elif len(shape) == 1:
            out[key] = torch.zeros(1).expand(shape)
        else:
            # The same weights for every input channel (they see the channels' mean), He-scaled over the kernel.
            small = torch.randn(shape[0], 1, *shape[2:], generator=generator)
            small *= math.sqrt(2.0 / math.prod(shape[2:])) / shape[1]
            out[key] = small.expand(shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, path)


def prepare(tree: Path) -> None:
    import os

    (tree / SITE).mkdir(parents=True, exist_ok=True)
    (tree / SITE / "sitecustomize.py").write_text(SITECUSTOMIZE)

    from torchvision.models import Inception_V3_Weights

    # datasets.ImageFolder under data_root/ImageNet (utils.root_dict['I32']), 2 classes of 4 images.
    write_images(tree / DATA / "ImageNet", count=4, size=40, classes=("n01440764", "n01443537"), seed=0)
    _random_inception(tree / G / "torch" / "hub" / "checkpoints"
                      / os.path.basename(Inception_V3_Weights.IMAGENET1K_V1.url))


_CUDA_COPY = ("python -c " + shlex.quote(f"import sys; sys.path.insert(0, {str(HERE)!r}); import biggan; "
                                         f"biggan.cuda_copy('{G}/weights/gauntlet', '{G}/weights/gauntlet_gpu')"))

STEPS = [
    Step("make-hdf5", f"python make_hdf5.py --dataset I32 --batch_size 4 --data_root {DATA} --num_workers 0 "
                      "--chunk_size 4",
         outputs=[f"{DATA}/ILSVRC32.hdf5"], env=ENV, timeout=120),
    Step("inception-moments", f"python calculate_inception_moments.py --dataset I32_hdf5 --data_root {DATA} "
                              "--batch_size 4 --num_workers 0",
         outputs=["I32_inception_moments.npz"], env=ENV, timeout=300),
    Step("train", f"python train.py {TRAIN_FLAGS} --experiment_name gauntlet",
         outputs=[f"{G}/weights/gauntlet/G.pth", f"{G}/weights/gauntlet/G_ema.pth",
                  f"{G}/weights/gauntlet/state_dict.pth", f"{G}/weights/gauntlet/G_copy0.pth",
                  f"{G}/samples/gauntlet/fixed_samples2.jpg", f"{G}/samples/gauntlet/2/samples19.jpg",
                  f"{G}/samples/gauntlet/2/interp*.jpg", f"{G}/logs/gauntlet"],
         env=ENV, timeout=400),
    Step("sample", f"python sample.py {SAMPLE_FLAGS} --experiment_name gauntlet",
         outputs=[f"{G}/samples/gauntlet/samples.npz", f"{G}/samples/gauntlet/random_samples.jpg",
                  f"{G}/samples/gauntlet/-1/samples19.jpg"],
         env=ENV, timeout=400),
    Step("sample-cuda-checkpoint", f"{_CUDA_COPY} && python sample.py {CUDA_SAMPLE_FLAGS} --experiment_name gauntlet_gpu",
         outputs=[f"{G}/samples/gauntlet_gpu/samples.npz", f"{G}/samples/gauntlet_gpu/random_samples.jpg"],
         env=ENV, timeout=400),
    Step("resume-cuda-checkpoint", f"python train.py {TRAIN_FLAGS} --num_epochs 2 --save_every 4 --resume "
                                   "--experiment_name gauntlet_gpu",
         outputs=[f"{G}/samples/gauntlet_gpu/fixed_samples4.jpg", f"{G}/samples/gauntlet_gpu/4/samples19.jpg"],
         env=ENV, timeout=400),
]
