"""microsoft/Swin-Transformer: get_started.md's image-classification commands (main.py), tiny.

- ``train_2proc``: "Training from scratch on ImageNet-1K" (``python -m torch.distributed.launch --nproc_per_node <n>
  main.py --cfg configs/swin/swin_tiny_patch4_window7_224.yaml --data-path <imagenet-path> --batch-size ...``) as a
  2-process ``torchrun`` (the launcher's replacement; main.py reads LOCAL_RANK from the environment on torch 2.x),
  on a synthetic ImageNet folder layout (train/ and val/ class folders, get_started.md's "standard folder dataset"),
  Swin-T's config scaled down by ``--opts`` (64x64 images, window 4, embed dim 24): one epoch with the defaults
  (pytorch AMP on, Mixup/CutMix, label smoothing, AdamW, cosine schedule, gradient clipping), validation and
  ``ckpt_epoch_0.pth``.
- ``resume``: the train step's checkpoint re-saved as a CUDA machine writes it (every storage tagged cuda:0), found
  by main.py's auto-resume (TRAIN.AUTO_RESUME, the default) in a fresh output folder, trained a second epoch.
- ``eval``: "Evaluation" (``python -m torch.distributed.launch --nproc_per_node 1 --master_port ... main.py --eval
  --cfg ... --resume <checkpoint> --data-path ...``), the launcher itself, on the CUDA-written checkpoint.
- ``finetune``: "Fine-tuning on higher resolution" (``--pretrained <checkpoint>``): load_pretrained on a CUDA-written
  {'model': ...} checkpoint into a model with another window size (bicubic interpolation of the relative position
  bias tables), then one epoch, 1-process torchrun.
- ``throughput``: "Throughput" (``--batch-size 64 --throughput --disable_amp``), 1-process torchrun.

Not CUDA, identical on the original and the port: main.py pickles its yacs config into every checkpoint and
torch.load()s them without weights_only, which torch >= 2.6 refuses on every device; the steps that load one run
with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1. torchrun runs with --standalone (a free port: other jobs share the machine).
"""

from pathlib import Path

from _recipe import Step, write_images

G = "_gauntlet"
DATA = f"{G}/imagenet"
OUT = f"{G}/output"
NAME = "swin_tiny_patch4_window7_224"  # MODEL.NAME of the yaml: the output folder is OUTPUT/NAME/TAG
CFG = "configs/swin/swin_tiny_patch4_window7_224.yaml"
CLASSES = ("n01440764", "n01443537")
ENV = {"OMP_NUM_THREADS": "1"}
PICKLE = {**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
# Swin-T scaled down by the repository's own config keys (--opts KEY VALUE ..., get_started.md): 64x64 inputs
# (patch 4 -> 16x16 tokens, then 8, 4, 2) with window 4 (shifted windows and their attention mask in stages 1-2),
# embed dim 24, two blocks a stage; one epoch without warm-up; logging every step; one loader worker.
MODEL = ("DATA.IMG_SIZE 64 MODEL.SWIN.WINDOW_SIZE {window} MODEL.SWIN.EMBED_DIM 24 MODEL.SWIN.DEPTHS '[2,2,2,2]' "
         "DATA.NUM_WORKERS 1 PRINT_FREQ 1 TRAIN.WARMUP_EPOCHS 0 TRAIN.EPOCHS {epochs}")
MAIN = f"main.py --cfg {CFG} --data-path {DATA} --batch-size 2 --output {OUT}"


def opts(window: int = 4, epochs: int = 1) -> str:
    return "--opts " + MODEL.format(window=window, epochs=epochs)


AS_CUDA = '''\
"""Re-save a checkpoint as a CUDA machine writes it: every storage tagged cuda:0 (_recipe.save_cuda_checkpoint).
With --model-only, only {'model': ...} (a released pretrained checkpoint's layout)."""
import sys

import torch
from torch import serialization

source, target = sys.argv[1], sys.argv[2]
obj = torch.load(source, map_location="cpu", weights_only=False)
if "--model-only" in sys.argv:
    obj = {"model": obj["model"]}
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
torch.save(obj, target)
'''


def prepare(tree: Path) -> None:
    # 2 classes x 4 images to train on (2 processes x batch 2: one step a rank), 2 x 2 to validate on.
    write_images(tree / DATA / "train", count=4, size=72, classes=CLASSES, suffix=".JPEG", seed=0)
    write_images(tree / DATA / "val", count=2, size=72, classes=CLASSES, suffix=".JPEG", seed=1)
    (tree / G).mkdir(parents=True, exist_ok=True)
    (tree / G / "as_cuda.py").write_text(AS_CUDA)


TRAIN_CKPT = f"{OUT}/{NAME}/train/ckpt_epoch_0.pth"
CUDA_CKPT = f"{G}/cuda/ckpt_epoch_0.pth"

STEPS = [
    Step("train_2proc", f"torchrun --standalone --nproc_per_node 2 {MAIN} --tag train {opts()}",
         outputs=[TRAIN_CKPT, f"{OUT}/{NAME}/train/config.json", f"{OUT}/{NAME}/train/log_rank1.txt"],
         timeout=400, env=ENV),
    # The checkpoint as written on a GPU box, in a fresh output folder: auto-resume finds it and trains epoch 1.
    Step("resume", f"mkdir -p {OUT}/{NAME}/resume {G}/cuda && python {G}/as_cuda.py {TRAIN_CKPT} "
         f"{OUT}/{NAME}/resume/ckpt_epoch_0.pth && python {G}/as_cuda.py {TRAIN_CKPT} {CUDA_CKPT} && "
         f"set -o pipefail && torchrun --standalone --nproc_per_node 1 {MAIN} --tag resume {opts(epochs=2)} "
         f"2>&1 | tee {G}/resume.log && grep -q 'auto resuming from' {G}/resume.log",
         outputs=[f"{OUT}/{NAME}/resume/ckpt_epoch_1.pth"], timeout=300, env=PICKLE),
    # get_started.md's evaluation command, with its own launcher, on the CUDA-written checkpoint.
    Step("eval", f"set -o pipefail && python -m torch.distributed.launch --nproc_per_node 1 --master_port 29741 "
         f"main.py --eval --cfg {CFG} --resume {CUDA_CKPT} --data-path {DATA} --batch-size 2 --output {OUT} "
         f"--tag eval {opts()} 2>&1 | tee {G}/eval.log && grep -q 'Acc@1' {G}/eval.log",
         outputs=[f"{G}/eval.log"], timeout=300, env=PICKLE),
    # Fine-tuning from a released-style checkpoint ({'model': ...}, CUDA-written) at another window size.
    Step("finetune", f"python {G}/as_cuda.py {TRAIN_CKPT} {G}/cuda/pretrained.pth --model-only && set -o pipefail "
         f"&& torchrun --standalone --nproc_per_node 1 {MAIN} --tag finetune --pretrained {G}/cuda/pretrained.pth "
         f"{opts(window=2)} 2>&1 | tee {G}/finetune.log && grep -q 'loaded successfully' {G}/finetune.log",
         outputs=[f"{OUT}/{NAME}/finetune/ckpt_epoch_0.pth"], timeout=300, env=ENV),
    Step("throughput", f"set -o pipefail && torchrun --standalone --nproc_per_node 1 {MAIN} --tag throughput "
         f"--throughput --disable_amp {opts()} 2>&1 | tee {G}/throughput.log && grep -q 'throughput' "
         f"{G}/throughput.log", outputs=[f"{G}/throughput.log"], timeout=300, env=ENV),
]
