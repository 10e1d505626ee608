"""baaivision/EVA, its EVA-CLIP project (EVA-CLIP/rei, where the README's commands run: ``cd rei``): the README's
zero-shot ImageNet evaluation and its pre-training command, scaled down by training/params.py's own flags, on a tiny
EVA02-CLIP architecture, a synthetic ImageNet val folder and synthetic image-text webdataset shards.

- ``zeroshot-eval``: "Evaluate EVA-CLIP on IN-1K" (``python -m torch.distributed.launch --nproc_per_node=1 ...
  --use_env training/main.py --imagenet-val DATA --model MODEL --pretrained CKPT --force-custom-clip
  --enable_deepspeed``), on a checkpoint written as a CUDA machine's ``torch.save`` would (``save_cuda_checkpoint``).
  The README spells the last flag ``--enable_deepspeed``, which params.py does not define (it defines
  ``--enable-deepspeed``, the training commands' spelling): argparse exits 2 on it on any device, so the step uses
  the defined spelling.
- ``pretrain``: "Pre-train EVA02_CLIP_B_psz16_s8B on Merged-2B" (the smallest EVA02-CLIP model the README trains):
  its launcher with ``--nproc_per_node=2`` (one node), its flags (``--dataset-resampled --train-data-list
  "A;B" --dataset-type-list "webdataset;webdataset"``, zero-shot every epoch, lamb, ZeRO-1, grad checkpointing,
  local loss with gather, DeepSpeed, default ``--precision amp``), scaled down: 8 samples, batch 2, 1 epoch,
  1 worker, warmup 1. Logs and checkpoints go to params.py's default ``--logs ./logs/`` (``--logs`` cannot pass
  torch 2.13's torch.distributed.launch, whose parser calls it an ambiguous prefix of ``--logs-specs``). Left out:
  ``--report-to "wandb, tensorboard"`` (a wandb account and network) and the four ``--pretrained-*`` flags (the
  towers start from the tiny random init; the repository loads such checkpoints with ``map_location='cpu'``, and the
  evaluation step loads a CUDA-tagged one).

The zero-shot classifier's 1000 class names x 80 templates are cut to 10 x 4 by the sitecustomize (below): the
tokenizer alone took 4 minutes for them on the shared CPU, and params.py has no flag to shrink the list.

The model: ``EVA02-CLIP-B-16.json`` scaled down (widths 32, 2 layers, 32 px images), with every switch the real
config has (``xattn``, ``fusedLN``, ``rope``, ``intp_freq``, ``naiveswiglu``, ``subln``), written by prepare() as
``eva_clip/model_configs/EVA02-CLIP-Ti-16.json``, where factory.py reads its configs.

The steps put a ``sitecustomize`` on PYTHONPATH that provides ``torch._six`` (removed in torch 2.0; training/train.py
imports ``inf`` from it): that fails the original on every device and selects nothing about the device.
The README's environment (torch 1.12.1+cu116, deepspeed 0.6.5) is replaced by torch 2.13 and deepspeed 0.19.5 (the
first that installs beside it); xformers and apex are not installed (xformers is CUDA-only; apex is an optional
import with a LayerNorm fallback).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
REI = "EVA-CLIP/rei"
UP = "../../" + G  # the recipe's folder, from rei/ (the README's working directory)
SITE = f"{G}/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
MODEL = "EVA02-CLIP-Ti-16"

# EVA02-CLIP-B-16.json, scaled down; every feature switch kept.
TINY = {
    "embed_dim": 32,
    "vision_cfg": {
        "image_size": 32, "layers": 2, "width": 32, "head_width": 16, "patch_size": 16, "mlp_ratio": 2.6667,
        "eva_model_name": "eva-clip-ti-16-X", "drop_path_rate": 0.0, "xattn": True, "fusedLN": True, "rope": True,
        "pt_hw_seq_len": 16, "intp_freq": True, "naiveswiglu": True, "subln": True,
    },
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2, "xattn": True,
                 "fusedLN": True},
}

SITECUSTOMIZE = '''\
# gauntlet: torch._six, which torch 2.0 removed (training/train.py imports inf from it); nothing here picks a device.
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


# gauntlet: the zero-shot classifier encodes 1000 ImageNet class names x 80 templates (4 minutes on a shared CPU for
# the tiny model, mostly the BPE tokenizer); params.py has no flag to shrink it. The lists are cut to their first 10
# names and 4 templates when training/imagenet_zeroshot_data.py is imported: data only, no device is chosen here.
class _FewClasses(importlib.abc.MetaPathFinder):
    NAME = "training.imagenet_zeroshot_data"

    def find_spec(self, name, path=None, target=None):
        if name != self.NAME:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.imagenet_classnames = module.imagenet_classnames[:10]
            module.openai_imagenet_template = module.openai_imagenet_template[:4]

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _FewClasses())
'''

LAUNCH = "python -m torch.distributed.launch --nnodes=1 --node_rank=0 --master_addr=127.0.0.1 --use_env"

EVAL = (f"cd {REI} && {LAUNCH} --nproc_per_node=1 --master_port=29671 training/main.py "
        f"--imagenet-val {UP}/imagenet/val --model {MODEL} --pretrained {UP}/EVA02_CLIP_Ti_psz16.pt "
        f"--force-custom-clip --enable-deepspeed "
        f"--batch-size 2 --workers 1 --name zeroshot")

TRAIN_DATA = f"{UP}/laion/{{000000..000001}}.tar;{UP}/coyo/{{000000..000001}}.tar"
PRETRAIN = (f"cd {REI} && {LAUNCH} --nproc_per_node=2 --master_port=29672 training/main.py "
            "--save-frequency 1 --zeroshot-frequency 1 --train-num-samples 8 --dataset-resampled "
            f'--train-data-list="{TRAIN_DATA}" --dataset-type-list="webdataset;webdataset" '
            f"--imagenet-val={UP}/imagenet/val --warmup 1 --batch-size=2 --epochs=1 --lr=5e-4 --visual-lr=2e-4 "
            "--text-lr=2e-5 --wd=0.05 --visual-wd=0.05 --text-wd=0.05 --ld=1.0 --visual-ld=0.75 --text-ld=0.75 "
            f"--grad-clip-norm=5.0 --smoothing=0. --workers=1 --model={MODEL} "
            "--skip-list head.weight head.bias lm_head.weight lm_head.bias mask_token text_projection logit_scale "
            "--seed 4096 --gather-with-grad --grad-checkpointing --local-loss --force-custom-clip "
            '--force-patch-dropout=0 --optimizer="lamb" --zero-stage=1 --enable-deepspeed '
            "--name pretrain")


def _shards(folder: Path, count: int, per_shard: int, seed: int) -> None:
    """webdataset tars of (key.jpg, key.txt) pairs, as img2dataset writes LAION/COYO shards."""
    import io
    import tarfile

    import numpy as np
    from PIL import Image

    from _recipe import synthetic_text

    rng = np.random.default_rng(seed)
    captions = synthetic_text(words=400, seed=seed).splitlines()
    folder.mkdir(parents=True, exist_ok=True)
    for s in range(count):
        with tarfile.open(folder / f"{s:06d}.tar", "w") as tar:
            for i in range(per_shard):
                key = f"{s:06d}{i:04d}"
                buffer = io.BytesIO()
                Image.fromarray(rng.integers(0, 256, size=(40, 40, 3), dtype=np.uint8)).save(buffer, format="JPEG")
                caption = captions[(s * per_shard + i) % len(captions)].encode()
                for suffix, payload in (("jpg", buffer.getvalue()), ("txt", caption)):
                    info = tarfile.TarInfo(f"{key}.{suffix}")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))


def prepare(tree: Path) -> None:
    import json
    import sys

    import torch

    from _recipe import write_images

    work = tree / G
    (work / "site").mkdir(parents=True, exist_ok=True)
    (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)

    rei = tree / REI
    (rei / "eva_clip" / "model_configs" / f"{MODEL}.json").write_text(json.dumps(TINY, indent=4))

    # ImageNet val in class folders (ILSVRC synset names), as extract_ILSVRC.sh lays it out.
    write_images(work / "imagenet" / "val", count=2, size=40, classes=("n01440764", "n01443537"), suffix=".JPEG")
    _shards(work / "laion", count=2, per_shard=4, seed=1)
    _shards(work / "coyo", count=2, per_shard=4, seed=2)

    # The released checkpoints are state dicts saved from CUDA training; this one is the tiny model's, tagged cuda:0.
    sys.path.insert(0, str(rei))
    try:
        from eva_clip import create_model

        torch.manual_seed(0)
        model = create_model(MODEL, force_custom_clip=True)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        save_cuda_checkpoint(state, work / "EVA02_CLIP_Ti_psz16.pt")
    finally:
        sys.path.remove(str(rei))


STEPS = [
    Step("zeroshot-eval", EVAL, outputs=[f"{REI}/logs/zeroshot-*/checkpoints/results.jsonl"], env=ENV, timeout=600),
    Step("pretrain", PRETRAIN, outputs=[f"{REI}/logs/pretrain-*/checkpoints/epoch_1/mp_rank_00_model_states.pt",
                                        f"{REI}/logs/pretrain-*/checkpoints/results.jsonl"], env=ENV, timeout=900),
]
