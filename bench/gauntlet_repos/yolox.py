"""Megvii-BaseDetection/YOLOX: the README's commands, tiny.

- ``train``: ``python -m yolox.tools.train -n yolox-s -d 8 -b 64 --fp16 -o`` (README, "Reproduce our results on
  COCO") as ``-n yolox-nano -d 1 -b 2 --fp16 -o`` on a synthetic COCO under datasets/COCO (the README's layout:
  annotations/instances_{train,val}2017.json, train2017/, val2017/; 80 COCO categories, 10 train and 4 val images of
  64-96 px), scaled down by the Exp's own command-line options (``exp.merge(args.opts)``): 2 epochs (the first with
  mosaic, the last without, as the schedule's no_aug_epochs), 64 px input and test size, random_size (2, 3) for the
  multi-scale resize that runs every 10 iterations (the 10th is the last), print_interval 1, data_num_workers 0,
  COCO evaluation after each epoch. --fp16 and -o (occupy GPU memory) as the README has them; never a device flag.
- ``eval``: ``python -m yolox.tools.eval -n yolox-s -c yolox_s.pth -b 64 -d 8 --conf 0.001 [--fp16] [--fuse]`` as
  ``-n yolox-nano -c <the train step's last_epoch_ckpt.pth> -b 2 -d 1 --conf 0.001 --fuse --tsize 64``.
- ``eval-pretrained``: the same on a released-style yolox_nano.pth (``{"model": state_dict}``) that prepare() writes
  as a CUDA machine's torch.save would (every storage tagged cuda:0), with --fp16 --fuse (the README's speed command).
  Its random weights have the objectness and one class's biases raised so every anchor scores about 0.9: the
  evaluator's NMS, the COCO json and the C++ fast COCOeval all run (the trained checkpoint predicts nothing).
- ``demo``: ``python tools/demo.py image -n yolox-s -c /path/to/your/yolox_s.pth --path assets/dog.jpg --conf 0.25
  --nms 0.45 --tsize 640 --save_result --device [cpu/gpu]`` with ``--device gpu`` (what a GPU user types; the
  default is cpu), the pretrained checkpoint, --tsize 64.
- ``train-2proc``: the train command with ``-d 2 -b 4 --fp16 -o`` (yolox.core.launch: mp.start_processes, one
  worker a "GPU", the default --dist-backend nccl), 1 epoch without mosaic, evaluation (gathered) at its end.

Not CUDA matters, handled the same on the original and the port:
- ``pip install -v -e .`` builds the fast COCOeval C++ extension (yolox/layers/cocoeval, a CppExtension: no CUDA)
  into the tree: prepare() runs the tree's own ``setup.py build_ext --inplace`` once (MAX_JOBS=1) and caches the
  library by the content of its sources (and the torch and Python versions); the tree runs in place (``python -m
  yolox.tools.*`` from its root, as the editable install: yolox/exp/default and yolox/tools find exps/ and tools/).
- PyPI's torchvision is built against CUDA torch, so its C++ ops (nms, batched_nms) do not load on this CPU torch: a
  ``sitecustomize`` on PYTHONPATH gives torchvision a plain-torch nms. The same file makes cv2.waitKey return -1
  where opencv-python-headless raises (demo.py calls it after every image, also with --save_result).
- TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1: the trainer's checkpoints hold the COCO AP as a numpy float (torch >= 2.6
  loads weights-only by default, on every device).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
SITE = f"{G}/site"
# LOGURU_BACKTRACE/DIAGNOSE off: @logger.catch then prints a plain traceback (no "> File" marker line), which the
# harness reads for the failing line (added after the first run; nothing about the device).
ENV = {"PYTHONPATH": "{tree}:{tree}/" + SITE, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "OMP_NUM_THREADS": "1",
       "MPLBACKEND": "Agg", "LOGURU_BACKTRACE": "0", "LOGURU_DIAGNOSE": "0"}

SITECUSTOMIZE = r'''
"""Not CUDA: PyPI's torchvision is built against CUDA torch and its C++ ops don't load on this CPU torch."""


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
    try:
        import torchvision.extension
        import torchvision.ops
        import torchvision.ops.boxes
    except Exception:
        return
    if not torchvision.extension._has_ops():
        torchvision.extension._assert_has_ops = lambda: None
        torchvision.ops.boxes._assert_has_ops = lambda: None
        torchvision.ops.boxes.nms = lambda boxes, scores, iou_threshold: _nms(boxes, scores, iou_threshold)
        torchvision.ops.nms = torchvision.ops.boxes.nms


_compat()


def _headless():
    """Not CUDA either: tools/demo.py calls cv2.waitKey(0) after each image even with --save_result; PyPI's
    opencv-python-headless has no GUI backend and raises there, where a desktop OpenCV with no window open returns."""
    try:
        import cv2
    except Exception:
        return
    try:
        cv2.waitKey(1)
    except cv2.error:
        cv2.waitKey = lambda delay=0: -1


_headless()
'''

# The COCO category ids (1..90 with the 10 gaps), in the order of yolox's COCO_CLASSES.
_COCO_IDS = [i for i in range(1, 91) if i not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]

_CACHE_ROOT = Path.home() / ".cache" / "porter-gauntlet" / "yolox-ext"


def _build_extension(tree: Path) -> None:
    """The README's ``pip install -v -e .`` for the one compiled op: ``setup.py build_ext --inplace``, cached."""
    import hashlib
    import os
    import shutil
    import subprocess
    import sys

    import torch

    digest = hashlib.sha256(torch.__version__.encode() + sys.version.encode())
    for path in sorted((tree / "yolox" / "layers" / "cocoeval").glob("*")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    cache = _CACHE_ROOT / digest.hexdigest()[:16]
    built = sorted(cache.glob("fast_cocoeval*.so")) if cache.is_dir() else []
    if not built:
        env = dict(os.environ, MAX_JOBS="1", OMP_NUM_THREADS="1")
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        cache.mkdir(parents=True, exist_ok=True)
        for lib in (tree / "yolox" / "layers").glob("fast_cocoeval*.so"):
            shutil.copy2(lib, cache / lib.name)
        shutil.rmtree(tree / "build", ignore_errors=True)
        built = sorted(cache.glob("fast_cocoeval*.so"))
    for lib in built:
        shutil.copy2(lib, tree / "yolox" / "layers" / lib.name)


def _write_coco(root: Path) -> None:
    import json

    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(0)
    categories = [{"id": cid, "name": f"class{cid}", "supercategory": "thing"} for cid in _COCO_IDS]
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    ann_id = 1
    for split, count in (("train2017", 10), ("val2017", 4)):
        folder = root / split
        folder.mkdir(parents=True, exist_ok=True)
        images, annotations = [], []
        for i in range(count):
            h, w = (64, 64) if i % 2 == 0 else (72, 96)
            pixels = generator.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            image_id = 1000 * (split == "val2017") + i + 1
            for k in range(1 + i % 3):
                bw, bh = (float(v) for v in generator.uniform(0.25, 0.5, size=2) * (w, h))
                x, y = float(generator.uniform(0, w - bw)), float(generator.uniform(0, h - bh))
                category = (1, 3, 18)[(i + k) % 3]  # person, car, dog
                pixels[int(y):int(y + bh), int(x):int(x + bw)] = ((255, 0, 0), (0, 255, 0), (0, 0, 255))[(i + k) % 3]
                annotations.append({"id": ann_id, "image_id": image_id, "category_id": category,
                                    "bbox": [round(x, 2), round(y, 2), round(bw, 2), round(bh, 2)],
                                    "area": round(bw * bh, 2), "iscrowd": 0, "segmentation": []})
                ann_id += 1
            name = f"{image_id:012d}.jpg"
            Image.fromarray(pixels).save(folder / name)
            images.append({"id": image_id, "file_name": name, "height": h, "width": w})
        (root / "annotations" / f"instances_{split}.json").write_text(json.dumps(
            {"info": {}, "licenses": [], "images": images, "annotations": annotations, "categories": categories}))


# Only to build the released-style checkpoint in prepare(): the tree's own Exp and model, on the CPU, in a child
# process from the tree's root (nothing here touches a device).
_PRETRAINED = r"""
import sys, torch
sys.path.insert(0, ".")
from yolox.exp import get_exp
torch.manual_seed(0)
model = get_exp(None, "yolox-nano").get_model()
for conv in model.head.obj_preds:
    torch.nn.init.constant_(conv.bias, 3.0)
for conv in model.head.cls_preds:
    torch.nn.init.constant_(conv.bias, -4.0)
    conv.bias.data[0] = 3.0  # person
torch.save({"model": model.state_dict()}, sys.argv[1])
"""


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import torch

    work = tree / G
    (tree / SITE).mkdir(parents=True, exist_ok=True)
    (tree / SITE / "sitecustomize.py").write_text(SITECUSTOMIZE)
    _write_coco(tree / "datasets" / "COCO")
    _build_extension(tree)

    local = work / "cpu_yolox_nano.pth"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(tree))
    subprocess.run([sys.executable, "-c", _PRETRAINED, str(local)], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    save_cuda_checkpoint(torch.load(local, map_location="cpu"), work / "yolox_nano.pth")
    local.unlink()


OUT = "YOLOX_outputs"
# The Exp's own options, after the command (tools/train.py: exp.merge(args.opts)).
OPTS = ("max_epoch 2 no_aug_epochs 1 warmup_epochs 1 data_num_workers 0 input_size 64,64 test_size 64,64 "
        "random_size 2,3 print_interval 1 eval_interval 1")

STEPS = [
    # The scripts' main() is wrapped in loguru's @logger.catch, which logs the traceback and exits 0: each step also
    # checks what only a finished run writes, so a failure exits non-zero with its traceback in the output.
    Step("train", f"python -m yolox.tools.train -n yolox-nano -d 1 -b 2 --fp16 -o {OPTS} "
         f"&& test -f {OUT}/yolox_nano/epoch_2_ckpt.pth",
         outputs=[f"{OUT}/yolox_nano/latest_ckpt.pth", f"{OUT}/yolox_nano/last_epoch_ckpt.pth",
                  f"{OUT}/yolox_nano/epoch_2_ckpt.pth", f"{OUT}/yolox_nano/tensorboard/events.*"],
         env=ENV, timeout=600),
    Step("eval", f"python -m yolox.tools.eval -n yolox-nano -c {OUT}/yolox_nano/last_epoch_ckpt.pth -b 2 -d 1 "
         f"--conf 0.001 --fuse --tsize 64 data_num_workers 0 "
         f"&& grep -q 'Average forward time' {OUT}/yolox_nano/val_log.txt",
         outputs=[f"{OUT}/yolox_nano/val_log.txt"], env=ENV, timeout=300),
    Step("eval-pretrained", f"python -m yolox.tools.eval -n yolox-nano -c {G}/yolox_nano.pth -b 2 -d 1 "
         f"--conf 0.001 --fp16 --fuse --tsize 64 -expn pretrained data_num_workers 0 "
         f"&& grep -q 'Average Precision' {OUT}/pretrained/val_log.txt",
         outputs=[f"{OUT}/pretrained/val_log.txt"], env=ENV, timeout=300),
    Step("demo", f"python tools/demo.py image -n yolox-nano -c {G}/yolox_nano.pth --path assets/dog.jpg --conf 0.25 "
         f"--nms 0.45 --tsize 64 --save_result --device gpu && test -n \"$(ls {OUT}/yolox_nano/vis_res/*/dog.jpg)\"",
         outputs=[f"{OUT}/yolox_nano/vis_res/*/dog.jpg"], env=ENV, timeout=300),
    Step("train-2proc", f"python -m yolox.tools.train -n yolox-nano -d 2 -b 4 --fp16 -o -expn yolox_nano_2proc "
         "max_epoch 1 no_aug_epochs 1 warmup_epochs 1 data_num_workers 0 input_size 64,64 test_size 64,64 "
         f"print_interval 1 && test -f {OUT}/yolox_nano_2proc/latest_ckpt.pth",
         outputs=[f"{OUT}/yolox_nano_2proc/latest_ckpt.pth"], env=ENV, timeout=600),
]
