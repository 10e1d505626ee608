"""facebookresearch/detectron2: the README's (GETTING_STARTED.md's) commands, tiny.

- ``train-net``: ``tools/train_net.py --config-file configs/COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml
  --num-gpus 1 SOLVER.IMS_PER_BATCH 2 SOLVER.BASE_LR 0.0025`` (GETTING_STARTED's one-GPU command), 2 iterations on
  a synthetic COCO (``coco_2017_train`` / ``coco_2017_val``, the builtin names, found under DETECTRON2_DATASETS as
  datasets/README.md lays them out), images of 64-112 px, MODEL.WEIGHTS "" (no ImageNet download); the trainer's
  EvalHook runs the COCO evaluation (detectron2's C++ fast COCOeval) at the end.
- ``eval-only``: ``tools/train_net.py --config-file ... --eval-only MODEL.WEIGHTS /path/to/checkpoint_file`` on the
  checkpoint the first step wrote.
- ``train-net-2proc``: the README's multi-GPU command (``--num-gpus 8``) with 2 processes (detectron2's own launch:
  mp.start_processes, one worker a "GPU"), 1 iteration, RetinaNet (configs/COCO-Detection/retinanet_R_50_FPN_1x.yaml).
- ``plain-train-net``: ``tools/plain_train_net.py`` (its own loop, evaluation at the end) on Faster R-CNN
  (configs/COCO-Detection/faster_rcnn_R_50_FPN_1x.yaml), 2 iterations.
- ``lazyconfig-train``: ``tools/lazyconfig_train_net.py --config-file
  configs/COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.py`` with the README's key=value overrides (train.max_iter,
  the data's sizes and batch, train.init_checkpoint=""), evaluation at the end.
- ``demo``: ``demo/demo.py --config-file configs/COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_3x.yaml --input
  img.jpg --output ... --opts MODEL.WEIGHTS ...`` on a synthetic image, with a model_final.pth that prepare() writes
  as a CUDA machine's torch.save would (every storage tagged cuda:0), random weights stored small (expanded).

Not CUDA matters, handled the same on the original and the port:
- detectron2._C (the C++ operators: rotated boxes, the fast COCOeval) is built in place by the repository's own
  ``setup.py build_ext --inplace`` (what ``pip install -e .`` does; with no CUDA torch it builds the CPU operators
  only), with MAX_JOBS=1; the built library is cached by the content of detectron2/layers/csrc (and the torch and
  Python versions), so each tree with the same C++ sources reuses it (about 15 minutes a build on the shared cores). The tree is on PYTHONPATH (the editable install).
- PyPI's torchvision is built against CUDA torch, so its C++ ops do not load on this CPU torch: a ``sitecustomize``
  on PYTHONPATH gives torchvision a plain-torch nms (roi_align already falls back to its own Python version when its
  ops are missing). That Python roi_align, with the configs' adaptive sampling (sampling_ratio 0), samples every
  RoI on a grid as large as the whole feature map (gigabytes and minutes an iteration here), so the steps set the
  poolers' sampling ratio to 2 by the repository's own keys (MODEL.ROI_BOX_HEAD/ROI_MASK_HEAD.POOLER_SAMPLING_RATIO,
  model.roi_heads.{box,mask}_pooler.sampling_ratio); with torchvision's C++ ops (a Mac's) that is not needed.
- demo/demo.py imports ``vision.fair.detectron2.demo.predictor`` (Meta's internal path, a bug at this commit): the
  site folder holds a module by that name that re-exports demo/predictor.py.
- TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is not needed: fvcore's Checkpointer loads with map_location="cpu".
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
SITE = f"{G}/site"
OUT = f"{G}/out"
ENV = {"PYTHONPATH": "{tree}:{tree}/" + SITE, "DETECTRON2_DATASETS": "{tree}/" + G + "/datasets",
       "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}

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
        torchvision.ops.boxes._assert_has_ops = lambda: None
        torchvision.ops.boxes.nms = lambda boxes, scores, iou_threshold: _nms(boxes, scores, iou_threshold)
        torchvision.ops.nms = torchvision.ops.boxes.nms


_compat()
'''

# The data and networks scaled down by the repository's own config keys (never MODEL.DEVICE).
SMALL = ("INPUT.MIN_SIZE_TRAIN '(64,)' INPUT.MAX_SIZE_TRAIN 112 INPUT.MIN_SIZE_TEST 64 INPUT.MAX_SIZE_TEST 112 "
         "DATALOADER.NUM_WORKERS 0 MODEL.WEIGHTS '' MODEL.ROI_HEADS.BATCH_SIZE_PER_IMAGE 64 "
         "MODEL.RPN.POST_NMS_TOPK_TRAIN 200 MODEL.RPN.POST_NMS_TOPK_TEST 100 TEST.DETECTIONS_PER_IMAGE 20 "
         "MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO 2 MODEL.ROI_MASK_HEAD.POOLER_SAMPLING_RATIO 2 "
         "SOLVER.CHECKPOINT_PERIOD 1000 VIS_PERIOD 0")
MASK_1X = "configs/COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml"
TRAIN_NET = (f"python tools/train_net.py --config-file {MASK_1X} --num-gpus 1 SOLVER.IMS_PER_BATCH 2 "
             f"SOLVER.BASE_LR 0.0025 SOLVER.MAX_ITER 2 {SMALL}")
LAZY = ("python tools/lazyconfig_train_net.py --config-file configs/COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.py "
        f"train.max_iter=2 train.eval_period=0 train.log_period=1 train.init_checkpoint='' "
        f"train.output_dir={OUT}/lazy train.checkpointer.period=1000 "
        "dataloader.train.total_batch_size=2 dataloader.train.num_workers=0 dataloader.test.num_workers=0 "
        "'dataloader.train.mapper.augmentations.0.short_edge_length=[64]' "
        "dataloader.train.mapper.augmentations.0.max_size=112 "
        "dataloader.test.mapper.augmentations.0.short_edge_length=64 "
        "dataloader.test.mapper.augmentations.0.max_size=112 "
        "model.roi_heads.batch_size_per_image=64 'model.proposal_generator.post_nms_topk=[200,100]' "
        "model.roi_heads.box_pooler.sampling_ratio=2 model.roi_heads.mask_pooler.sampling_ratio=2 "
        "optimizer.lr=0.0025")
DEMO_CKPT = f"{G}/checkpoints/mask_rcnn_R_50_FPN_3x/model_final.pth"

# Builds the extension in place with the tree's own setup.py (CPU operators only, without CUDA torch).
_CACHE_ROOT = Path.home() / ".cache" / "porter-gauntlet" / "detectron2-ext"


def _build_extension(tree: Path) -> None:
    import hashlib
    import os
    import shutil
    import subprocess
    import sys

    import torch

    digest = hashlib.sha256(torch.__version__.encode() + sys.version.encode())
    sources = sorted((tree / "detectron2" / "layers" / "csrc").rglob("*"))
    for path in sources:
        if path.is_file():
            digest.update(str(path.relative_to(tree)).encode())
            digest.update(path.read_bytes())
    cache = _CACHE_ROOT / digest.hexdigest()[:16]
    built = sorted(cache.glob("_C*.so")) if cache.is_dir() else []
    if not built:
        env = dict(os.environ, MAX_JOBS="1", OMP_NUM_THREADS="1")
        env.pop("FORCE_CUDA", None)
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        built = sorted((tree / "detectron2").glob("_C*.so"))
        if not built:
            raise RuntimeError("setup.py build_ext left no detectron2/_C*.so")
        cache.mkdir(parents=True, exist_ok=True)
        for so in built:
            shutil.copy2(so, cache / so.name)
    else:
        for so in built:
            shutil.copy2(so, tree / "detectron2" / so.name)


def _coco_categories(tree: Path) -> list:
    import ast

    text = (tree / "detectron2" / "data" / "datasets" / "builtin_meta.py").read_text()
    module = ast.parse(text)
    for node in module.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COCO_CATEGORIES":
            return [c for c in ast.literal_eval(node.value) if c["isthing"]]
    raise RuntimeError("no COCO_CATEGORIES in builtin_meta.py")


def _write_coco(root: Path, categories: list) -> None:
    """coco/{train2017,val2017}/*.jpg and coco/annotations/instances_{train,val}2017.json, as datasets/README.md."""
    import json

    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(0)
    ids = [c["id"] for c in categories[:3]]
    cats = [{"id": c["id"], "name": c["name"], "supercategory": "thing"} for c in categories]
    for split, count in (("train2017", 4), ("val2017", 2)):
        folder = root / "coco" / split
        folder.mkdir(parents=True, exist_ok=True)
        images, annotations = [], []
        for i in range(count):
            h, w = (64, 96) if i % 2 == 0 else (80, 112)
            pixels = generator.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            name = f"{i:012d}.jpg"
            image_id = 1 + i
            for k in range(1 + i % 3):
                bw, bh = int(generator.integers(12, w // 2)), int(generator.integers(12, h // 2))
                x0, y0 = int(generator.integers(0, w - bw)), int(generator.integers(0, h - bh))
                pixels[y0:y0 + bh, x0:x0 + bw] = (255, 0, 0) if k % 2 else (0, 0, 255)
                annotations.append({
                    "id": len(annotations) + 1 + 100 * image_id, "image_id": image_id, "category_id": ids[k % len(ids)],
                    "bbox": [x0, y0, bw, bh], "area": float(bw * bh), "iscrowd": 0,
                    "segmentation": [[x0, y0, x0 + bw, y0, x0 + bw, y0 + bh, x0, y0 + bh]],
                })
            Image.fromarray(pixels).save(folder / name)
            images.append({"id": image_id, "file_name": name, "height": h, "width": w})
        (root / "coco" / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "coco" / "annotations" / f"instances_{split}.json").write_text(
            json.dumps({"images": images, "annotations": annotations, "categories": cats}))


# Only to get the Mask R-CNN's state-dict shapes in prepare(): the tree's own config and builder, on the CPU, in a
# child process from the tree's root (MODEL.DEVICE cpu here only; the steps never set it).
_SHAPES = r"""
import sys, torch
sys.path.insert(0, ".")
from detectron2.config import get_cfg
from detectron2.modeling import build_model
cfg = get_cfg()
cfg.merge_from_file(sys.argv[2])
cfg.MODEL.DEVICE = "cpu"
model = build_model(cfg)
torch.save({k: tuple(v.shape) for k, v in model.state_dict().items()}, sys.argv[1])
"""


def _small_state(shapes: dict) -> dict:
    """Random weights for each shape, every tensor of 2+ dims a small storage expanded (as a checkpoint, a few MB)."""
    import math

    import torch

    generator = torch.Generator().manual_seed(0)
    state = {}
    for key, shape in shapes.items():
        if len(shape) == 0:
            state[key] = torch.zeros(())
        elif len(shape) == 1:
            if key.endswith("running_var") or (key.endswith(".weight") and ".norm" in key):
                state[key] = torch.ones(shape)
            else:
                state[key] = torch.zeros(shape)
        else:
            small = torch.randn(shape[0], 1, *shape[2:], generator=generator)
            small *= math.sqrt(2.0 / max(1, math.prod(shape[2:]))) / shape[1]
            state[key] = small.expand(shape)
    return state


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import numpy as np
    import torch
    from PIL import Image

    (tree / SITE).mkdir(parents=True, exist_ok=True)
    (tree / SITE / "sitecustomize.py").write_text(SITECUSTOMIZE)
    # demo/demo.py at this commit imports its sibling by Meta's internal path (vision.fair.detectron2.demo.predictor,
    # a repository bug, not CUDA): that name re-exports demo/predictor.py (demo/ is sys.path[0] for demo/demo.py).
    alias = tree / SITE / "vision" / "fair" / "detectron2" / "demo"
    alias.mkdir(parents=True, exist_ok=True)
    (alias / "predictor.py").write_text("from predictor import *  # noqa: F401,F403  (demo/predictor.py)\n"
                                        "from predictor import VisualizationDemo  # noqa: F401\n")
    _build_extension(tree)
    _write_coco(tree / G / "datasets", _coco_categories(tree))
    demo = tree / G / "demo"
    demo.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(1).integers(0, 256, size=(72, 96, 3), dtype=np.uint8)).save(demo / "input1.jpg")
    (tree / OUT / "demo").mkdir(parents=True, exist_ok=True)

    shapes_file = tree / G / "shapes.pt"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=f"{tree}:{tree / SITE}")
    subprocess.run([sys.executable, "-c", _SHAPES, str(shapes_file),
                    "configs/COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_3x.yaml"],
                   cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    shapes = torch.load(shapes_file)
    shapes_file.unlink()
    save_cuda_checkpoint({"model": _small_state(shapes), "iteration": 270000}, tree / DEMO_CKPT)


STEPS = [
    Step("train-net", f"{TRAIN_NET} OUTPUT_DIR {OUT}/train_net",
         outputs=[f"{OUT}/train_net/model_final.pth", f"{OUT}/train_net/inference/coco_instances_results.json",
                  f"{OUT}/train_net/metrics.json"], env=ENV, timeout=600),
    Step("eval-only", f"python tools/train_net.py --config-file {MASK_1X} --eval-only {SMALL} "
                      f"MODEL.WEIGHTS {OUT}/train_net/model_final.pth OUTPUT_DIR {OUT}/eval_only",
         outputs=[f"{OUT}/eval_only/inference/coco_instances_results.json"], env=ENV, timeout=300),
    Step("train-net-2proc", "python tools/train_net.py --config-file configs/COCO-Detection/retinanet_R_50_FPN_1x.yaml "
                            f"--num-gpus 2 SOLVER.IMS_PER_BATCH 2 SOLVER.BASE_LR 0.0025 SOLVER.MAX_ITER 1 {SMALL} "
                            f"OUTPUT_DIR {OUT}/train_net_2proc",
         outputs=[f"{OUT}/train_net_2proc/model_final.pth",
                  f"{OUT}/train_net_2proc/inference/coco_instances_results.json"], env=ENV, timeout=600),
    Step("plain-train-net", "python tools/plain_train_net.py --config-file "
                            "configs/COCO-Detection/faster_rcnn_R_50_FPN_1x.yaml --num-gpus 1 SOLVER.IMS_PER_BATCH 2 "
                            f"SOLVER.BASE_LR 0.0025 SOLVER.MAX_ITER 2 {SMALL} OUTPUT_DIR {OUT}/plain",
         outputs=[f"{OUT}/plain/model_final.pth", f"{OUT}/plain/inference/coco_2017_val/coco_instances_results.json"],
         env=ENV, timeout=600),
    Step("lazyconfig-train", LAZY,
         outputs=[f"{OUT}/lazy/model_final.pth", f"{OUT}/lazy/metrics.json"], env=ENV, timeout=600),
    Step("demo", "python demo/demo.py --config-file configs/COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_3x.yaml "
                 f"--input {G}/demo/input1.jpg --output {OUT}/demo --opts MODEL.WEIGHTS {DEMO_CKPT} "
                 "INPUT.MIN_SIZE_TEST 64 INPUT.MAX_SIZE_TEST 112 MODEL.ROI_BOX_HEAD.POOLER_SAMPLING_RATIO 2 "
                 "MODEL.ROI_MASK_HEAD.POOLER_SAMPLING_RATIO 2 TEST.DETECTIONS_PER_IMAGE 20",
         outputs=[f"{OUT}/demo/input1.jpg"], env=ENV, timeout=300),
]
