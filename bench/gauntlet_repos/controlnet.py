"""ControlNet 1.0 (SD 1.5): the README's and docs/train.md's commands on a tiny ControlLDM (models/cldm_v15.yaml's
architecture, a few channels) with a tiny random CLIP text encoder + tokenizer in an offline HF cache:

- ``tool_add_control.py`` turns a tiny "SD 1.5" checkpoint (written as on CUDA) into ``models/control_sd15_ini.ckpt``;
- ``tutorial_dataset_test.py`` reads the tiny fill50k-style dataset (``training/fill50k``);
- ``tutorial_train.py`` trains from ``control_sd15_ini.ckpt`` for one epoch of two batches (Lightning's own
  ``PL_TRAINER_*`` environment defaults: the script has no flags) and logs images at batch 0 (its ImageLogger);
- the gradio demos for Canny edges, HED boundaries and M-LSD lines (``gradio_canny2image.py``,
  ``gradio_hed2image.py``, ``gradio_hough2image.py``) under a stand-in ``gradio`` module whose ``launch()`` calls the
  Run button's ``process`` once and saves the gallery; their ControlNet checkpoints and the HED / M-LSD annotator
  weights are random and written as on CUDA.

Every path is hard-coded in the scripts (``./models/cldm_v15.yaml``, ``./models/control_sd15_*.pth``,
``./training/fill50k``, ``annotator/ckpts``): prepare() writes the tiny config over ``models/cldm_v15.yaml`` and puts
the files where the scripts read them.
"""
from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# tutorial_train.py has no flags and trains forever (Trainer(gpus=1, precision=32, callbacks=[logger])): Lightning
# 1.5 reads defaults for the arguments a script does not pass from PL_TRAINER_* variables. One epoch of two batches.
TRAIN_ENV = {**ENV, "PL_TRAINER_MAX_EPOCHS": "1", "PL_TRAINER_LIMIT_TRAIN_BATCHES": "2"}
GRADIO_ENV = {**ENV, "PYTHONPATH": f"{G}/stubs"}

# models/cldm_v15.yaml scaled down: 32-channel UNet and ControlNet (GroupNorm(32) needs multiples of 32), two
# levels, f8 KL autoencoder of 32 channels, CLIP text embeddings of width 32. use_checkpoint as in the real config.
CLDM_V15 = """\
model:
  target: cldm.cldm.ControlLDM
  params:
    linear_start: 0.00085
    linear_end: 0.0120
    num_timesteps_cond: 1
    log_every_t: 200
    timesteps: 1000
    first_stage_key: "jpg"
    cond_stage_key: "txt"
    control_key: "hint"
    image_size: 8
    channels: 4
    cond_stage_trainable: false
    conditioning_key: crossattn
    monitor: val/loss_simple_ema
    scale_factor: 0.18215
    use_ema: False
    only_mid_control: False

    control_stage_config:
      target: cldm.cldm.ControlNet
      params:
        image_size: 32 # unused
        in_channels: 4
        hint_channels: 3
        model_channels: 32
        attention_resolutions: [ 2, 1 ]
        num_res_blocks: 1
        channel_mult: [ 1, 2 ]
        num_heads: 2
        use_spatial_transformer: True
        transformer_depth: 1
        context_dim: 32
        use_checkpoint: True
        legacy: False

    unet_config:
      target: cldm.cldm.ControlledUnetModel
      params:
        image_size: 32 # unused
        in_channels: 4
        out_channels: 4
        model_channels: 32
        attention_resolutions: [ 2, 1 ]
        num_res_blocks: 1
        channel_mult: [ 1, 2 ]
        num_heads: 2
        use_spatial_transformer: True
        transformer_depth: 1
        context_dim: 32
        use_checkpoint: True
        legacy: False

    first_stage_config:
      target: ldm.models.autoencoder.AutoencoderKL
      params:
        embed_dim: 4
        monitor: val/rec_loss
        ddconfig:
          double_z: true
          z_channels: 4
          resolution: 256
          in_channels: 3
          out_ch: 3
          ch: 32
          ch_mult:
          - 1
          - 1
          - 1
          - 1
          num_res_blocks: 1
          attn_resolutions: []
          dropout: 0.0
        lossconfig:
          target: torch.nn.Identity

    cond_stage_config:
      target: ldm.modules.encoders.modules.FrozenCLIPEmbedder
"""

# gradio stand-in: components are inert, Button.click records the function, Blocks.launch() calls it once with the
# inputs in $GAUNTLET_GRADIO (an {"image_path"} value becomes the numpy RGB array gr.Image(type="numpy") gives).
GRADIO_STUB = '''\
"""Stand-in for gradio (the gauntlet's): no web server; launch() runs the recorded Run button once."""
import json
import os
from pathlib import Path

_clicks = []


class _Component:
    def __init__(self, *args, **kwargs):
        self.kwargs = kwargs

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def style(self, *args, **kwargs):
        return self

    def queue(self, *args, **kwargs):
        return self

    def click(self, fn=None, inputs=None, outputs=None, **kwargs):
        _clicks.append(fn)
        return self

    def launch(self, *args, **kwargs):
        import numpy as np
        from PIL import Image

        spec = json.loads(Path(os.environ["GAUNTLET_GRADIO"]).read_text())

        def value(v):
            if isinstance(v, dict) and "image_path" in v:
                return np.array(Image.open(v["image_path"]).convert("RGB"))
            return v

        out = Path(spec["outdir"])
        out.mkdir(parents=True, exist_ok=True)
        result = _clicks[-1](*[value(v) for v in spec["inputs"]])
        for i, image in enumerate(result):
            Image.fromarray(np.asarray(image)).save(out / f"{i:05}.png")
        print(f"gauntlet gradio stand-in: {len(result)} image(s) in {out}")


def __getattr__(name):
    return _Component
'''


def _clip_tokenizer_and_config(folder: Path):
    """A CLIP BPE tokenizer (byte alphabet, two merges) written as vocab.json/merges.txt, and a tiny text config."""
    import json

    import transformers
    from transformers.models.clip.tokenization_clip import bytes_to_unicode

    chars = list(bytes_to_unicode().values())
    merges = [("t", "h"), ("th", "e</w>")]
    vocab = chars + [c + "</w>" for c in chars] + ["".join(m) for m in merges]
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(vocab)}))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(m) for m in merges) + "\n")
    tokenizer = transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
    text = transformers.CLIPTextConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=77, projection_dim=16,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return tokenizer, text


def _fill50k(folder: Path, pairs: int = 8, entries: int = 1240, size: int = 64) -> None:
    """fill50k's layout: source/N.png (circle outlines), target/N.png (filled circles), prompt.json (one JSON object
    a line). tutorial_dataset_test.py reads item 1234, so prompt.json lists the ``pairs`` images cyclically."""
    import json

    import cv2
    import numpy as np

    rng = np.random.default_rng(0)
    (folder / "source").mkdir(parents=True, exist_ok=True)
    (folder / "target").mkdir(parents=True, exist_ok=True)
    colours = ["red", "green", "blue", "yellow", "purple", "cyan", "white", "orange"]
    for i in range(pairs):
        centre = tuple(int(v) for v in rng.integers(16, size - 16, size=2))
        radius = int(rng.integers(6, 14))
        fill = tuple(int(v) for v in rng.integers(0, 256, size=3))
        back = tuple(int(v) for v in rng.integers(0, 256, size=3))
        source = np.zeros((size, size, 3), dtype=np.uint8)
        cv2.circle(source, centre, radius, (255, 255, 255), 1)
        target = np.full((size, size, 3), back, dtype=np.uint8)
        cv2.circle(target, centre, radius, fill, -1)
        cv2.imwrite(str(folder / "source" / f"{i}.png"), source)
        cv2.imwrite(str(folder / "target" / f"{i}.png"), target)
    with open(folder / "prompt.json", "w") as handle:
        for n in range(entries):
            i = n % pairs
            prompt = f"{colours[i]} circle with {colours[(i + 3) % pairs]} background"
            handle.write(json.dumps({"source": f"source/{i}.png", "target": f"target/{i}.png", "prompt": prompt}) + "\n")


def prepare(tree: Path) -> None:
    import json
    import os
    import sys

    import numpy as np
    from PIL import Image

    work = tree / G
    hf = work / "hf"
    os.environ["HF_HOME"] = str(hf)
    os.environ["HF_HUB_OFFLINE"] = "1"

    import torch
    import transformers

    tokenizer, text_config = _clip_tokenizer_and_config(work / "tok")

    def save_clip(folder):
        torch.manual_seed(0)
        tokenizer.save_pretrained(folder)
        transformers.CLIPTextModel(text_config).save_pretrained(folder)

    fake_hub_model(hf, "openai/clip-vit-large-patch14", save_clip)

    (tree / "models" / "cldm_v15.yaml").write_text(CLDM_V15)
    stubs = work / "stubs" / "gradio"
    stubs.mkdir(parents=True, exist_ok=True)
    (stubs / "__init__.py").write_text(GRADIO_STUB)
    _fill50k(tree / "training" / "fill50k")

    # the demos' input: a 256 px picture with a few shapes (edges for Canny/HED, straight lines for M-LSD)
    import cv2

    rng = np.random.default_rng(1)
    picture = np.full((256, 256, 3), 230, dtype=np.uint8)
    cv2.rectangle(picture, (40, 50), (200, 180), (30, 90, 160), -1)
    cv2.line(picture, (10, 220), (246, 200), (0, 0, 0), 3)
    cv2.circle(picture, (128, 120), 40, (200, 40, 40), -1)
    picture = np.clip(picture.astype(int) + rng.integers(-10, 10, size=picture.shape), 0, 255).astype(np.uint8)
    (work / "images").mkdir(parents=True, exist_ok=True)
    Image.fromarray(picture).save(work / "images" / "input.png")

    prompts = ["a bird", "best quality, extremely detailed", "lowres, bad anatomy"]
    # process(input_image, prompt, a_prompt, n_prompt, num_samples, image_resolution, [detect_resolution,]
    #         ddim_steps, guess_mode, strength, scale, seed, eta, [thresholds...])
    demos = {
        "canny": [1, 256, 4, False, 1.0, 9.0, 1234, 0.0, 100, 200],
        "hed": [1, 256, 256, 4, False, 1.0, 9.0, 1234, 0.0],
        "hough": [1, 256, 256, 4, True, 1.0, 9.0, 1234, 0.0, 0.1, 0.1],  # guess mode: no control in un_cond
    }
    for name, rest in demos.items():
        (work / f"gradio-{name}.json").write_text(json.dumps({
            "outdir": f"{G}/out/{name}", "inputs": [{"image_path": f"{G}/images/input.png"}, *prompts, *rest]}))

    # Weights, as a CUDA machine writes them: a tiny "SD 1.5" checkpoint ({"state_dict"}: the ControlLDM's keys
    # without control_model.*, which are SD's), the demos' ControlNet checkpoints (a plain state dict, as the
    # released control_sd15_*.pth), and the HED / M-LSD annotators' weights in annotator/ckpts.
    from omegaconf import OmegaConf

    sys.path.insert(0, str(tree))
    try:
        from ldm.util import instantiate_from_config

        torch.manual_seed(0)
        model = instantiate_from_config(OmegaConf.load(tree / "models" / "cldm_v15.yaml").model)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        sd = {k: v for k, v in state.items() if not k.startswith("control_model.")}
        save_cuda_checkpoint({"state_dict": sd, "global_step": 0}, tree / "models" / "v1-5-pruned.ckpt")
        for name in ("canny", "hed", "mlsd"):
            save_cuda_checkpoint(state, tree / "models" / f"control_sd15_{name}.pth")

        from annotator.hed import ControlNetHED_Apache2
        from annotator.mlsd.models.mbv2_mlsd_large import MobileV2_MLSD_Large

        torch.manual_seed(0)
        save_cuda_checkpoint(ControlNetHED_Apache2().state_dict(), tree / "annotator" / "ckpts" / "ControlNetHED.pth")
        torch.manual_seed(0)
        save_cuda_checkpoint(MobileV2_MLSD_Large().state_dict(),
                             tree / "annotator" / "ckpts" / "mlsd_large_512_fp32.pth")
    finally:
        sys.path.remove(str(tree))


STEPS = [
    # docs/train.md: python tool_add_control.py ./models/v1-5-pruned.ckpt ./models/control_sd15_ini.ckpt
    Step("tool_add_control", "python tool_add_control.py ./models/v1-5-pruned.ckpt ./models/control_sd15_ini.ckpt",
         outputs=["models/control_sd15_ini.ckpt"], timeout=300, env=ENV),
    # docs/train.md: the dataset check
    Step("tutorial_dataset_test", "python tutorial_dataset_test.py", timeout=120, env=ENV),
    # docs/train.md: python tutorial_train.py (one epoch of two batches; the ImageLogger logs at batch 0)
    Step("tutorial_train", "python tutorial_train.py",
         outputs=["lightning_logs/version_0/checkpoints/*.ckpt", "image_log/train/*.png"], timeout=600,
         env=TRAIN_ENV),
    # README: python gradio_canny2image.py (and the HED and M-LSD demos), the Run button clicked once
    Step("gradio_canny2image", "python gradio_canny2image.py", outputs=[f"{G}/out/canny/00001.png"], timeout=300,
         env={**GRADIO_ENV, "GAUNTLET_GRADIO": f"{G}/gradio-canny.json"}),
    Step("gradio_hed2image", "python gradio_hed2image.py", outputs=[f"{G}/out/hed/00001.png"], timeout=300,
         env={**GRADIO_ENV, "GAUNTLET_GRADIO": f"{G}/gradio-hed.json"}),
    Step("gradio_hough2image", "python gradio_hough2image.py", outputs=[f"{G}/out/hough/00001.png"], timeout=300,
         env={**GRADIO_ENV, "GAUNTLET_GRADIO": f"{G}/gradio-hough.json"}),
]
