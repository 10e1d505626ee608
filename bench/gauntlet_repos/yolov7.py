"""YOLOv7's README commands on a synthetic 2-class YOLO-format dataset and a tiny random checkpoint written as on CUDA:
train.py from scratch (a P5 model, OTA loss, the epoch's test and plots), the README's transfer learning (train.py
--weights a released-style *_training.pt), a resume of an interrupted CUDA run (train.py --resume its last.pt and
opt.yaml), the README's multi-GPU training (torch.distributed.launch, 2 processes, --sync-bn), test.py (mAP,
--save-txt) and detect.py on an image.

The repository's own config, shrunk by its own knobs: cfg/training/yolov7-tiny.yaml copied into _gauntlet/ with
nc: 2 and width_multiple 0.25; the hyperparameter files are the repository's own (data/hyp.scratch.tiny.yaml,
hyp.scratch.custom.yaml). 4 training images of 64 px, 1 epoch of one batch of 4, --workers 0, --noautoanchor
(k-means on 4 images is meaningless). Never a --device flag. train_aux.py (P6 models) is left out: the same
device code as train.py, and one step of it took 4 minutes on the shared 2-core runner.

Not CUDA matters, handled the same on the original and the port: every script runs through _gauntlet/run.py,
which gives torchvision a plain-torch nms (PyPI's torchvision is built against CUDA torch, so its C++ ops do not
load on this CPU torch) and turns torch.distributed.launch's `--local-rank=N` (torch >= 2.0) into the
`--local_rank=N` that yolov7's parser was written for (torch < 2.0 passed that); TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1,
since yolov7's checkpoints pickle the whole Model and torch >= 2.6 loads weights-only by default.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "MPLBACKEND": "Agg", "WANDB_MODE": "disabled"}

RUN_PY = r'''
"""Runs argv[1] (a yolov7 script) as __main__ with the rest of argv, after two not-CUDA shims."""
import os
import runpy
import sys


def _nms(boxes, scores, iou_threshold):
    import torch
    from torchvision.ops.boxes import box_iou

    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        iou = box_iou(boxes[i][None], boxes[order[1:]])[0]
        order = order[1:][iou <= iou_threshold]
    return torch.stack(keep) if keep else torch.empty(0, dtype=torch.long, device=boxes.device)


def _compat():
    import torchvision.extension
    import torchvision.ops
    import torchvision.ops.boxes

    if not torchvision.extension._has_ops():
        torchvision.extension._assert_has_ops = lambda: None
        torchvision.ops.boxes._assert_has_ops = lambda: None
        torchvision.ops.boxes.nms = lambda boxes, scores, iou_threshold: _nms(boxes, scores, iou_threshold)
        torchvision.ops.nms = torchvision.ops.boxes.nms


_compat()

args = sys.argv[1:]
ranks = [a.split("=", 1)[1] for a in args if a.startswith(("--local-rank=", "--local_rank="))]
args = [a for a in args if not a.startswith(("--local-rank=", "--local_rank="))]
script, rest = args[0], args[1:]
if ranks:
    rest.append("--local_rank=" + ranks[0])
sys.argv = [script] + rest
sys.path[0] = os.path.dirname(os.path.abspath(script))
runpy.run_path(script, run_name="__main__")
'''


def _write_data(work: Path) -> None:
    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(0)
    for split, count in (("train", 4), ("val", 2)):
        images, labels = work / "data" / "images" / split, work / "data" / "labels" / split
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            h, w = (96, 96) if i % 2 == 0 else (80, 112)
            pixels = generator.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            rows = []
            for _ in range(1 + i % 3):
                bw, bh = generator.uniform(0.2, 0.5, size=2)
                cx, cy = generator.uniform(bw / 2, 1 - bw / 2), generator.uniform(bh / 2, 1 - bh / 2)
                x0, y0 = int((cx - bw / 2) * w), int((cy - bh / 2) * h)
                x1, y1 = int((cx + bw / 2) * w), int((cy + bh / 2) * h)
                pixels[y0:y1, x0:x1] = (255, 0, 0) if i % 2 else (0, 0, 255)  # something to find
                rows.append(f"{i % 2} {cx:.6f} {cy:.6f} {bw:.6f} {bh:.6f}")
            Image.fromarray(pixels).save(images / f"img{i}.jpg")
            (labels / f"img{i}.txt").write_text("\n".join(rows) + "\n")
    (work / "data.yaml").write_text(
        f"train: {G}/data/images/train\nval: {G}/data/images/val\nnc: 2\nnames: ['a', 'b']\n")


def _shrink(tree: Path, work: Path, name: str, width: float) -> Path:
    text = (tree / "cfg" / "training" / f"{name}.yaml").read_text()
    text = text.replace("nc: 80", "nc: 2", 1).replace("width_multiple: 1.0", f"width_multiple: {width}", 1)
    out = work / f"{name}.yaml"
    out.write_text(text)
    return out


def _param_groups(model):
    """train.py's three optimizer groups (BN weights and implicit knowledge / conv weights / biases)."""
    import torch.nn as nn

    pg0, pg1, pg2 = [], [], []
    for _, v in model.named_modules():
        if hasattr(v, "bias") and isinstance(v.bias, nn.Parameter):
            pg2.append(v.bias)
        if isinstance(v, nn.BatchNorm2d):
            pg0.append(v.weight)
        elif hasattr(v, "weight") and isinstance(v.weight, nn.Parameter):
            pg1.append(v.weight)
        for attr in ("im", "imc", "imb", "imo", "ia"):
            if hasattr(v, attr):
                sub = getattr(v, attr)
                if hasattr(sub, "implicit"):
                    pg0.append(sub.implicit)
                else:
                    pg0.extend(iv.implicit for iv in sub)
    return pg0, pg1, pg2


def prepare(tree: Path) -> None:
    import os
    import sys
    from copy import deepcopy

    import torch
    import yaml

    work = tree / G
    work.mkdir(parents=True, exist_ok=True)
    (work / "run.py").write_text(RUN_PY)
    _write_data(work)
    tiny = _shrink(tree, work, "yolov7-tiny", 0.25)

    sys.path.insert(0, str(tree))
    cwd = os.getcwd()
    os.chdir(tree)
    try:
        from models.yolo import Model
        from utils.torch_utils import ModelEMA

        torch.manual_seed(0)
        model = Model(str(tiny), ch=3, nc=2)
        model.names = ["a", "b"]

        # A released-style checkpoint (as strip_optimizer leaves yolov7_training.pt): the fp16 model, nothing else.
        released = deepcopy(model).half()
        for p in released.parameters():
            p.requires_grad = False
        save_cuda_checkpoint({"epoch": -1, "best_fitness": None, "training_results": None, "model": released,
                              "ema": None, "updates": None, "optimizer": None, "wandb_id": None},
                             work / "yolov7_training.pt")

        # An interrupted CUDA run of 2 epochs, after epoch 0: last.pt (model, EMA, SGD state) and its opt.yaml.
        pg0, pg1, pg2 = _param_groups(model)
        optimizer = torch.optim.SGD(pg0, lr=0.01, momentum=0.937, nesterov=True)
        optimizer.add_param_group({"params": pg1, "weight_decay": 0.0005})
        optimizer.add_param_group({"params": pg2})
        torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda x: 1.0)  # sets initial_lr, as train.py's
        for group in optimizer.param_groups:
            for p in group["params"]:
                p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad()
        ema = ModelEMA(model)
        run = work / "runs" / "cuda" / "exp"
        save_cuda_checkpoint({"epoch": 0, "best_fitness": 0.0, "training_results": None,
                              "model": deepcopy(model).half(), "ema": deepcopy(ema.ema).half(),
                              "updates": ema.updates, "optimizer": optimizer.state_dict(), "wandb_id": None},
                             run / "weights" / "last.pt")
    finally:
        os.chdir(cwd)
    opt = {
        "weights": "", "cfg": f"{G}/yolov7-tiny.yaml", "data": f"{G}/data.yaml", "hyp": "data/hyp.scratch.tiny.yaml",
        "epochs": 2, "batch_size": 4, "img_size": [64, 64], "rect": False, "resume": False, "nosave": False,
        "notest": False, "noautoanchor": True, "evolve": False, "bucket": "", "cache_images": False,
        "image_weights": False, "device": "", "multi_scale": False, "single_cls": False, "adam": False,
        "sync_bn": False, "local_rank": -1, "workers": 0, "project": f"{G}/runs/cuda", "entity": None,
        "name": "exp", "exist_ok": False, "quad": False, "linear_lr": False, "label_smoothing": 0.0,
        "upload_dataset": False, "bbox_interval": -1, "save_period": -1, "artifact_alias": "latest",
        "freeze": [0], "v5_metric": False, "world_size": 1, "global_rank": -1,
        "save_dir": f"{G}/runs/cuda/exp", "total_batch_size": 4,
    }
    (run / "opt.yaml").write_text(yaml.safe_dump(opt, sort_keys=False))


RUN = f"python {G}/run.py "
COMMON = f"--workers 0 --data {G}/data.yaml --epochs 1 --noautoanchor --project {G}/runs/train --weights '' "
P5 = f"--img 64 64 --cfg {G}/yolov7-tiny.yaml --hyp data/hyp.scratch.tiny.yaml "

STEPS = [
    Step("train", RUN + "train.py " + COMMON + P5 + "--batch-size 4 --name yolov7",
         outputs=[f"{G}/runs/train/yolov7/weights/last.pt", f"{G}/runs/train/yolov7/results.txt"],
         timeout=300, env=ENV),
    Step("finetune", RUN + f"train.py --workers 0 --batch-size 4 --data {G}/data.yaml --img 64 64 "
         f"--cfg {G}/yolov7-tiny.yaml --weights {G}/yolov7_training.pt --name yolov7-custom "
         f"--hyp data/hyp.scratch.custom.yaml --epochs 1 --noautoanchor --project {G}/runs/train",
         outputs=[f"{G}/runs/train/yolov7-custom/weights/last.pt"], timeout=300, env=ENV),
    Step("resume", RUN + f"train.py --resume {G}/runs/cuda/exp/weights/last.pt",
         outputs=[f"{G}/runs/cuda/exp/weights/epoch_001.pt"], timeout=300, env=ENV),
    Step("ddp", f"python -m torch.distributed.launch --nproc_per_node 2 --master_port 29577 {G}/run.py train.py "
         + COMMON + P5 + "--sync-bn --batch-size 4 --name yolov7-ddp",
         outputs=[f"{G}/runs/train/yolov7-ddp/weights/last.pt"], timeout=300, env=ENV),
    Step("test", RUN + f"test.py --data {G}/data.yaml --img 64 --batch 2 --conf 0.001 --iou 0.65 "
         f"--weights {G}/yolov7_training.pt --name yolov7_64_val --project {G}/runs/test --save-txt",
         outputs=[f"{G}/runs/test/yolov7_64_val/labels/*.txt"], timeout=300, env=ENV),
    Step("detect", RUN + f"detect.py --weights {G}/yolov7_training.pt --conf 0.25 --img-size 64 "
         f"--source {G}/data/images/val/img0.jpg --project {G}/runs/detect",
         outputs=[f"{G}/runs/detect/exp/img0.jpg"], timeout=300, env=ENV),
]
