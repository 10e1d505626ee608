"""ConvNeXt: main.py's training (TRAINING.md's single-machine command, scaled down by main.py's own flags), resume
from a checkpoint written as on CUDA with AMP on, the README's evaluation command, and a 2-process torchrun of the
training command with AMP and distributed evaluation, on a synthetic ImageNet-1k folder layout (train/ and val/
class folders, as INSTALL.md describes) with convnext_tiny's random initialisation (no weights are downloaded).

The steps put a ``sitecustomize`` on PYTHONPATH that provides ``torch._six`` (removed in torch 2.0): utils.py imports
``inf`` from it and timm 0.3.2 (INSTALL.md's pin) ``container_abcs``. That fails the original on every device and
selects nothing about the device. Checkpoint loads run with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1: main.py pickles its
argparse Namespace into every checkpoint, which torch >= 2.6's weights-only default refuses on every device.
"""

from pathlib import Path

from _recipe import Step, write_images

G = "_gauntlet"
DATA = f"{G}/imagenet"
SITE = f"{G}/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "OMP_NUM_THREADS": "1"}
PICKLE = {**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
CLASSES = ("n01440764", "n01443537")

SITECUSTOMIZE = '''\
# gauntlet: torch._six, which torch 2.0 removed (utils.py and timm 0.3.2 import it); nothing here picks a device.
import importlib.abc
import importlib.machinery
import sys


class _TorchSix(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name != "torch._six":
            return None
        return importlib.machinery.ModuleSpec(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        import collections.abc
        import math

        module.inf = math.inf
        module.nan = math.nan
        module.string_classes = (str, bytes)
        module.int_classes = int
        module.container_abcs = collections.abc


sys.meta_path.append(_TorchSix())
'''

AS_CUDA = '''\
"""Re-save a checkpoint as a CUDA machine writes it: every storage tagged cuda:0 (bench/_recipe.py's
save_cuda_checkpoint). Loading it without map_location off CUDA raises, as a GPU box's checkpoint does."""
import sys

import torch
from torch import serialization

source, target = sys.argv[1], sys.argv[2]
obj = torch.load(source, map_location="cpu", weights_only=False)
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
torch.save(obj, target)
'''


def prepare(tree: Path) -> None:
    work = tree / G
    write_images(tree / DATA / "train", count=4, size=64, classes=CLASSES, suffix=".JPEG", seed=0)
    write_images(tree / DATA / "val", count=2, size=64, classes=CLASSES, suffix=".JPEG", seed=1)
    (tree / SITE).mkdir(parents=True, exist_ok=True)
    (tree / SITE / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "as_cuda.py").write_text(AS_CUDA)


# TRAINING.md: --model convnext_tiny --drop_path 0.1 --batch_size 128 --lr 4e-3 --update_freq 4
# --model_ema true --model_ema_eval true --data_path ... --output_dir ...; scaled down by main.py's own flags.
TRAIN = ("main.py --model convnext_tiny --drop_path 0.1 --batch_size 2 --lr 4e-3 --update_freq {uf} "
         f"--model_ema true --model_ema_eval true --data_path {DATA} --output_dir {{out}} "
         "--epochs {epochs} --warmup_epochs 0 --input_size 64 --num_workers 1")

STEPS = [
    # 8 images, global batch 4 (2 x update_freq 2): one epoch of 2 optimizer steps; checkpoint-0.pth.
    Step("train", "python " + TRAIN.format(uf=2, out=f"{G}/train", epochs=1) + " --disable_eval true",
         outputs=[f"{G}/train/checkpoint-0.pth", f"{G}/train/log.txt"], timeout=300, env=ENV),
    # The train step's checkpoint as a CUDA machine writes it; auto_resume picks it up and trains epoch 1 with AMP.
    Step("resume", f"mkdir -p {G}/resume && python {G}/as_cuda.py {G}/train/checkpoint-0.pth "
         f"{G}/resume/checkpoint-0.pth && set -o pipefail && python "
         + TRAIN.format(uf=2, out=f"{G}/resume", epochs=2) + " --disable_eval true --use_amp true"
         f" 2>&1 | tee {G}/resume.log && grep -q 'Resume checkpoint {G}/resume/checkpoint-0.pth' {G}/resume.log",
         outputs=[f"{G}/resume/checkpoint-1.pth"], timeout=300, env=PICKLE),
    # README's evaluation command (--eval true --resume CKPT --input_size --drop_path 0.2 --data_path) on a
    # checkpoint written on CUDA.
    Step("eval", f"set -o pipefail && python main.py --model convnext_tiny --eval true "
         f"--resume {G}/resume/checkpoint-0.pth --input_size 64 --drop_path 0.2 --data_path {DATA} "
         f"--batch_size 2 --num_workers 1 2>&1 | tee {G}/eval.log && grep -q 'Acc@1' {G}/eval.log",
         outputs=[f"{G}/eval.log"], timeout=300, env=PICKLE),
    # 2 processes (torchrun for the README's torch.distributed.launch): DDP, AMP, distributed EMA evaluation.
    Step("train_2proc", "torchrun --nproc_per_node=2 " + TRAIN.format(uf=1, out=f"{G}/ddp", epochs=1)
         + " --use_amp true --save_ckpt false",
         outputs=[f"{G}/ddp/log.txt"], timeout=300, env=ENV),
]
