"""Grounding DINO's README commands on tiny random weights written as on CUDA: demo/inference_on_a_image.py with a
text prompt (the README's first demo), the same with --token_spans on .asset/cat_dog.jpeg (its second), the README's
"Running with Python" snippet (groundingdino.util.inference: load_model, load_image, predict, annotate), and the
README's COCO zero-shot evaluation (demo/test_ap_on_coco.py) on a two-image synthetic COCO val set with COCO's 80
categories. The repository releases no training code, so there is no training, resume or torchrun step.

The repository's own config, shrunk by its own knobs: groundingdino/config/GroundingDINO_SwinT_OGC.py copied into
_gauntlet/ with enc_layers/dec_layers 1, num_queries 50, dim_feedforward 256, and text_encoder_type pointing at a
folder (get_tokenlizer accepts a directory) holding a tiny random BERT and its WordPiece vocabulary (every word of
the prompts and of COCO's category names, so each is one token). The Swin-T backbone is the config's own (the
smallest it knows). The checkpoint is {"model": state_dict} of the model this config builds, as the released
groundingdino_swint_ogc.pth, with every storage tagged cuda:0. Never a --cpu-only / --device flag.

Not CUDA matters: the scripts run with PYTHONPATH at the tree instead of `pip install -e .`: setup.py's C++
extension adds nothing off CUDA (its CPU kernels are AT_ERROR("Not implement on cpu"); ms_deform_attn.py takes its
PyTorch path unless the value is a CUDA tensor, and imports _C inside a try).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}", "MPLBACKEND": "Agg", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1"}

COCO_NAMES = [
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "traffic light",
    "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog", "horse", "sheep", "cow", "elephant",
    "bear", "zebra", "giraffe", "backpack", "umbrella", "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard",
    "sports ball", "kite", "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange", "broccoli",
    "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed", "dining table", "toilet",
    "tv", "laptop", "mouse", "remote", "keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
]
# test_ap_on_coco.py's id_map: the 80 categories' COCO ids.
COCO_IDS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 27, 28, 31, 32,
            33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59,
            60, 61, 62, 63, 64, 65, 67, 70, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 84, 85, 86, 87, 88, 89, 90]

API_PY = '''\
"""The README's "Running with Python" snippet, with the recipe's paths."""
from groundingdino.util.inference import load_model, load_image, predict, annotate
import cv2

model = load_model("_gauntlet/GroundingDINO_SwinT_OGC.py", "_gauntlet/weights/groundingdino_swint_ogc.pth")
IMAGE_PATH = "_gauntlet/dog-3.jpeg"
TEXT_PROMPT = "chair . person . dog ."
BOX_TRESHOLD = 0.35
TEXT_TRESHOLD = 0.25

image_source, image = load_image(IMAGE_PATH)

boxes, logits, phrases = predict(
    model=model,
    image=image,
    caption=TEXT_PROMPT,
    box_threshold=BOX_TRESHOLD,
    text_threshold=TEXT_TRESHOLD
)

annotated_frame = annotate(image_source=image_source, boxes=boxes, logits=logits, phrases=phrases)
cv2.imwrite("_gauntlet/out/annotated_image.jpg", annotated_frame)
print("boxes", tuple(boxes.shape), "phrases", phrases[:5])
'''


def _vocab(folder: Path) -> None:
    words = set()
    for text in COCO_NAMES + ["chair", "person", "dog", "there is a cat and a dog in the image"]:
        words.update(text.split())
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "?", ",", "!"] + sorted(words)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")


def _tiny_bert(folder: Path) -> None:
    import torch
    import transformers

    _vocab(folder)
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(folder)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(folder)


def _config(tree: Path, work: Path) -> Path:
    text = (tree / "groundingdino" / "config" / "GroundingDINO_SwinT_OGC.py").read_text()
    for old, new in (("enc_layers = 6", "enc_layers = 1"), ("dec_layers = 6", "dec_layers = 1"),
                     ("num_queries = 900", "num_queries = 50"), ("dim_feedforward = 2048", "dim_feedforward = 256"),
                     ('text_encoder_type = "bert-base-uncased"', f'text_encoder_type = "{G}/bert"')):
        assert old in text, old
        text = text.replace(old, new, 1)
    out = work / "GroundingDINO_SwinT_OGC.py"
    out.write_text(text)
    return out


def _coco(work: Path) -> None:
    import json

    import numpy as np
    from PIL import Image

    generator = np.random.default_rng(0)
    images_dir = work / "coco" / "val2017"
    images_dir.mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i, (h, w) in enumerate(((96, 128), (120, 90))):
        pixels = generator.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
        name = f"{i + 1:012d}.jpg"
        Image.fromarray(pixels).save(images_dir / name)
        images.append({"id": i + 1, "file_name": name, "height": h, "width": w})
        for j in range(2):
            bw, bh = float(generator.uniform(10, w / 2)), float(generator.uniform(10, h / 2))
            x, y = float(generator.uniform(0, w - bw)), float(generator.uniform(0, h - bh))
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": COCO_IDS[(i * 2 + j) * 7],
                                "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0})
    categories = [{"id": cid, "name": name, "supercategory": "thing"} for cid, name in zip(COCO_IDS, COCO_NAMES)]
    (work / "coco" / "instances_val2017.json").write_text(
        json.dumps({"images": images, "annotations": annotations, "categories": categories}))


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import numpy as np
    import torch
    from PIL import Image

    work = tree / G
    (work / "out").mkdir(parents=True, exist_ok=True)
    (work / "api.py").write_text(API_PY)
    _tiny_bert(work / "bert")
    config = _config(tree, work)
    _coco(work)
    pixels = np.random.default_rng(1).integers(0, 256, size=(90, 120, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(work / "dog-3.jpeg")

    # the tiny model, built by the repository's own config and builder in a child process (this recipe's module is
    # itself named groundingdino), saved as a CUDA training run saves it: DDP-wrapped, so every key has the
    # "module." prefix that clean_state_dict strips
    build = ("import sys, torch; from groundingdino.models import build_model; "
             "from groundingdino.util.slconfig import SLConfig; args = SLConfig.fromfile(sys.argv[1]); "
             "args.device = 'cpu'; torch.manual_seed(0); model = build_model(args); "
             "torch.save({'module.' + k: v for k, v in model.state_dict().items()}, sys.argv[2])")
    plain = work / "plain_state_dict.pt"
    subprocess.run([sys.executable, "-c", build, str(config.relative_to(tree)), str(plain)],
                   cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True)
    save_cuda_checkpoint({"model": torch.load(plain, map_location="cpu")},
                         work / "weights" / "groundingdino_swint_ogc.pth")
    plain.unlink()


CKPT = f"{G}/weights/groundingdino_swint_ogc.pth"
CFG = f"{G}/GroundingDINO_SwinT_OGC.py"

STEPS = [
    Step("demo", f'python demo/inference_on_a_image.py -c {CFG} -p {CKPT} -i .asset/cat_dog.jpeg '
         f'-o "{G}/out/demo" -t "chair"',
         outputs=[f"{G}/out/demo/pred.jpg", f"{G}/out/demo/raw_image.jpg"], timeout=300, env=ENV),
    Step("token-spans", f'python demo/inference_on_a_image.py -c {CFG} -p {CKPT} -i .asset/cat_dog.jpeg '
         f'-o {G}/out/spans -t "There is a cat and a dog in the image ." '
         f'--token_spans "[[[9, 10], [11, 14]], [[19, 20], [21, 24]]]"',
         outputs=[f"{G}/out/spans/pred.jpg"], timeout=300, env=ENV),
    Step("python-api", f"python {G}/api.py", outputs=[f"{G}/out/annotated_image.jpg"], timeout=300, env=ENV),
    Step("coco-eval", f"set -o pipefail; python demo/test_ap_on_coco.py -c {CFG} -p {CKPT} "
         f"--anno_path {G}/coco/instances_val2017.json --image_dir {G}/coco/val2017 "
         f"| tee {G}/out/coco_eval.txt",
         outputs=[f"{G}/out/coco_eval.txt"], timeout=300, env=ENV),
]
