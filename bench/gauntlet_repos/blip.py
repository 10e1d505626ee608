"""salesforce/BLIP: the README's fine-tuning and evaluation commands, as 2-process launches
(``python -m torch.distributed.run --nproc_per_node=N train_*.py [--evaluate] --config ...``), tiny.

- ``caption-train``: the README's "Image-Text Captioning" finetune (``train_caption.py``, configs/caption_coco.yaml
  with 'pretrained' set to a local checkpoint), one epoch on 8 synthetic COCO-Karpathy images, then its own caption
  generation (beam search) on the val and test splits and the COCO caption evaluation; checkpoint_best.pth.
- ``caption-evaluate``: the README's ``train_caption.py --evaluate`` on a "finetuned" captioning checkpoint.
- ``retrieval-train``: the README's "Image-Text Retrieval" finetune (``train_retrieval.py --config
  ./configs/retrieval_coco.yaml``): ITC with momentum encoders and queues, ITM with hard negatives gathered from all
  ranks (negative_all_rank True, as the config), the ViT under fairscale's checkpoint_wrapper (vit_grad_ckpt True, as
  the config), then the distributed retrieval evaluation; checkpoint_best.pth.
- ``retrieval-evaluate``: ``train_retrieval.py --evaluate`` on the retrieval-train step's checkpoint_best.pth.

Scaled down by the repository's own configs: prepare() writes copies of configs/caption_coco.yaml and
configs/retrieval_coco.yaml with only the values changed (paths, batch sizes, image_size 32, queue_size 8, k_test 2,
max_epoch 1, beams and lengths), and a tiny configs/med_config.json (BERT with 2 layers of width 32: the path is fixed
in the model classes). The ViT has no size flag ('base' or 'large', 86M/300M parameters): the steps' sitecustomize
adds a third value, vit: 'tiny' (the repository's own VisionTransformer, width 32, depth 2, patch 16), to
models.blip.create_vit, which the configs select. Nothing there picks a device.

Not from the network: the pretrained checkpoints ({'model': state_dict}, storages tagged cuda:0 as a GPU box writes
them; load_checkpoint loads them with map_location='cpu') are built by prepare() from the repository's own model
classes; BertTokenizer.from_pretrained('bert-base-uncased') finds a tiny WordPiece vocabulary in an offline
Hugging Face cache; the annotation JSONs are laid where torchvision's download_url finds them (it downloads nothing
when the file exists).

Also in the steps' sitecustomize folder, neither about the device:
- ``ruamel_yaml``: the scripts ``import ruamel_yaml as yaml`` (conda's name of ruamel.yaml; PyPI's
  ruamel-yaml-conda needs Cython to build): the module is ruamel.yaml 0.17 (whose load(Loader=) still exists).
- ``pycocoevalcap``: a stand-in COCOEvalCap (BLEU-1..4 with add-one smoothing, ROUGE-L, a CIDEr-like consensus
  score, pure Python): the real one runs Java tools and SPICE downloads Stanford CoreNLP models at first use.

Step time limits are 1200 s: on the 2-core machine the steps took 64-85 s on the port, but 363-572 s under
PORTER_EMULATE=mps, whose spawn start method re-imports transformers/timm in every DataLoader worker (num_workers is
4 per loader, fixed in the scripts); the first contact ran with 600 s.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
SITE = f"{G}/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "HF_HOME": "{tree}/" + G + "/hf", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
LAUNCH = "python -m torch.distributed.run --nproc_per_node=2 --master_port=$((20000 + RANDOM % 20000))"

WORDS = ("a picture of the cat dog man woman bird sitting standing on in with next to and red blue green small "
         "large table sofa street car tree park grass water").split()

SITECUSTOMIZE = '''\
# gauntlet (blip): vit 'tiny' for models.blip.create_vit (the repository's VisionTransformer, width 32, depth 2);
# nothing here picks a device.
import importlib.abc
import importlib.machinery
import sys


def _patch(module):
    original = module.create_vit

    def create_vit(vit, image_size, use_grad_checkpointing=False, ckpt_layer=0, drop_path_rate=0):
        if vit != "tiny":
            return original(vit, image_size, use_grad_checkpointing, ckpt_layer, drop_path_rate)
        from models.vit import VisionTransformer
        return VisionTransformer(img_size=image_size, patch_size=16, embed_dim=32, depth=2, num_heads=2,
                                 use_grad_checkpointing=use_grad_checkpointing, ckpt_layer=ckpt_layer,
                                 drop_path_rate=drop_path_rate), 32

    module.create_vit = create_vit


class _TinyVit(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "models.blip":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _TinyVit())
'''

RUAMEL_YAML = '''\
# gauntlet (blip): conda's ruamel_yaml is PyPI's ruamel.yaml under another name.
import sys

import ruamel.yaml

sys.modules[__name__] = ruamel.yaml
'''

COCOEVALCAP = '''\
"""gauntlet (blip): a stand-in for pycocoevalcap's COCOEvalCap, pure Python (the real one runs Java tools and
downloads Stanford CoreNLP models for SPICE): BLEU-1..4 (add-one smoothing), ROUGE-L and a CIDEr-like score."""
import math
import re
from collections import Counter


def _tokens(text):
    return re.sub(r"[^a-z0-9 ]", " ", text.lower()).split()


def _ngrams(words, n):
    return Counter(tuple(words[i:i + n]) for i in range(len(words) - n + 1))


def _lcs(a, b):
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


class COCOEvalCap:
    def __init__(self, coco, cocoRes):
        self.coco, self.cocoRes = coco, cocoRes
        self.eval, self.imgToEval = {}, {}
        self.params = {"image_id": coco.getImgIds()}

    def evaluate(self):
        ids = [i for i in self.params["image_id"] if i in self.cocoRes.imgToAnns]
        gts = {i: [_tokens(a["caption"]) for a in self.coco.imgToAnns[i]] for i in ids}
        res = {i: _tokens(self.cocoRes.imgToAnns[i][0]["caption"]) for i in ids}
        hyp_len = sum(len(res[i]) for i in ids)
        ref_len = sum(min((len(r) for r in gts[i]), key=lambda n: abs(n - len(res[i]))) for i in ids)
        precisions = []
        for n in range(1, 5):
            match = total = 0
            for i in ids:
                hyp = _ngrams(res[i], n)
                best = Counter()
                for ref in gts[i]:
                    best |= _ngrams(ref, n)
                match += sum(min(c, best[g]) for g, c in hyp.items())
                total += sum(hyp.values())
            precisions.append((match + 1) / (total + 1))
            brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / max(hyp_len, 1))
            self.eval[f"Bleu_{n}"] = brevity * math.exp(sum(map(math.log, precisions)) / n)
        rouge, cider = [], []
        for i in ids:
            scores = []
            for ref in gts[i]:
                lcs = _lcs(res[i], ref)
                p, r = lcs / max(len(res[i]), 1), lcs / max(len(ref), 1)
                scores.append(0.0 if lcs == 0 else (1 + 1.2 ** 2) * p * r / (r + 1.2 ** 2 * p))
            rouge.append(max(scores))
            sims = []
            for n in range(1, 5):
                hyp = _ngrams(res[i], n)
                for ref in gts[i]:
                    vec = _ngrams(ref, n)
                    norm = math.sqrt(sum(v * v for v in hyp.values()) * sum(v * v for v in vec.values()))
                    sims.append(sum(c * vec[g] for g, c in hyp.items()) / norm if norm else 0.0)
            cider.append(10.0 * sum(sims) / len(sims))
            self.imgToEval[i] = {"image_id": i, "ROUGE_L": rouge[-1], "CIDEr": cider[-1]}
        self.eval["ROUGE_L"] = sum(rouge) / max(len(rouge), 1)
        self.eval["CIDEr"] = sum(cider) / max(len(cider), 1)
        for metric, score in self.eval.items():
            print(f"{metric}: {score:.3f}")
'''

# Only to build the pretrained checkpoints in prepare(): the tree's own model classes (with the steps' sitecustomize
# and tokenizer), in a child process from the tree's root; the state dicts are saved as a CUDA machine writes them.
_BUILD = r"""
import sys, torch
sys.path.insert(0, ".")
kind, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
if kind == "caption":
    from models.blip import blip_decoder
    model = blip_decoder(pretrained="", image_size=32, vit="tiny", prompt="a picture of ")
else:
    from models.blip_retrieval import blip_retrieval
    model = blip_retrieval(pretrained="", image_size=32, vit="tiny", queue_size=8, negative_all_rank=True)
torch.save({"model": model.state_dict()}, out)
"""


def _with_values(text: str, values: dict) -> str:
    """The repository's YAML config with the top-level ``key: value`` lines of ``values`` replaced (comments kept)."""
    lines, seen = [], set()
    for line in text.splitlines():
        key = line.split(":", 1)[0]
        if ":" in line and not line.startswith((" ", "#")) and key in values:
            line, _ = f"{key}: {values[key]}", seen.add(key)
        lines.append(line)
    missing = set(values) - seen
    assert not missing, f"not in the config: {missing}"
    return "\n".join(lines) + "\n"


def prepare(tree: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    import numpy as np
    import torch
    from PIL import Image

    work = tree / G
    site = tree / SITE
    (site / "pycocoevalcap").mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (site / "ruamel_yaml.py").write_text(RUAMEL_YAML)
    (site / "pycocoevalcap" / "__init__.py").write_text("")
    (site / "pycocoevalcap" / "eval.py").write_text(COCOEVALCAP)

    # A tiny uncased WordPiece vocabulary, as bert-base-uncased in an offline Hugging Face cache.
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    snapshot = work / "hf" / "hub" / "models--bert-base-uncased" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (snapshot / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "model_max_length": 512,
                                                                "tokenizer_class": "BertTokenizer"}))
    (snapshot / "config.json").write_text(json.dumps({"model_type": "bert", "vocab_size": len(vocab)}))
    (snapshot.parent.parent / "refs").mkdir(exist_ok=True)
    (snapshot.parent.parent / "refs" / "main").write_text("0" * 40)

    # configs/med_config.json (read from that fixed path by every model class): BERT-base scaled down; the vocabulary
    # is the tokenizer's plus the [DEC] and [ENC] tokens init_tokenizer() adds, as 30524 is bert-base's 30522 + 2.
    med = json.loads((tree / "configs" / "med_config.json").read_text())
    med.update(hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=2,
               max_position_embeddings=64, vocab_size=len(vocab) + 2, encoder_width=32)
    (tree / "configs" / "med_config.json").write_text(json.dumps(med, indent=2) + "\n")

    # Synthetic COCO (Karpathy splits): 8 train images (one caption each), 3 val and 3 test images (two captions each).
    rng = np.random.default_rng(0)

    def caption():
        words = rng.choice(WORDS[3:], size=int(rng.integers(4, 8)))
        return "A " + " ".join(words) + "."

    def image(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(48, 48, 3), dtype=np.uint8)).save(path)

    images, annotation = work / "images", work / "annotation"
    (annotation / "coco_gt").mkdir(parents=True, exist_ok=True)
    train = []
    for i in range(1, 9):
        name = f"train2014/COCO_train2014_{i:012d}.jpg"
        image(images / name)
        train.append({"image": name, "caption": caption(), "image_id": f"coco_{i}"})
    (annotation / "coco_karpathy_train.json").write_text(json.dumps(train))
    for split, first in (("val", 100), ("test", 200)):
        entries, gt_images, gt_annotations = [], [], []
        for i in range(first, first + 3):
            name = f"val2014/COCO_val2014_{i:012d}.jpg"
            image(images / name)
            captions = [caption(), caption()]
            entries.append({"image": name, "caption": captions})
            gt_images.append({"id": i})
            gt_annotations += [{"image_id": i, "caption": c, "id": len(gt_annotations) + k + 1}
                               for k, c in enumerate(captions)]
        (annotation / f"coco_karpathy_{split}.json").write_text(json.dumps(entries))
        (annotation / "coco_gt" / f"coco_karpathy_{split}_gt.json").write_text(json.dumps(
            {"info": {}, "licenses": [], "type": "captions", "images": gt_images, "annotations": gt_annotations}))

    # The pretrained / finetuned checkpoints, from the tree's own classes, saved as on CUDA.
    env = dict(os.environ, **{k: v.replace("{tree}", str(tree)) for k, v in ENV.items()}, CUDA_VISIBLE_DEVICES="")
    for kind, names in (("caption", ("model_base_capfilt_large.pth", "model_base_caption_capfilt_large.pth")),
                        ("retrieval", ("model_base.pth",))):
        local = work / f"cpu_{kind}.pth"
        subprocess.run([sys.executable, "-c", _BUILD, kind, str(local)], cwd=tree, env=env, check=True,
                       stdout=subprocess.DEVNULL)
        for name in names:
            save_cuda_checkpoint(torch.load(local, map_location="cpu"), work / "pretrained" / name)
        local.unlink()

    common = {"image_root": f"'{G}/images/'", "ann_root": f"'{G}/annotation'", "vit": "'tiny'", "image_size": 32,
              "max_epoch": 1}
    caption_cfg = (tree / "configs" / "caption_coco.yaml").read_text()
    caption_values = {**common, "coco_gt_root": f"'{G}/annotation/coco_gt'", "batch_size": 2, "max_length": 10,
                      "min_length": 3, "num_beams": 2}
    (work / "caption_coco.yaml").write_text(_with_values(caption_cfg, {
        **caption_values, "pretrained": f"'{G}/pretrained/model_base_capfilt_large.pth'"}))
    (work / "caption_coco_eval.yaml").write_text(_with_values(caption_cfg, {
        **caption_values, "pretrained": f"'{G}/pretrained/model_base_caption_capfilt_large.pth'"}))
    retrieval_cfg = (tree / "configs" / "retrieval_coco.yaml").read_text()
    retrieval_values = {**common, "batch_size_train": 2, "batch_size_test": 2, "queue_size": 8, "k_test": 2}
    (work / "retrieval_coco.yaml").write_text(_with_values(retrieval_cfg, {
        **retrieval_values, "pretrained": f"'{G}/pretrained/model_base.pth'"}))
    (work / "retrieval_coco_eval.yaml").write_text(_with_values(retrieval_cfg, {
        **retrieval_values, "pretrained": f"'{G}/out/retrieval/checkpoint_best.pth'"}))


STEPS = [
    Step("caption-train", f"{LAUNCH} train_caption.py --config {G}/caption_coco.yaml --output_dir {G}/out/caption",
         outputs=[f"{G}/out/caption/checkpoint_best.pth", f"{G}/out/caption/log.txt",
                  f"{G}/out/caption/result/test_epoch0.json"], env=ENV, timeout=1200),
    Step("caption-evaluate", f"{LAUNCH} train_caption.py --config {G}/caption_coco_eval.yaml "
                             f"--output_dir {G}/out/caption_eval --evaluate",
         outputs=[f"{G}/out/caption_eval/evaluate.txt", f"{G}/out/caption_eval/result/val_epoch0.json"],
         env=ENV, timeout=1200),
    Step("retrieval-train", f"{LAUNCH} train_retrieval.py --config {G}/retrieval_coco.yaml "
                            f"--output_dir {G}/out/retrieval",
         outputs=[f"{G}/out/retrieval/checkpoint_best.pth", f"{G}/out/retrieval/log.txt"], env=ENV, timeout=1200),
    Step("retrieval-evaluate", f"{LAUNCH} train_retrieval.py --config {G}/retrieval_coco_eval.yaml "
                               f"--output_dir {G}/out/retrieval_eval --evaluate",
         outputs=[f"{G}/out/retrieval_eval/evaluate.txt"], env=ENV, timeout=1200),
]
