"""DETR on a synthetic COCO (2 train / 2 val images): one epoch of training with COCO eval, evaluation
and a resumed epoch from a checkpoint written as on CUDA, and one epoch on 2 processes (torchrun).

The backbone always asks torchvision for ImageNet weights (``pretrained=is_main_process()``, no flag
avoids it), so ``prepare`` lays random resnet18 weights in a private ``TORCH_HOME`` hub cache, where
torchvision finds them without a download.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

DATA = "_gauntlet/coco"
TORCH_HOME = "_gauntlet/torch"
# The model, scaled down by main.py's own flags; every run of main.py takes them.
SMALL = ("--coco_path " + DATA + " --backbone resnet18 --lr_backbone 0 --enc_layers 1 --dec_layers 1"
         " --hidden_dim 32 --dim_feedforward 64 --nheads 2 --num_queries 5 --batch_size 1 --num_workers 0")
ENV = {"TORCH_HOME": "{tree}/" + TORCH_HOME}

# Writes the checkpoint a CUDA run of main.py writes after epoch 0 (model, optimizer, lr_scheduler,
# epoch): the repository's own build_model and main.py's parser, an AdamW step on zero gradients.
# Run in a child process from the tree's root, so the tree's modules stay out of the caller.
_CHECKPOINT = r"""
import sys, torch
sys.path.insert(0, ".")
from main import get_args_parser
from models import build_model
args = get_args_parser().parse_args(sys.argv[2:])
args.device = "cpu"  # only to build the weights here; the steps never choose a device
torch.manual_seed(0)
model, criterion, postprocessors = build_model(args)
param_dicts = [
    {"params": [p for n, p in model.named_parameters() if "backbone" not in n and p.requires_grad]},
    {"params": [p for n, p in model.named_parameters() if "backbone" in n and p.requires_grad],
     "lr": args.lr_backbone},
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

    # Long thin images: the transforms resize the short side to 480-800 px but cap the long side at
    # 1333, so a 10:1 image costs the backbone about a quarter of a square one.
    _coco(tree / DATA, "train", [(160, 16), (16, 160)], seed=0)
    _coco(tree / DATA, "val", [(160, 16), (16, 160)], seed=1)

    # Random ImageNet-shaped resnet18 weights where torchvision's hub cache looks for the real ones.
    torch.manual_seed(0)
    url = torchvision.models.ResNet18_Weights.IMAGENET1K_V1.url
    cache = tree / TORCH_HOME / "hub" / "checkpoints" / url.rsplit("/", 1)[1]
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(torchvision.models.resnet18().state_dict(), cache)

    local = tree / "_gauntlet" / "cpu_checkpoint.pth"
    env = dict(os.environ, TORCH_HOME=str(tree / TORCH_HOME), CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", _CHECKPOINT, str(local), *SMALL.split()], cwd=tree, env=env, check=True)
    save_cuda_checkpoint(torch.load(local, map_location="cpu"), tree / "_gauntlet" / "cuda_checkpoint.pth")
    local.unlink()


STEPS = [
    Step("train", f"python main.py {SMALL} --epochs 1 --output_dir _gauntlet/out",
         outputs=["_gauntlet/out/checkpoint.pth", "_gauntlet/out/eval/latest.pth", "_gauntlet/out/log.txt"],
         timeout=300, env=ENV),
    Step("eval", f"python main.py {SMALL} --eval --resume _gauntlet/cuda_checkpoint.pth --output_dir _gauntlet/eval",
         outputs=["_gauntlet/eval/eval.pth"], timeout=300, env=ENV),
    Step("resume", f"python main.py {SMALL} --epochs 2 --resume _gauntlet/cuda_checkpoint.pth"
         " --output_dir _gauntlet/resume",
         outputs=["_gauntlet/resume/checkpoint.pth", "_gauntlet/resume/log.txt"], timeout=300, env=ENV),
    # The README's launcher (torch.distributed.launch --use_env), 2 processes.
    Step("ddp", "python -m torch.distributed.launch --standalone --nproc_per_node=2 --use_env main.py"
         f" {SMALL} --epochs 1 --output_dir _gauntlet/ddp",
         outputs=["_gauntlet/ddp/checkpoint.pth", "_gauntlet/ddp/eval/latest.pth"], timeout=300, env=ENV),
]
