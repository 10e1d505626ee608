"""facebookresearch/Mask2Former: its INSTALL.md / GETTING_STARTED.md commands, tiny.

- ``build-ops``: INSTALL.md's "CUDA kernel for MSDeformAttn", ``cd mask2former/modeling/pixel_decoder/ops && sh
  make.sh`` (``python setup.py build install``). So that it cannot write into the recipe's shared environment, the
  step's ``HOME`` holds a ``.pydistutils.cfg`` that sends ``install`` to ``_gauntlet/site`` (a user's
  site-packages), and every later step has that folder on ``PYTHONPATH``.
- ``train-net``: GETTING_STARTED's one-GPU training, ``train_net.py --config-file
  configs/ade20k/semantic-segmentation/maskformer2_R50_bs16_160k.yaml --num-gpus 1 SOLVER.IMS_PER_BATCH ..
  SOLVER.BASE_LR ..``, 2 iterations on a synthetic ADE20K (``ade20k_sem_seg_train`` / ``_val``, detectron2's builtin
  names under DETECTRON2_DATASETS, as datasets/README.md lays them out), then the trainer's final SemSegEvaluator
  pass. The model is scaled down by the repository's own keys (10 queries, 3 decoder layers, 1 deformable encoder
  layer, 256 sampled points, 64 px crops), MODEL.WEIGHTS "" (no ImageNet download). The config's SOLVER.AMP.ENABLED
  True is kept (the README's config as is).
- ``eval-only``: GETTING_STARTED's ``train_net.py --config-file ... --eval-only MODEL.WEIGHTS /path/to/checkpoint_file``
  on a checkpoint that prepare writes as a CUDA machine's torch.save would (every storage tagged cuda:0).
- ``train-coco-instance``: the same training command on the COCO instance-segmentation config
  (configs/coco/instance-segmentation/maskformer2_R50_bs16_50ep.yaml, the LSJ mapper, INPUT.IMAGE_SIZE 64), 1
  iteration on a synthetic COCO (``coco_2017_train`` / ``coco_2017_val``), then its COCOEvaluator pass.
- ``demo``: GETTING_STARTED's ``cd demo/ && python demo.py --config-file ../configs/... --input input1.jpg --output
  ... --opts MODEL.WEIGHTS ...`` on a synthetic image, with the CUDA-tagged checkpoint.

Not CUDA, handled the same on the original and the port:
- detectron2 is not on PyPI: prepare extracts the pinned detectron2 (02b5c4e) from the bare mirror
  (``$PORTER_GAUNTLET_MIRROR`` or /work/.mirror) into ``_gauntlet/detectron2`` and puts it on PYTHONPATH (what
  ``pip install -e .`` does; it is a dependency, not part of the tree porter ports); its ``_C`` (CPU operators and
  the fast COCOeval that detectron2.evaluation imports) is built by its own ``setup.py build_ext --inplace`` with
  MAX_JOBS=1 and cached by the C++ sources' content in the same cache as the detectron2 recipe (about 20 minutes on
  the loaded 2 cores the first time).
- The 2-process ``--num-gpus 8`` command is left out: detectron2's own create_ddp_model passes device_ids to DDP
  (detectron2/engine/defaults.py:74, the detectron2 entry's blocker), in the dependency, outside the ported tree.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
SITE = f"{G}/site"
OUT = f"{G}/out"
D2 = f"{G}/detectron2"
D2_COMMIT = "02b5c4e295e990042a714712c21dc79b731e8833"
ENV = {"PYTHONPATH": "{tree}:{tree}/" + D2 + ":{tree}/" + SITE, "DETECTRON2_DATASETS": "{tree}/" + G + "/datasets",
       "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
BUILD_ENV = {"HOME": "{tree}/" + G + "/home", "MAX_JOBS": "1"}

ADE = "configs/ade20k/semantic-segmentation/maskformer2_R50_bs16_160k.yaml"
COCO = "configs/coco/instance-segmentation/maskformer2_R50_bs16_50ep.yaml"
# The model and data scaled down by the repository's own config keys (never MODEL.DEVICE).
MODEL = ("MODEL.WEIGHTS '' MODEL.MASK_FORMER.NUM_OBJECT_QUERIES 10 MODEL.MASK_FORMER.DEC_LAYERS 3 "
         "MODEL.MASK_FORMER.DIM_FEEDFORWARD 128 MODEL.MASK_FORMER.TRAIN_NUM_POINTS 256 "
         "MODEL.SEM_SEG_HEAD.TRANSFORMER_ENC_LAYERS 1 "
         "DATALOADER.NUM_WORKERS 0 SOLVER.CHECKPOINT_PERIOD 1000 TEST.EVAL_PERIOD 0")
ADE_SMALL = (f"{MODEL} INPUT.MIN_SIZE_TRAIN '(64,)' INPUT.MAX_SIZE_TRAIN 128 INPUT.CROP.SIZE '(64,64)' "
             "INPUT.SIZE_DIVISIBILITY 64 INPUT.MIN_SIZE_TEST 64 INPUT.MAX_SIZE_TEST 128")
COCO_SMALL = f"{MODEL} INPUT.IMAGE_SIZE 64 INPUT.MIN_SIZE_TEST 64 INPUT.MAX_SIZE_TEST 128 TEST.DETECTIONS_PER_IMAGE 20"
TRAIN = "python train_net.py --config-file {config} --num-gpus 1 SOLVER.IMS_PER_BATCH 2 SOLVER.BASE_LR 0.0001"
CKPT = f"{G}/checkpoints/maskformer2_R50_ade20k/model_final.pth"

_CACHE_ROOT = Path.home() / ".cache" / "porter-gauntlet" / "detectron2-ext"


def _extract_detectron2(tree: Path) -> Path:
    import os
    import subprocess

    target = tree / D2
    if (target / "setup.py").is_file():
        return target
    mirror = Path(os.environ.get("PORTER_GAUNTLET_MIRROR", "/work/.mirror")) / "facebookresearch+detectron2" / "repo"
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", f"--git-dir={mirror}", "archive", D2_COMMIT], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def _build_extension(d2: Path) -> None:
    """detectron2/_C by its own setup.py build_ext --inplace (CPU operators only without CUDA torch), cached by the
    C++ sources' content (the same key as bench/gauntlet_repos/detectron2.py)."""
    import hashlib
    import os
    import shutil
    import subprocess
    import sys

    import torch

    digest = hashlib.sha256(torch.__version__.encode() + sys.version.encode())
    for path in sorted((d2 / "detectron2" / "layers" / "csrc").rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(d2)).encode())
            digest.update(path.read_bytes())
    cache = _CACHE_ROOT / digest.hexdigest()[:16]
    built = sorted(cache.glob("_C*.so")) if cache.is_dir() else []
    if not built:
        env = dict(os.environ, MAX_JOBS="1", OMP_NUM_THREADS="1")
        env.pop("FORCE_CUDA", None)
        subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=d2, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        built = sorted((d2 / "detectron2").glob("_C*.so"))
        if not built:
            raise RuntimeError("setup.py build_ext left no detectron2/_C*.so")
        cache.mkdir(parents=True, exist_ok=True)
        for so in built:
            shutil.copy2(so, cache / so.name)
    else:
        for so in built:
            shutil.copy2(so, d2 / "detectron2" / so.name)


def _literal(d2: Path, name: str) -> list:
    import ast

    module = ast.parse((d2 / "detectron2" / "data" / "datasets" / "builtin_meta.py").read_text())
    for node in module.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return ast.literal_eval(node.value)
    raise RuntimeError(f"no {name} in builtin_meta.py")


def _write_ade20k(root: Path) -> None:
    """ADEChallengeData2016/images/{training,validation}/*.jpg and annotations_detectron2/.../*.png (labels 0-149,
    255 ignored), as datasets/prepare_ade20k_sem_seg.py writes them."""
    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(0)
    for split, count in (("training", 4), ("validation", 2)):
        images = root / "ADEChallengeData2016" / "images" / split
        labels = root / "ADEChallengeData2016" / "annotations_detectron2" / split
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            h, w = (64, 96) if i % 2 == 0 else (80, 72)
            pixels = generator.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
            label = np.full((h, w), 255, dtype=np.uint8)
            for k in range(3):
                y0, x0 = int(generator.integers(0, h // 2)), int(generator.integers(0, w // 2))
                cls = int(generator.integers(0, 150))
                label[y0:y0 + h // 2, x0:x0 + w // 2] = cls
                pixels[y0:y0 + h // 2, x0:x0 + w // 2] = (cls, 255 - cls, (7 * cls) % 256)
            name = f"ADE_{split[:5]}_{i:08d}"
            Image.fromarray(pixels).save(images / f"{name}.jpg")
            Image.fromarray(label).save(labels / f"{name}.png")


def _write_coco(root: Path, categories: list) -> None:
    """coco/{train2017,val2017}/*.jpg and coco/annotations/instances_{train,val}2017.json, as datasets/README.md."""
    import json

    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(0)
    ids = [c["id"] for c in categories[:3]]
    cats = [{"id": c["id"], "name": c["name"], "supercategory": "thing"} for c in categories]
    for split, count in (("train2017", 2), ("val2017", 2)):
        folder = root / "coco" / split
        folder.mkdir(parents=True, exist_ok=True)
        images, annotations = [], []
        for i in range(count):
            h, w = (64, 96) if i % 2 == 0 else (80, 72)
            pixels = generator.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
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
            name = f"{image_id:012d}.jpg"
            Image.fromarray(pixels).save(folder / name)
            images.append({"id": image_id, "file_name": name, "height": h, "width": w})
        (root / "coco" / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "coco" / "annotations" / f"instances_{split}.json").write_text(
            json.dumps({"images": images, "annotations": annotations, "categories": cats}))


# The ADE20K model's state dict (random weights), built by the repository's own config and builder in a child
# process from the tree's root, on the CPU (here only: the steps never set MODEL.DEVICE), with a placeholder
# MultiScaleDeformableAttention module (building the model never calls the extension; the original cannot build it).
_STATE = r"""
import sys, types, torch
sys.modules.setdefault("MultiScaleDeformableAttention", types.ModuleType("MultiScaleDeformableAttention"))
from detectron2.config import get_cfg
from detectron2.modeling import build_model
from detectron2.projects.deeplab import add_deeplab_config
from mask2former import add_maskformer2_config
cfg = get_cfg()
add_deeplab_config(cfg)
add_maskformer2_config(cfg)
cfg.merge_from_file(sys.argv[2])
cfg.merge_from_list(sys.argv[3:])
cfg.MODEL.DEVICE = "cpu"
torch.manual_seed(0)
model = build_model(cfg)
torch.save(model.state_dict(), sys.argv[1])
"""


def prepare(tree: Path) -> None:
    import os
    import shlex
    import subprocess
    import sys

    import numpy as np
    import torch
    from PIL import Image

    d2 = _extract_detectron2(tree)
    _build_extension(d2)
    data = tree / G / "datasets"
    _write_ade20k(data)
    _write_coco(data, [c for c in _literal(d2, "COCO_CATEGORIES") if c["isthing"]])
    demo = tree / G / "demo"
    demo.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(1).integers(0, 256, size=(72, 96, 3), dtype=np.uint8)).save(demo / "input1.jpg")
    (tree / OUT / "demo").mkdir(parents=True, exist_ok=True)

    # `setup.py install` (make.sh) into the tree's own site folder, never the shared environment.
    site, home = tree / SITE, tree / G / "home"
    site.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    (home / ".pydistutils.cfg").write_text(
        "[install]\n"
        f"install_lib={site}\ninstall_scripts={tree / G / 'bin'}\n"
        f"install_data={tree / G / 'data'}\ninstall_headers={tree / G / 'include'}\n")

    local = tree / G / "cpu_state.pth"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONPATH=f"{tree}:{d2}", OMP_NUM_THREADS="1",
               DETECTRON2_DATASETS=str(data))
    subprocess.run([sys.executable, "-c", _STATE, str(local), ADE, *shlex.split(ADE_SMALL)],
                   cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    state = torch.load(local, map_location="cpu")
    local.unlink()
    save_cuda_checkpoint({"model": state, "iteration": 159999}, tree / CKPT)


STEPS = [
    Step("build-ops", "cd mask2former/modeling/pixel_decoder/ops && sh make.sh", timeout=600, env=BUILD_ENV),
    Step("train-net", TRAIN.format(config=ADE) + f" SOLVER.MAX_ITER 2 {ADE_SMALL} OUTPUT_DIR {OUT}/train_net",
         outputs=[f"{OUT}/train_net/model_final.pth", f"{OUT}/train_net/inference/sem_seg_evaluation.pth",
                  f"{OUT}/train_net/metrics.json"], env=ENV, timeout=600),
    Step("eval-only", f"python train_net.py --config-file {ADE} --eval-only {ADE_SMALL} MODEL.WEIGHTS {CKPT} "
                      f"OUTPUT_DIR {OUT}/eval_only",
         outputs=[f"{OUT}/eval_only/inference/sem_seg_evaluation.pth"], env=ENV, timeout=400),
    Step("train-coco-instance", TRAIN.format(config=COCO) + f" SOLVER.MAX_ITER 1 {COCO_SMALL} OUTPUT_DIR {OUT}/coco",
         outputs=[f"{OUT}/coco/model_final.pth", f"{OUT}/coco/inference/coco_instances_results.json"],
         env=ENV, timeout=600),
    Step("demo", f"cd demo && python demo.py --config-file ../{ADE} --input ../{G}/demo/input1.jpg "
                 f"--output ../{OUT}/demo --opts {ADE_SMALL} MODEL.WEIGHTS ../{CKPT}",
         outputs=[f"{OUT}/demo/input1.jpg"], env=ENV, timeout=300),
]
