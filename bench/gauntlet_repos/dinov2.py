"""DINOv2: the README's training (dinov2/train/train.py, which its submitit launcher dinov2/run/train/train.py calls)
and k-NN evaluation (dinov2/eval/knn.py, called by dinov2/run/eval/knn.py), launched directly (the repository's
"local script run" path of dinov2.distributed.enable, and torchrun's preset environment), scaled down by a config
file of its own format (vit_small/16 at 64/32 px crops, 2 local crops, tiny DINO/iBOT heads, an "epoch" of 2
iterations, batch 2) on a synthetic ImageNet-1k laid out as the README says (train/val class folders, labels.txt,
the extra .npy files made with the README's own dump_extra snippet).

Steps: train one process; resume from the train step's checkpoint re-saved as a CUDA machine writes it (storages
tagged cuda:0); train 2 processes under torchrun (FSDP SHARD_GRAD_OP really sharded); k-NN evaluation of the
teacher weights training saved (re-saved as on CUDA).

The steps put a ``sitecustomize`` on PYTHONPATH (with ``.``, which the README asks for) that does two things that
fail the original on every device, and selects nothing about the device:
- ImageNet.__len__ asserts the entry count equals the real ImageNet split size (1,281,167 / 50,000): it returns
  the entry count of the synthetic split instead.
- dinov2/fsdp and ssl_meta_arch use FSDP private attributes of torch 2.0 (the version it pins) that later torch
  renamed: ``FSDP._streams`` (read and set after the first backward), ``FSDP._handles`` (a list; now ``_handle``)
  and ``_runtime_utils._reshard(state, handles, free_flags)`` (now one handle and one flag). The shim restores
  those three names over the current ones.
"""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
DATA = f"{G}/imagenet"
SITE = f"{G}/site"
# PYTHONPATH=. is the README's; the sitecustomize (above) rides along. Threads kept low on the shared CPU.
ENV = {"PYTHONPATH": "{tree}:{tree}/" + SITE, "OMP_NUM_THREADS": "1"}
# fvcore's Checkpointer loads with torch.load's default weights_only, which refuses FSDP's LOCAL_STATE_DICT
# (ShardedTensor) and the optimizer pickle on torch >= 2.6 on every device: the load the repository was written for.
PICKLE = {**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
CLASSES = [f"n{i:08d}" for i in range(6)]  # k-NN's top-5 accuracy needs at least 5 classes
TRAIN_DS = f"ImageNet:split=TRAIN:root={DATA}:extra={DATA}"
VAL_DS = f"ImageNet:split=VAL:root={DATA}:extra={DATA}"

CONFIG = """\
# gauntlet: dinov2/configs/train/vitl16_short.yaml scaled down (same keys as ssl_default_config.yaml)
train:
  dataset_path: {train}
  batch_size_per_gpu: 2
  num_workers: 0
  OFFICIAL_EPOCH_LENGTH: 2
student:
  arch: vit_small
  patch_size: 16
  block_chunks: 4
dino:
  head_n_prototypes: 64
  head_bottleneck_dim: 16
  head_nlayers: 2
  head_hidden_dim: 32
ibot:
  head_n_prototypes: 64
  head_bottleneck_dim: 16
  head_nlayers: 2
  head_hidden_dim: 32
teacher:
  warmup_teacher_temp_epochs: 1
optim:
  epochs: {epochs}
  warmup_epochs: 0
crops:
  local_crops_number: 2
  global_crops_size: 64
  local_crops_size: 32
evaluation:
  eval_period_iterations: 2
"""

SITECUSTOMIZE = '''\
# gauntlet: not CUDA matters (see the recipe's docstring); nothing here picks a device.
import importlib.abc
import importlib.util
import sys


class _ImageNetSize(importlib.abc.MetaPathFinder):
    """After dinov2.data.datasets.image_net is imported: the split's size is its entry count."""

    def find_spec(self, name, path=None, target=None):
        if name != "dinov2.data.datasets.image_net":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            module.ImageNet.__len__ = lambda self: len(self._get_entries())

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _ImageNetSize())

try:  # torch 2.0's FSDP private names, which dinov2 (pinned to torch 2.0.0) uses
    from torch.distributed.fsdp import FullyShardedDataParallel as _FSDP
    from torch.distributed.fsdp import _runtime_utils as _ru

    _FSDP._streams = {}
    if not hasattr(_FSDP, "_handles"):
        _FSDP._handles = property(lambda self: [self._handle] if getattr(self, "_handle", None) else [])
    _reshard_one = _ru._reshard

    def _reshard(state, handle, free_unsharded_flat_param):
        if isinstance(handle, (list, tuple)):
            for h, free in zip(handle, free_unsharded_flat_param):
                _reshard_one(state, h, free)
            return None
        return _reshard_one(state, handle, free_unsharded_flat_param)

    _ru._reshard = _reshard
except Exception:
    pass
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
    import os
    import subprocess
    import sys

    import numpy as np
    from PIL import Image

    work = tree / G
    data = tree / DATA
    generator = np.random.default_rng(0)
    for split, per_class in (("train", 2), ("val", 1)):
        for c, class_id in enumerate(CLASSES):
            folder = data / split / class_id
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                pixels = generator.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
                name = f"{class_id}_{i + 1}" if split == "train" else f"ILSVRC2012_val_{c * per_class + i + 1:08d}"
                Image.fromarray(pixels).save(folder / f"{name}.JPEG", format="JPEG")
    (data / "labels.txt").write_text("".join(f"{class_id},class {i}\n" for i, class_id in enumerate(CLASSES)))

    # The README's snippet for the extra metadata (TEST has no images here: only TRAIN and VAL are used). In a child
    # process: this recipe module is imported under the name `dinov2`, the repository's own package.
    snippet = ("from dinov2.data.datasets import ImageNet\n"
               "for split in (ImageNet.Split.TRAIN, ImageNet.Split.VAL):\n"
               f"    dataset = ImageNet(split=split, root={str(data)!r}, extra={str(data)!r})\n"
               "    dataset.dump_extra()\n")
    subprocess.run([sys.executable, "-c", snippet], cwd=tree, check=True,
                   env={**os.environ, "PYTHONPATH": str(tree)})

    (work / "tiny.yaml").write_text(CONFIG.format(train=TRAIN_DS, epochs=1))
    (work / "tiny_resume.yaml").write_text(CONFIG.format(train=TRAIN_DS, epochs=2))
    (tree / SITE).mkdir(parents=True, exist_ok=True)
    (tree / SITE / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "as_cuda.py").write_text(AS_CUDA)


TRAIN = "python dinov2/train/train.py --config-file {config} --output-dir {out}"
KNN = (f"python dinov2/eval/knn.py --config-file {G}/single/config.yaml "
       f"--pretrained-weights {G}/cuda/teacher_checkpoint.pth --output-dir {G}/knn "
       f"--train-dataset {TRAIN_DS} --val-dataset {VAL_DS} --nb_knn 2 4 --batch-size 16")

STEPS = [
    # One "epoch" of 2 iterations: model_final, the teacher weights for evaluation (eval_period_iterations 2).
    Step("train", TRAIN.format(config=f"{G}/tiny.yaml", out=f"{G}/single"),
         outputs=[f"{G}/single/model_final.rank_0.pth", f"{G}/single/eval/training_1/teacher_checkpoint.pth",
                  f"{G}/single/training_metrics.json"], timeout=300, env=ENV),
    # The train step's checkpoint as a CUDA machine writes it, then training resumed from it for a second epoch
    # (train.py resumes from the output dir's last_checkpoint.rank_0 unless --no-resume).
    Step("resume", f"mkdir -p {G}/resume && python {G}/as_cuda.py {G}/single/model_final.rank_0.pth "
         f"{G}/resume/model_final.rank_0.pth && printf model_final.rank_0.pth > {G}/resume/last_checkpoint.rank_0 && "
         + TRAIN.format(config=f"{G}/tiny_resume.yaml", out=f"{G}/resume")
         + f" && grep -q 'Starting training from iteration 2' {G}/resume/logs/log.txt",
         outputs=[f"{G}/resume/eval/training_3/teacher_checkpoint.pth"], timeout=300, env=PICKLE),
    # Two processes under torchrun: FSDP SHARD_GRAD_OP sharded over 2 ranks.
    Step("train_2proc", "torchrun --nproc_per_node=2 " + TRAIN.format(config=f"{G}/tiny.yaml", out=f"{G}/ddp")
         .removeprefix("python "),
         outputs=[f"{G}/ddp/model_final.rank_0.pth", f"{G}/ddp/model_final.rank_1.pth"], timeout=300, env=ENV),
    # k-NN classification of the teacher weights training saved, as written on a CUDA machine.
    Step("eval_knn", f"mkdir -p {G}/cuda && python {G}/as_cuda.py {G}/single/eval/training_1/teacher_checkpoint.pth "
         f"{G}/cuda/teacher_checkpoint.pth && " + KNN,
         outputs=[f"{G}/knn/results_eval_knn.json"], timeout=300, env=ENV),
]
