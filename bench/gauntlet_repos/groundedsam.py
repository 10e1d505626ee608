"""Grounded-Segment-Anything's README commands on tiny random weights written as on CUDA: grounding_dino_demo.py
(GroundingDINO alone, FP16 as the script sets it), grounded_sam_demo.py (the README's "original grounded-sam demo",
with --device "cuda" as written), grounded_sam_simple_demo.py (the "updated"
demo, supervision + NMS), grounded_sam_multi_gpu_demo.py (--device "cuda", on one frame of assets/car) and
grounded_sam_inpainting_demo.py (GroundingDINO + SAM + diffusers' Stable Diffusion inpainting, --device "cuda").
The repository releases no training code: no training, resume or torchrun step. Not run: RAM/Tag2Text (an external
repository), the SAM-HQ variant of grounded_sam_demo.py (it passed on the CPU-edited original; left out
for the shared machine's time: 5 minutes a step at a load of 16 on 2 cores), BLIP/ChatGPT, Whisper, the chatbot, OSX and VISAM (submodules absent from the snapshot), gradio_app.

Weights and models, all random and tiny, none downloaded:
- GroundingDINO: the repository's own config (GroundingDINO/groundingdino/config/GroundingDINO_SwinT_OGC.py, the path
  every README command and the two demos with hard-coded paths use) shrunk in place by its own knobs (enc_layers and
  dec_layers 1, num_queries 10, dim_feedforward 256); the Swin-T backbone is the config's own, the smallest it knows.
  The checkpoint (./groundingdino_swint_ogc.pth, {"model": state_dict}) is built by the repository's own build_model
  and written as on CUDA.
- bert-base-uncased: get_pretrained_language_model accepts only that name (or --bert_base_uncased_path, which the
  README's commands do not pass), so a tiny random BERT and a WordPiece vocabulary of the prompts' words are laid
  out in a Hugging Face cache under _gauntlet/hf (HF_HOME, offline).
  The vocabulary has no ".": with random weights a box whose best token is the caption's "." gets the phrase ""
  (predict() strips the dots), and Model.find_index("".split()[0]) raises IndexError in the simple demo (the same on
  every device); as [UNK] it decodes to "[UNK]" (GroundingDINO's sub-sentence splitting then takes [UNK] for ".").
- SAM and SAM-HQ: the model types are fixed in build_sam.py / build_sam_hq.py (vit_h, the README's default, and
  vit_b, the smallest, cost minutes an image encoding on a shared core), so ``_gauntlet/tiny.py`` replaces the
  registries' "vit_h"/"default" entries (and segment_anything.build_sam, which the inpainting demo calls) with a
  tiny encoder built by the repository's own _build_sam (width 32, depth 2, 2 heads, one windowed and one global
  block; prompt encoder, mask decoders, 1024-px input and checkpoint loading unchanged), then runs the script named
  on its command line as __main__ (runpy, with the script's folder first on sys.path as `python SCRIPT` has it).
  Checkpoints ./sam_vit_h_4b8939.pth and ./sam_hq_vit_h.pth are written as on CUDA.
- runwayml/stable-diffusion-inpainting: a tiny random StableDiffusionInpaintPipeline (UNet with 9 input channels,
  an 8x VAE, a 2-layer CLIP text encoder with a character-level CLIP BPE vocabulary), saved into the same HF cache.

The scripts import ``groundingdino`` and ``segment_anything``, which the README installs with ``pip install -e``:
the steps put GroundingDINO/ and segment_anything/ on PYTHONPATH instead (GroundingDINO's setup.py builds a CUDA
extension; ms_deform_attn.py imports _C inside a try and takes its PyTorch path for non-CUDA tensors).
tiny.py also swaps torchvision's nms for a plain-torch one: PyPI's torchvision C++ ops do not load beside this CPU
torch (not a CUDA matter: the same on every device). Never a --device flag other than the README's own "cuda".
"""

from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}/GroundingDINO:{tree}/segment_anything", "MPLBACKEND": "Agg",
       "TOKENIZERS_PARALLELISM": "false", "HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1", "DIFFUSERS_OFFLINE": "1"}
CONFIG = "GroundingDINO/groundingdino/config/GroundingDINO_SwinT_OGC.py"

TINY = r'''
"""Makes SAM's "vit_h" (the README's default) a tiny model, then runs argv[1] as __main__ with the rest."""
import importlib
import os
import runpy
import sys

import segment_anything

build_sam = importlib.import_module("segment_anything.build_sam")  # the package re-exports a function by that name
build_sam_hq = importlib.import_module("segment_anything.build_sam_hq")

TINY = dict(encoder_embed_dim=32, encoder_depth=2, encoder_num_heads=2, encoder_global_attn_indexes=[1])


def build_sam_tiny(checkpoint=None):
    return build_sam._build_sam(checkpoint=checkpoint, **TINY)


def build_sam_hq_tiny(checkpoint=None):
    return build_sam_hq._build_sam(checkpoint=checkpoint, **TINY)


for key in ("default", "vit_h"):
    build_sam.sam_model_registry[key] = build_sam_tiny
    build_sam_hq.sam_hq_model_registry[key] = build_sam_hq_tiny
segment_anything.build_sam = segment_anything.build_sam_vit_h = build_sam_tiny
segment_anything.build_sam_hq = segment_anything.build_sam_hq_vit_h = build_sam_hq_tiny


# Not a CUDA matter, the same on every device: PyPI's torchvision is built against CUDA torch, so on this CPU torch
# its C++ ops (nms) never load. A plain-torch torchvision nms.
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
    import torchvision
    import torchvision.extension
    import torchvision.ops.boxes

    if not torchvision.extension._has_ops():
        torchvision.extension._assert_has_ops = lambda: None
        torchvision.ops.boxes._assert_has_ops = lambda: None
        torchvision.ops.boxes.nms = lambda boxes, scores, iou_threshold: _nms(boxes, scores, iou_threshold)
        torchvision.ops.nms = torchvision.ops.boxes.nms


_compat()

if __name__ == "__main__" and len(sys.argv) > 1:
    script = sys.argv.pop(1)
    sys.argv[0] = script
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    runpy.run_path(script, run_name="__main__")
'''

WORDS = ("horse clouds grasses sky hill bear chair the running dog car bench a sofa high quality detailed "
         "person cat").split()


def _bert(home: Path) -> None:
    import torch
    import transformers

    def save(folder: Path) -> None:
        # no "." in the vocabulary: it reads as [UNK], which decodes to a non-empty phrase (see the docstring)
        tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", "?", "!"] + sorted(set(WORDS))
        (folder / "vocab.txt").write_text("\n".join(tokens) + "\n")
        tokenizer = transformers.BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=True)
        tokenizer.save_pretrained(folder)
        config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, intermediate_size=64, max_position_embeddings=512)
        torch.manual_seed(0)
        transformers.BertModel(config).save_pretrained(folder)

    fake_hub_model(home, "bert-base-uncased", save)


def _clip_tokenizer(folder: Path):
    """A character-level CLIP BPE tokenizer (the byte alphabet, no merges), saved in ``folder``."""
    import json

    import transformers
    from transformers.models.clip.tokenization_clip import bytes_to_unicode

    folder.mkdir(parents=True, exist_ok=True)
    alphabet = list(bytes_to_unicode().values())
    vocab = alphabet + [c + "</w>" for c in alphabet] + ["<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return transformers.CLIPTokenizer(vocab_file=str(folder / "vocab.json"), merges_file=str(folder / "merges.txt"),
                                      model_max_length=77)


def _inpainting(home: Path, scratch: Path) -> None:
    import torch
    import transformers
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionInpaintPipeline, UNet2DConditionModel

    tokenizer = _clip_tokenizer(scratch / "clip_tokenizer")
    torch.manual_seed(0)
    text_encoder = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_attention_heads=2, num_hidden_layers=2,
        max_position_embeddings=77, projection_dim=32, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id))
    unet = UNet2DConditionModel(sample_size=64, in_channels=9, out_channels=4, layers_per_block=1,
                                block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                                attention_head_dim=8)
    vae = AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 32, 32, 32),
                        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
                        layers_per_block=1, sample_size=512)
    scheduler = PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              skip_prk_steps=True, steps_offset=1)
    pipe = StableDiffusionInpaintPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                          scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                          requires_safety_checker=False)
    fake_hub_model(home, "runwayml/stable-diffusion-inpainting", lambda folder: pipe.save_pretrained(folder))


def _config(tree: Path) -> None:
    path = tree / CONFIG
    text = path.read_text()
    for old, new in (("enc_layers = 6", "enc_layers = 1"), ("dec_layers = 6", "dec_layers = 1"),
                     ("num_queries = 900", "num_queries = 10"), ("dim_feedforward = 2048", "dim_feedforward = 256")):
        assert old in text, old
        text = text.replace(old, new, 1)
    path.write_text(text)


def prepare(tree: Path) -> None:
    import os
    import runpy
    import shutil
    import subprocess
    import sys

    import numpy as np
    import torch
    from PIL import Image

    work = tree / G
    (work / "out").mkdir(parents=True, exist_ok=True)
    # grounded_sam_multi_gpu_demo.py never creates its --output_dir (the other demos do): not a CUDA matter
    (work / "out" / "multi_gpu").mkdir(parents=True, exist_ok=True)
    (work / "tiny.py").write_text(TINY)
    home = work / "hf"
    _bert(home)
    _config(tree)
    (work / "car").mkdir(exist_ok=True)
    for name in ("frame_0001.png",):
        shutil.copy(tree / "assets" / "car" / name, work / "car" / name)
    # the SAM-HQ demo image the README downloads next to the scripts
    pixels = np.random.default_rng(1).integers(0, 256, size=(240, 320, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tree / "sam_hq_demo_image.png")

    env = {**os.environ, "PYTHONPATH": f"{tree / 'GroundingDINO'}:{tree / 'segment_anything'}",
           "HF_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    # the tiny GroundingDINO, built by the repository's own config and builder in a child process
    build = ("import sys, torch; from groundingdino.models import build_model; "
             "from groundingdino.util.slconfig import SLConfig; args = SLConfig.fromfile(sys.argv[1]); "
             "args.device = 'cpu'; torch.manual_seed(0); model = build_model(args); "
             "torch.save(model.state_dict(), sys.argv[2])")
    plain = work / "plain_state_dict.pt"
    subprocess.run([sys.executable, "-c", build, CONFIG, str(plain)], cwd=tree, env=env, check=True)
    save_cuda_checkpoint({"model": torch.load(plain, map_location="cpu")}, tree / "groundingdino_swint_ogc.pth")
    plain.unlink()

    # the tiny SAM and SAM-HQ, by tiny.py's builders (the repository's own _build_sam)
    sys.path[:0] = [str(tree / "segment_anything")]
    try:
        tiny = runpy.run_path(str(work / "tiny.py"))
        torch.manual_seed(0)
        save_cuda_checkpoint(tiny["build_sam_tiny"]().state_dict(), tree / "sam_vit_h_4b8939.pth")
        torch.manual_seed(1)
        save_cuda_checkpoint(tiny["build_sam_hq_tiny"]().state_dict(), tree / "sam_hq_vit_h.pth")
    finally:
        sys.path.remove(str(tree / "segment_anything"))
    _inpainting(home, work)


RUN = f"python {G}/tiny.py "
COMMON = (f"--config {CONFIG} --grounded_checkpoint groundingdino_swint_ogc.pth --sam_checkpoint sam_vit_h_4b8939.pth "
          "--box_threshold 0.3 --text_threshold 0.25")
OUT = f"{G}/out"

STEPS = [
    Step("grounding-dino", "python grounding_dino_demo.py", outputs=["annotated_image.jpg"], timeout=600, env=ENV),
    Step("grounded-sam", RUN + f'grounded_sam_demo.py {COMMON} --input_image assets/demo1.jpg '
         f'--output_dir "{OUT}/grounded_sam" --text_prompt "bear" --device "cuda"',
         outputs=[f"{OUT}/grounded_sam/grounded_sam_output.jpg", f"{OUT}/grounded_sam/mask.json"],
         timeout=600, env=ENV),
    Step("grounded-sam-simple", RUN + "grounded_sam_simple_demo.py",
         outputs=["groundingdino_annotated_image.jpg", "grounded_sam_annotated_image.jpg"], timeout=600, env=ENV),
    Step("multi-gpu", RUN + f'grounded_sam_multi_gpu_demo.py {COMMON} --input_path {G}/car '
         f'--output_dir "{OUT}/multi_gpu" --text_prompt "car" --device "cuda"',
         outputs=[f"{OUT}/multi_gpu/frame_0001.json", f"{OUT}/multi_gpu/grounded_sam_output_frame_0001.jpg"], timeout=600, env=ENV),
    Step("inpainting", RUN + f'grounded_sam_inpainting_demo.py {COMMON} --input_image assets/inpaint_demo.jpg '
         f'--output_dir "{OUT}/inpainting" --det_prompt "bench" --inpaint_prompt "A sofa, high quality, detailed" '
         '--device "cuda"',
         outputs=[f"{OUT}/inpainting/grounded_sam_inpainting_output.jpg"], timeout=600, env=ENV),
]
