"""Deformable DETR as its README runs it, on a synthetic COCO (2 train / 2 val images):

- ``build-ops``: the README's "Compiling CUDA operators" step, ``cd ./models/ops && sh ./make.sh``
  (``python setup.py build install``). So that it cannot write into the recipe's shared environment, the step's
  ``HOME`` holds a ``.pydistutils.cfg`` that sends ``install`` to ``_gauntlet/site`` (what a user's environment's
  site-packages is), and every later step has that folder on ``PYTHONPATH``.
- ``ops-test``: the README's unit test (``python test.py``, "should see all checking is True") scaled down: its
  own two forward checks and its numerical gradient check for its first two channel counts (30, 32). test.py has
  no flag, and its full list (up to 3096 channels) builds dense numerical Jacobians of tens of GB. The step fails
  if any check prints False.
- ``train``: ``./configs/r50_deformable_detr.sh`` (the README's default config; ``python -u main.py
  --output_dir exps/... ${PY_ARGS}``) for one epoch, with COCO eval after it, the model scaled down by main.py's own
  flags (1 encoder and 1 decoder layer, hidden 32, 2 heads, 5 queries, frozen backbone, batch 1, no workers); the
  backbone stays ResNet-50 (backbone.py asserts it is not resnet18/34) and the 4 feature levels stay.
- ``eval``: the README's evaluation, ``<config> --resume <checkpoint> --eval``, from a checkpoint written as on a
  CUDA machine (``save_cuda_checkpoint``; model, optimizer, lr_scheduler, epoch as main.py saves them, without its
  ``args`` Namespace, which torch.load's weights_only refuses for a reason that is not CUDA).
- ``ddp``: the README's single-node launcher, ``GPUS_PER_NODE=2 ./tools/run_dist_launch.sh 2 <config>``
  (tools/launch.py, 2 processes), one epoch.

Not CUDA: prepare makes util/misc.py's four ``float(torchvision.__version__[:3])`` checks read ``0.7`` (torchvision
0.28 reads as 0.2, and the < 0.5 branch imports a torchvision 0.4 private); the ``interpolate`` helper they guard is
only called with masks (--masks), which the recipe does not train.

The backbone always asks torchvision for ImageNet weights (``pretrained=is_main_process()``, no flag avoids it),
so ``prepare`` lays random ResNet-50 weights (fp16, to keep the tree small) in a private ``TORCH_HOME`` hub
cache, where torchvision finds them without a download. The checkpoint is built by the repository's own
build_model in a child process with a placeholder ``MultiScaleDeformableAttention`` module (building the model
never calls the extension; the original cannot build it).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
DATA = f"{G}/coco"
TORCH_HOME = f"{G}/torch"
SITE = f"{G}/site"
CONFIG = "./configs/r50_deformable_detr.sh"
# The model, scaled down by main.py's own flags; every run of main.py takes them.
SMALL = (f"--coco_path {DATA} --lr_backbone 0 --enc_layers 1 --dec_layers 1 --hidden_dim 32 --dim_feedforward 64"
         " --nheads 2 --num_queries 5 --batch_size 1 --num_workers 0")
ENV = {"TORCH_HOME": "{tree}/" + TORCH_HOME, "PYTHONPATH": "{tree}/" + SITE, "MASTER_PORT": "29617"}
TV_VERSION = "float(torchvision.__version__[:3])"
BUILD_ENV = {"HOME": "{tree}/" + G + "/home"}

OPS_TEST = ("import test; test.check_forward_equal_with_pytorch_double(); test.check_forward_equal_with_pytorch_float(); "
            "[test.check_gradient_numerical(c, True, True, True) for c in (30, 32)]")

# Writes the checkpoint a CUDA run of main.py writes after epoch 0 (model, optimizer, lr_scheduler, epoch): the
# repository's own build_model and main.py's parser, an AdamW step on zero gradients, main.py's param groups.
# Run in a child process from the tree's root, so the tree's modules stay out of the caller.
_CHECKPOINT = r"""
import sys, types, torch
sys.path.insert(0, ".")
sys.modules.setdefault("MultiScaleDeformableAttention", types.ModuleType("MultiScaleDeformableAttention"))
from main import get_args_parser
from models import build_model
args = get_args_parser().parse_args(sys.argv[2:])
args.device = "cpu"  # only to build the weights here; the steps never choose a device
torch.manual_seed(0)
model, criterion, postprocessors = build_model(args)
def match(n, keys):
    return any(k in n for k in keys)
named = list(model.named_parameters())
param_dicts = [
    {"params": [p for n, p in named if not match(n, args.lr_backbone_names)
                and not match(n, args.lr_linear_proj_names) and p.requires_grad], "lr": args.lr},
    {"params": [p for n, p in named if match(n, args.lr_backbone_names) and p.requires_grad], "lr": args.lr_backbone},
    {"params": [p for n, p in named if match(n, args.lr_linear_proj_names) and p.requires_grad],
     "lr": args.lr * args.lr_linear_proj_mult},
]
optimizer = torch.optim.AdamW(param_dicts, lr=args.lr, weight_decay=args.weight_decay)
lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, args.lr_drop)
for p in model.parameters():
    if p.requires_grad:
        p.grad = torch.zeros_like(p)
optimizer.step()
lr_scheduler.step()
state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
         "lr_scheduler": lr_scheduler.state_dict(), "epoch": 0}
torch.save(state, sys.argv[1])
"""


def _coco(folder: Path, split: str, sizes, seed: int) -> None:
    import json

    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(seed)
    (folder / f"{split}2017").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for index, (width, height) in enumerate(sizes, start=1):
        pixels = generator.integers(0, 256, size=(height, width, 3), dtype=np.uint8)
        name = f"{index:012d}.jpg"
        Image.fromarray(pixels).save(folder / f"{split}2017" / name)
        images.append({"id": index, "file_name": name, "width": width, "height": height})
        for k in range(2):
            w, h = float(generator.integers(4, width // 2)), float(generator.integers(4, height // 2))
            x, y = float(generator.integers(0, width - w)), float(generator.integers(0, height - h))
            annotations.append({"id": len(annotations) + 1, "image_id": index, "category_id": 1 + (index + k) % 3,
                                "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0,
                                "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]]})
    categories = [{"id": i, "name": name, "supercategory": "thing"} for i, name in ((1, "a"), (2, "b"), (3, "c"))]
    (folder / "annotations").mkdir(parents=True, exist_ok=True)
    (folder / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(
        {"info": {"description": "gauntlet"}, "licenses": [], "images": images, "annotations": annotations,
         "categories": categories}))


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import torch
    import torchvision

    # Long thin images: the transforms resize the short side to 480-800 px but cap the long side at 1333, so a
    # 10:1 image costs the backbone about a quarter of a square one.
    _coco(tree / DATA, "train", [(160, 16), (16, 160)], seed=0)
    _coco(tree / DATA, "val", [(160, 16), (16, 160)], seed=1)

    # Not CUDA: util/misc.py reads torchvision's version as float(__version__[:3]), so 0.28 reads as 0.2 < 0.5 and
    # it imports torchvision.ops.misc._NewEmptyTensorOp, gone since torchvision 0.5. Read it as the >= 0.7 it is.
    misc = tree / "util" / "misc.py"
    text = misc.read_text()
    if TV_VERSION in text:  # (a tree prepared before has them read already)
        assert text.count(TV_VERSION) == 4, "util/misc.py's torchvision version checks changed"
        misc.write_text(text.replace(TV_VERSION, "0.7"))

    # `setup.py install` (make.sh) into the tree's own site folder, never the shared environment.
    site, home = tree / SITE, tree / G / "home"
    site.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    (home / ".pydistutils.cfg").write_text(
        "[install]\n"
        f"install_lib={site}\ninstall_scripts={tree / G / 'bin'}\n"
        f"install_data={tree / G / 'data'}\ninstall_headers={tree / G / 'include'}\n")

    # Random ImageNet-shaped ResNet-50 weights where torchvision's hub cache looks for the real ones.
    torch.manual_seed(0)
    url = torchvision.models.ResNet50_Weights.IMAGENET1K_V1.url
    cache = tree / TORCH_HOME / "hub" / "checkpoints" / url.rsplit("/", 1)[1]
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in torchvision.models.resnet50().state_dict().items()},
               cache)

    local = tree / G / "cpu_checkpoint.pth"
    env = dict(os.environ, TORCH_HOME=str(tree / TORCH_HOME), CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", _CHECKPOINT, str(local), *SMALL.split()], cwd=tree, env=env, check=True)
    save_cuda_checkpoint(torch.load(local, map_location="cpu"), tree / G / "cuda_checkpoint.pth")
    local.unlink()


STEPS = [
    Step("build-ops", "cd ./models/ops && sh ./make.sh", timeout=600, env=BUILD_ENV),
    Step("ops-test", f'set -o pipefail; cd ./models/ops && python -c "{OPS_TEST}" | tee ../../{G}/ops_test.txt'
         f" && ! grep -q False ../../{G}/ops_test.txt",
         outputs=[f"{G}/ops_test.txt"], timeout=300, env=ENV),
    Step("train", f"{CONFIG} {SMALL} --epochs 1 --output_dir {G}/out",
         outputs=[f"{G}/out/checkpoint.pth", f"{G}/out/eval/latest.pth", f"{G}/out/log.txt"], timeout=400, env=ENV),
    Step("eval", f"{CONFIG} {SMALL} --resume {G}/cuda_checkpoint.pth --eval --output_dir {G}/eval",
         outputs=[f"{G}/eval/eval.pth"], timeout=300, env=ENV),
    # The README's single-node launcher (tools/launch.py), 2 processes.
    Step("ddp", f"GPUS_PER_NODE=2 ./tools/run_dist_launch.sh 2 {CONFIG} {SMALL} --epochs 1 --output_dir {G}/ddp",
         outputs=[f"{G}/ddp/checkpoint.pth", f"{G}/ddp/eval/latest.pth"], timeout=400, env=ENV),
]
