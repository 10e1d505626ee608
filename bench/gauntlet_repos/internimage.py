"""OpenGVLab/InternImage: classification/README.md's commands, tiny, run from classification/ as the README does.

- ``build-ops``: "Compile CUDA operators" (``cd ./ops_dcnv3 && sh ./make.sh``: ``python setup.py build install``).
  So that it cannot write into the recipe's shared environment, the step's ``HOME`` holds a ``.pydistutils.cfg``
  that sends ``install`` to ``_gauntlet/site`` (what a user's site-packages is); every later step has that folder
  on ``PYTHONPATH``. The classification code imports the built ``DCNv3`` module (and reads its distribution's
  version through pkg_resources) at import, whichever CORE_OP the config picks.
- ``ops-test``: the README's unit test (``python test.py``, "should see all checking is True") scaled down: its
  own forward checks (double, float) and its backward checks at its first two channel counts (1, 16), double and
  float. test.py has no flag; its full list runs 1025 channels and check_time_cost (512x64x64 inputs, 100 repeats
  at three im2col steps), a GPU benchmark. The step fails if any check prints False.
- ``train``: "Training from Scratch on ImageNet-1K" (``python -m torch.distributed.launch --nproc_per_node <n>
  --master_port 12345 main.py --cfg <config> --data-path <imagenet> [--batch-size --output --tag]``) with the
  launcher itself (it passes --local-rank, which main.py requires), 1 process, InternImage-T's config
  (configs/internimage_t_1k_224.yaml: CORE_OP DCNv3, EMA on, IMG_ON_MEMORY) scaled down by main.py's ``--opts``
  (64 px, channels 16, one block a level, groups 1/2/4/8, one epoch without warm-up, one loader worker), with the
  defaults (native AMP --amp-opt-level O1, Mixup/CutMix, AdamW, cosine, clip 5.0, fp16_compress_hook), then
  validation of the model and of its EMA: ckpt_epoch_0.pth.
- ``eval``: "Evaluation" (``python -m torch.distributed.launch --nproc_per_node 1 --master_port 12345 main.py
  --eval --cfg <config> --resume <checkpoint> --data-path <imagenet>``) on a released-style checkpoint
  ({'model': state_dict}) written as a CUDA machine writes it (every storage tagged cuda:0).
- ``resume``: the train step's checkpoint re-saved as on CUDA (storages cuda:0; its 'amp' entry the state a CUDA
  GradScaler writes after one step) in a fresh output folder; main.py's auto-resume (TRAIN.AUTO_RESUME, the
  default) finds it, loads model/optimizer/scheduler/scaler/EMA and trains epoch 1: ckpt_epoch_1.pth.
- ``train-2proc``: the training command with ``--nproc_per_node 2`` (DDP on the default nccl backend).
- ``extract-feature``: "Extracting Intermediate Features" (``python extract_feature.py --cfg <config> --img b.png
  --keys patch_embed levels.0.downsample --save --resume internimage_t_1k_224.pth``) on the CUDA-written
  checkpoint; extract_feature.py takes no --opts, so its --cfg is a config in the repository's own format under
  _gauntlet (BASE: internimage_t_1k_224.yaml, with the same scaled-down keys as the other steps).

Not CUDA, identical on the original and the port:
- mmcv: the README installs mmcv-full 1.5.0 (mim); the classification code only uses its pure-Python part
  (mmcv.fileio.FileClient, mmcv.imfrombytes, mmcv.load in dataset/cached_image_folder.py). Every mmcv 1.x on PyPI is
  an sdist whose setup.py imports pkg_resources, which the isolated build environment pip makes (setuptools >= 81)
  no longer has, so it cannot be a requirement: prepare builds mmcv 1.5.0 (no ops) once with the environment's own
  setuptools (``pip wheel --no-deps --no-build-isolation``), caches the wheel, and unpacks it into _gauntlet/site.
- the training list: ImageCephDataset reads ``meta_data/train.txt`` (before meta_data/train.txt.zip, the full
  ImageNet list the repository ships, with IMG_ON_MEMORY loading all of it); prepare writes a train.txt in the
  same format ("<class>/<file> <label>") for the synthetic images.
- ``LOCAL_SIZE=2`` in the 2-process step: with IMG_ON_MEMORY the dataset and NodeDistributedSampler split the list
  into LOCAL_SIZE parts by LOCAL_RANK; main.py sets LOCAL_SIZE only on its SLURM path (train_in1k.sh, the way the
  authors launch), and without it rank 1 gets no samples (an assert in load_onto_memory_v2).
- ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` where main.py loads a checkpoint it wrote: it pickles its yacs config in
  ('config'), which torch >= 2.6's weights-only default refuses on every device.
- ``--master_port`` per step (other jobs share the machine).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

G = "_gauntlet"
C = "classification"  # every command runs from here, as the README's do (meta_data/ is read relative to it)
DATA = f"../{G}/imagenet"
SITE = f"{G}/site"
OUT = f"../{G}/output"
NAME = "internimage_t_1k_224"  # the yaml's name: main.py's output folder is <output>/<name>
CFG = f"configs/{NAME}.yaml"
CLASSES = ("n01440764", "n01443537")
ENV = {"PYTHONPATH": "{tree}/" + SITE, "OMP_NUM_THREADS": "1"}
PICKLE = {**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
BUILD_ENV = {"HOME": "{tree}/" + G + "/home"}

# InternImage-T scaled down by main.py's --opts (KEY VALUE pairs, yacs): 64 px (stem /4 -> 16, then 8, 4, 2),
# channels 16 (16/32/64/128 by level), one block a level, 16 channels a DCNv3 group.
MODEL_OPTS = [("DATA.IMG_SIZE", "64"), ("MODEL.INTERN_IMAGE.CHANNELS", "16"),
              ("MODEL.INTERN_IMAGE.DEPTHS", "[1,1,1,1]"), ("MODEL.INTERN_IMAGE.GROUPS", "[1,2,4,8]")]
RUN_OPTS = [("DATA.NUM_WORKERS", "1"), ("PRINT_FREQ", "1"), ("TRAIN.WARMUP_EPOCHS", "0")]


def opts(epochs: int = 1) -> str:
    pairs = MODEL_OPTS + RUN_OPTS + [("TRAIN.EPOCHS", str(epochs))]
    return "--opts " + " ".join(f"{k} '{v}'" for k, v in pairs)


def launch(nproc: int, port: int) -> str:
    return f"cd {C} && python -m torch.distributed.launch --nproc_per_node {nproc} --master_port {port} main.py"


OPS_TEST = ("import test; test.check_forward_equal_with_pytorch_double(); test.check_forward_equal_with_pytorch_float(); "
            "[test.check_backward_equal_with_pytorch_double(c, True, True, True) for c in (1, 16)]; "
            "[test.check_backward_equal_with_pytorch_float(c, True, True, True) for c in (1, 16)]")

# Writes a released-style checkpoint ({'model': state_dict}) of the scaled-down model with the repository's own
# get_config/build_model, in a child process run from classification/. Building the model never calls the
# extension, which the original cannot build here: a placeholder DCNv3 module and distribution version stand in.
_CHECKPOINT = r"""
import argparse, sys, types, torch
sys.path.insert(0, ".")
sys.modules.setdefault("DCNv3", types.ModuleType("DCNv3"))
import pkg_resources
_get = pkg_resources.get_distribution
pkg_resources.get_distribution = lambda name: types.SimpleNamespace(version="1.1") if name == "DCNv3" else _get(name)
from config import get_config
from models import build_model
config = get_config(argparse.Namespace(cfg=sys.argv[2], opts=sys.argv[3:]))
torch.manual_seed(0)
model = build_model(config)
torch.save({"model": model.state_dict()}, sys.argv[1])
"""

# The train step's checkpoint as a CUDA machine writes it: storages tagged cuda:0, and the GradScaler state a
# CUDA run's torch.cuda.amp.GradScaler() has after its first steps (a CPU-only run may write none).
AS_CUDA = '''\
import sys

import torch
from torch import serialization

source, target = sys.argv[1], sys.argv[2]
obj = torch.load(source, map_location="cpu", weights_only=False)
obj["amp"] = {"scale": 32768.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
              "_growth_tracker": 3}
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
torch.save(obj, target)
'''

TINY_YAML = """\
BASE: ['../../classification/configs/internimage_t_1k_224.yaml']
DATA:
  IMG_SIZE: 64
MODEL:
  INTERN_IMAGE:
    CHANNELS: 16
    DEPTHS: [1, 1, 1, 1]
    GROUPS: [1, 2, 4, 8]
"""


_WHEELS = Path.home() / ".cache" / "porter-gauntlet" / "internimage-wheels"


def _mmcv_into(site: Path) -> None:
    import subprocess
    import sys
    import zipfile

    wheels = sorted(_WHEELS.glob("mmcv-1.5.0-*.whl")) if _WHEELS.is_dir() else []
    if not wheels:
        _WHEELS.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "mmcv==1.5.0", "-w", str(_WHEELS)], check=True)
        wheels = sorted(_WHEELS.glob("mmcv-1.5.0-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(site)


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import torch

    # ImageNet-1K's folder layout (train/ and val/ class folders), 2 classes: 4 train and 2 val images each.
    train = write_images(tree / G / "imagenet" / "train", count=4, size=72, classes=CLASSES, suffix=".JPEG", seed=0)
    write_images(tree / G / "imagenet" / "val", count=2, size=72, classes=CLASSES, suffix=".JPEG", seed=1)
    # meta_data/train.txt in the format of the shipped meta_data/train.txt.zip, for these images.
    lines = [f"{p.parent.name}/{p.name} {CLASSES.index(p.parent.name)}" for p in sorted(train)]
    (tree / C / "meta_data" / "train.txt").write_text("\n".join(lines) + "\n")

    # `setup.py install` (make.sh) into the tree's own site folder, never the shared environment.
    site, home = tree / SITE, tree / G / "home"
    site.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    _mmcv_into(site)
    (home / ".pydistutils.cfg").write_text(
        "[install]\n"
        f"install_lib={site}\ninstall_scripts={tree / G / 'bin'}\n"
        f"install_data={tree / G / 'data'}\ninstall_headers={tree / G / 'include'}\n")

    (tree / G / "configs").mkdir(parents=True, exist_ok=True)
    (tree / G / "configs" / "internimage_tiny.yaml").write_text(TINY_YAML)
    (tree / G / "as_cuda.py").write_text(AS_CUDA)
    (tree / G / "b.png").write_bytes(next((tree / G / "imagenet" / "val" / CLASSES[0]).glob("*.JPEG")).read_bytes())

    local = tree / G / "cpu_checkpoint.pth"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    model_opts = [x for kv in MODEL_OPTS for x in kv]
    subprocess.run([sys.executable, "-c", _CHECKPOINT, str(local), CFG, *model_opts], cwd=tree / C, env=env,
                   check=True)
    save_cuda_checkpoint(torch.load(local, map_location="cpu"), tree / G / "cuda" / f"{NAME}.pth")
    local.unlink()


TRAIN_CKPT = f"{G}/output/{NAME}/ckpt_epoch_0.pth"
CUDA_CKPT = f"../{G}/cuda/{NAME}.pth"
MAIN = f"--cfg {CFG} --data-path {DATA} --batch-size 2"

STEPS = [
    Step("build-ops", f"cd {C}/ops_dcnv3 && sh ./make.sh", timeout=600, env=BUILD_ENV),
    Step("ops-test", f'set -o pipefail; cd {C}/ops_dcnv3 && python -c "{OPS_TEST}" | tee ../../{G}/ops_test.txt'
         f" && ! grep -q False ../../{G}/ops_test.txt",
         outputs=[f"{G}/ops_test.txt"], timeout=300, env=ENV),
    Step("train", f"set -o pipefail; {launch(1, 29831)} {MAIN} --output {OUT} {opts()} 2>&1 | tee ../{G}/train.log"
         f" && grep -q 'Accuracy of the ema network' ../{G}/train.log",
         outputs=[TRAIN_CKPT, f"{G}/output/{NAME}/config.json"], timeout=600, env=ENV),
    Step("eval", f"set -o pipefail; {launch(1, 29832)} --eval --cfg {CFG} --resume {CUDA_CKPT} --data-path {DATA} "
         f"--batch-size 2 --output ../{G}/eval {opts()} 2>&1 | tee ../{G}/eval.log && grep -q ' \\* Acc@1' ../{G}/eval.log",
         outputs=[f"{G}/eval.log"], timeout=300, env=PICKLE),
    Step("resume", f"mkdir -p {G}/resume/{NAME} && python {G}/as_cuda.py {TRAIN_CKPT} "
         f"{G}/resume/{NAME}/ckpt_epoch_0.pth && set -o pipefail && {launch(1, 29833)} {MAIN} "
         f"--output ../{G}/resume {opts(epochs=2)} 2>&1 | tee ../{G}/resume.log "
         f"&& grep -q 'auto resuming from' ../{G}/resume.log && grep -q 'loaded successfully' ../{G}/resume.log",
         outputs=[f"{G}/resume/{NAME}/ckpt_epoch_1.pth"], timeout=600, env=PICKLE),
    Step("train-2proc", f"{launch(2, 29834)} {MAIN} --output ../{G}/ddp {opts()}",
         outputs=[f"{G}/ddp/{NAME}/ckpt_epoch_0.pth", f"{G}/ddp/{NAME}/log_rank1.txt"], timeout=600,
         env={**ENV, "LOCAL_SIZE": "2"}),
    Step("extract-feature", f"cd {C} && python extract_feature.py --cfg ../{G}/configs/internimage_tiny.yaml "
         f"--img ../{G}/b.png --keys patch_embed levels.0.downsample --save --resume {CUDA_CKPT}",
         outputs=[f"{G}/b..pth"], timeout=300, env=ENV),
]
