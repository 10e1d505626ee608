"""salesforce/LAVIS: the README's ``train.py`` / ``evaluate.py`` commands (run_scripts/blip/...), tiny.

- ``train-caption``: ``python -m torch.distributed.run --nproc_per_node=2 train.py --cfg-path
  lavis/projects/blip/train/caption_coco_ft.yaml`` (run_scripts/blip/train/train_caption_coco.sh, 8 -> 2
  processes): BLIP captioning fine-tuned from a pretrained checkpoint (``model.pretrained``, written by prepare() as
  a CUDA machine's torch.save would), one epoch on 4 synthetic COCO-Karpathy images. Scaled down by the config's own
  keys through the script's own ``--options``: images 32 px (the ViT is always ViT-B/16, so 4 patches), a 2-layer
  BERT (``model.med_config_path``), batch 2, no workers. At this commit the captioning task's evaluation is broken
  on every device (CaptionTask.valid_step passes ``length_penalty`` to BlipCaption.generate, which has no such
  argument) and BLIP retrieval's training too (BaseDataset.collater returns the int image ids as a list, and
  BlipRetrieval.forward calls ``idx.view``): so the fine-tune runs under the config's pretraining task
  (``run.task=image_text_pretrain``, whose evaluation does nothing) with no validation split; the runner saves
  checkpoint_0.pth (save_freq, save_last).
- ``resume-caption``: the same for a second epoch with ``run.resume_ckpt_path`` on the first run's checkpoint,
  re-saved as a CUDA machine writes it (the runner's ``torch.load(..., map_location=self.device)``).
- ``evaluate-retrieval``: ``python -m torch.distributed.run --nproc_per_node=2 evaluate.py --cfg-path
  lavis/projects/blip/eval/ret_coco_eval.yaml`` (run_scripts/blip/eval/eval_ret_coco.sh): BLIP image-text retrieval
  on a fine-tuned checkpoint (``model.finetuned``, CUDA-tagged): ITC similarities, ITM re-ranking of the top
  k_test=2 split across the ranks and all-reduced, recall on the val and test splits (evaluate.txt).

The environment (prepare(), once): lavis imports every model, processor and dataset builder at ``import lavis``,
among them torchaudio (BEATs audio) and open3d (ULIP point clouds). torchaudio has no build for torch 2.13: prepare()
installs torchaudio 2.11.0 with pip's ``--no-deps`` and removes its C++ libraries (built for torch 2.11; torchaudio
then runs its Python parts, as a build without the extension does). open3d 0.13.0 (requirements.txt) has no wheel for
Python 3.11 and a newer one is 400 MB: a stand-in ``open3d`` module that raises on use (no step reads a point cloud).

Not from the network: ``BertTokenizer.from_pretrained("bert-base-uncased")`` finds a tiny word-level BERT vocabulary
in a Hugging Face cache under ``_gauntlet/hf`` (HF_HUB_OFFLINE=1); the annotations' storage paths point at
synthetic Karpathy-format JSON (annotations exist, so the builder's download_url skips them).
"""

from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"HF_HOME": "{tree}/" + G + "/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}
LAUNCH = "python -m torch.distributed.run --nproc_per_node=2 --master_port={port}"
SIZE = 32
WORDS = ("a picture of the man woman dog cat sits stands on in with red blue green small large table street "
         "grass room car bus plate food two people and is near white black").split()


def _data(dataset: str, train: bool = True) -> str:
    root = f"datasets.{dataset}"
    parts = [f"{root}.build_info.annotations.{split}.storage=$PWD/{G}/coco/annotations/coco_karpathy_{split}.json"
             for split in ("train", "val", "test")]
    parts.append(f"{root}.build_info.images.storage=$PWD/{G}/coco/images/")
    if train:
        parts.append(f"{root}.vis_processor.train.image_size={SIZE}")
    parts.append(f"{root}.vis_processor.eval.image_size={SIZE}")
    return " ".join(parts)


MODEL = f"model.image_size={SIZE} model.med_config_path=$PWD/{G}/med_config.json"
RUN = "run.batch_size_train=2 run.batch_size_eval=2 run.num_workers=0"
CAPTION = (f"{MODEL} model.pretrained=$PWD/{G}/ckpt/model_base_capfilt_large.pth {_data('coco_caption')} {RUN} "
           "run.max_len=8 run.min_len=2 run.num_beams=2 run.report_metric=False run.test_splits=[]")
CAPTION_CFG = "lavis/projects/blip/train/caption_coco_ft.yaml"

RETAG = '''\
"""Re-save a checkpoint as a CUDA machine writes it (every storage tagged cuda:0)."""
import glob
import sys

import torch
from torch import serialization

source = sorted(glob.glob(sys.argv[1]))[-1]
obj = torch.load(source, map_location="cpu", weights_only=False)
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
torch.save(obj, sys.argv[2])
'''


OPEN3D_STUB = '''"""Stand-in for open3d (the gauntlet's): lavis imports it at import time (ULIP's point-cloud reader)."""


def __getattr__(name):
    raise ImportError(f"open3d.{name}: open3d is a stand-in in this environment")
'''


def _environment() -> None:
    """torchaudio without its C++ libraries, and the open3d stand-in, in this environment's site-packages."""
    import importlib.util
    import subprocess
    import sys
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    if importlib.util.find_spec("torchaudio") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "torchaudio==2.11.0"], check=True)
    for library in (site / "torchaudio" / "lib").glob("*.so"):
        library.unlink()
    stub = site / "open3d" / "__init__.py"
    if not stub.is_file():
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(OPEN3D_STUB)


def _tokenizer_files(folder: Path) -> None:
    from transformers import BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", *[f"[unused{i}]" for i in range(4)], "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ",", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(vocab_file=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(str(folder))


def prepare(tree: Path) -> None:
    import json
    import os
    import random
    import subprocess
    import sys

    import numpy as np
    from PIL import Image

    _environment()
    work = tree / G
    work.mkdir(parents=True, exist_ok=True)
    (work / "retag.py").write_text(RETAG)

    # the tokenizer BlipBase.init_tokenizer loads ("bert-base-uncased"), tiny
    fake_hub_model(work / "hf", "bert-base-uncased", _tokenizer_files)

    # synthetic COCO Karpathy split: 4 train images (one caption each), 4 val and 4 test (two captions each: compute_sim_matrix splits the images across the 2 ranks as N // 2 + 1, so rank 1 needs N >= 3)
    rng = np.random.default_rng(0)
    r = random.Random(0)
    images = work / "coco" / "images" / "val2014"
    images.mkdir(parents=True, exist_ok=True)

    def caption() -> str:
        return " ".join(r.choice(WORDS) for _ in range(6))

    def image(i: int) -> str:
        name = f"COCO_val2014_{i:012d}.jpg"
        Image.fromarray(rng.integers(0, 256, size=(48, 48, 3), dtype=np.uint8)).save(images / name)
        return f"val2014/{name}"

    annotations = work / "coco" / "annotations"
    annotations.mkdir(parents=True, exist_ok=True)
    train = [{"image": image(i), "caption": caption(), "image_id": f"coco_{i}"} for i in range(1, 5)]
    val = [{"image": image(i), "caption": [caption(), caption()]} for i in range(11, 15)]
    test = [{"image": image(i), "caption": [caption(), caption()]} for i in range(21, 25)]
    for split, data in (("train", train), ("val", val), ("test", test)):
        (annotations / f"coco_karpathy_{split}.json").write_text(json.dumps(data))

    # the BERT of the text encoder / decoder (configs/models/med_config.json), 2 layers of width 32; the
    # cross-attention keeps encoder_width 768 (ViT-B). vocab_size: the tokenizer with [DEC] and [ENC] added.
    med = json.loads((tree / "lavis" / "configs" / "models" / "med_config.json").read_text())
    from transformers import BertTokenizer

    tokenizer = BertTokenizer.from_pretrained(str(next((work / "hf").glob("hub/*/snapshots/*"))))
    med.update(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=2,
               vocab_size=len(tokenizer) + 2, max_position_embeddings=64)
    (work / "med_config.json").write_text(json.dumps(med, indent=2))

    # checkpoints as a CUDA machine writes them, from the repository's own model classes, built in a child process
    # (this module is itself named ``lavis``): the BLIP pretrained checkpoint ({"model": ...}) for the caption and
    # retrieval fine-tunes, and a fine-tuned captioner for evaluate.py
    env = dict(os.environ, HF_HOME=str(work / "hf"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    local = work / "ckpt" / "cpu"
    local.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", _CHECKPOINTS, str(local), str(work / "med_config.json")], cwd=tree, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    import torch

    for name in ("blip_coco_caption_base.pth", "model_base_capfilt_large.pth"):
        save_cuda_checkpoint(torch.load(local / name, map_location="cpu"), work / "ckpt" / name)
        (local / name).unlink()


_CHECKPOINTS = r"""
import sys
import torch
from omegaconf import OmegaConf
sys.path.insert(0, ".")
from lavis.common.registry import registry
import lavis.models  # registers the models

out, med = sys.argv[1], sys.argv[2]
base = {"image_size": %d, "med_config_path": med, "load_finetuned": False, "load_pretrained": False,
        "vit_type": "base", "prompt": "a picture of ", "queue_size": 8, "embed_dim": 256}
torch.manual_seed(0)
caption = registry.get_model_class("blip_caption").from_config(OmegaConf.create(base)).state_dict()
torch.save({"model": caption}, out + "/blip_coco_caption_base.pth")
torch.manual_seed(1)
retrieval = registry.get_model_class("blip_retrieval").from_config(OmegaConf.create(base)).state_dict()
# BLIP's pretrained checkpoint holds the encoders and the decoder: the retrieval model's weights (no queues) and
# the captioner's text decoder
pretrained = {k: v for k, v in retrieval.items() if not k.endswith("queue") and k != "queue_ptr"}
pretrained.update({k: v for k, v in caption.items() if k.startswith("text_decoder.")})
torch.save({"model": pretrained}, out + "/model_base_capfilt_large.pth")
""" % SIZE


RETRIEVAL_CFG = "lavis/projects/blip/train/retrieval_coco_ft.yaml"
RETRIEVAL = f"{MODEL} {_data('coco_retrieval', train=False)} {RUN} run.k_test=2"
# the caption fine-tune under the pretraining task (no evaluation): CaptionTask's evaluation is broken at this commit
TRAIN = f"{CAPTION} run.task=image_text_pretrain run.valid_splits=[]"

STEPS = [
    Step("train-caption",
         f"{LAUNCH.format(port=29611)} train.py --cfg-path {CAPTION_CFG} --options {TRAIN} run.max_epoch=1 "
         f"run.output_dir=$PWD/{G}/out/caption",
         outputs=[f"{G}/out/caption/*/checkpoint_0.pth", f"{G}/out/caption/*/log.txt"], timeout=900, env=ENV),
    Step("resume-caption",
         f"python {G}/retag.py '{G}/out/caption/*/checkpoint_0.pth' {G}/ckpt/caption_resume.pth && "
         f"{LAUNCH.format(port=29612)} train.py --cfg-path {CAPTION_CFG} --options {TRAIN} run.max_epoch=2 "
         f"run.resume_ckpt_path=$PWD/{G}/ckpt/caption_resume.pth run.output_dir=$PWD/{G}/out/caption-resume",
         outputs=[f"{G}/out/caption-resume/*/checkpoint_1.pth"], timeout=900, env=ENV),
    Step("evaluate-retrieval",
         f"{LAUNCH.format(port=29616)} evaluate.py --cfg-path lavis/projects/blip/eval/ret_coco_eval.yaml "
         f"--options {RETRIEVAL} model.finetuned=$PWD/{G}/ckpt/model_base_capfilt_large.pth "
         f"run.output_dir=$PWD/{G}/out/retrieval-eval",
         outputs=[f"{G}/out/retrieval-eval/*/evaluate.txt"], timeout=900, env=ENV),
]
