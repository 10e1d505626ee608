"""Stable Diffusion 2: the README's scripts/txt2img.py (SD2-v config, DDIM), scripts/img2img.py ("classic img2img",
SD2-base config) and the gradio demos for inpainting and x4 upscaling (scripts/gradio/inpainting.py,
scripts/gradio/superresolution.py), on tiny random models built from the repository's own configs scaled down
(v2-inference-v.yaml, v2-inference.yaml, v2-inpainting-inference.yaml, x4-upscaling.yaml), from checkpoints written
as on CUDA, with a tiny OpenCLIP text encoder (random weights, no download).

txt2img.py defaults to ``--device cpu`` (its Intel IPEX path): the step passes no device flag and is a control.
The scripts import ``ldm`` (and ``scripts.txt2img``), which the README installs with ``pip install -e .``: the steps
put the tree on ``PYTHONPATH`` instead. The gradio demos build a web UI and call ``block.launch()``: a stand-in
``gradio`` module on ``PYTHONPATH`` records the Run button's function and, at ``launch()``, calls it once with the
inputs in ``$GAUNTLET_GRADIO`` and saves the gallery it returns.
"""
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"PYTHONPATH": ".", "HF_HUB_OFFLINE": "1", "HF_HOME": "{tree}/_gauntlet/hf"}
GRADIO_ENV = {**ENV, "PYTHONPATH": f".:{G}/stubs"}

# A tiny OpenCLIP architecture (open_clip 2.7.0's model-config format): text width 32, 2 layers; the vision tower
# is built and then deleted by FrozenOpenCLIPEmbedder.
TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}
CLIP_ARCH = "gauntlet-tiny-clip"

COND = f"""\
    cond_stage_config:
      target: ldm.modules.encoders.modules.FrozenOpenCLIPEmbedder
      params:
        arch: {CLIP_ARCH}
        version: null
        freeze: True
        layer: "penultimate"
"""


def _first_stage(ch_mult: str) -> str:
    return f"""\
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
          ch_mult: {ch_mult}
          num_res_blocks: 1
          attn_resolutions: []
          dropout: 0.0
        lossconfig:
          target: torch.nn.Identity
"""


# v2-inference.yaml / v2-inference-v.yaml, scaled down: 32-channel UNet (GroupNorm(32) needs multiples of 32),
# f8 KL autoencoder, OpenCLIP context of width 32. use_fp16 as in the real config.
def _sd(parameterization: str, target: str = "ldm.models.diffusion.ddpm.LatentDiffusion", in_channels: int = 4,
        conditioning_key: str = "crossattn", extra: str = "", fp16: bool = True, checkpoint: bool = True) -> str:
    return f"""\
model:
  base_learning_rate: 1.0e-4
  target: {target}
  params:
{parameterization}    linear_start: 0.00085
    linear_end: 0.0120
    num_timesteps_cond: 1
    log_every_t: 200
    timesteps: 1000
    first_stage_key: "jpg"
    cond_stage_key: "txt"
    image_size: 32
    channels: 4
    cond_stage_trainable: false
    conditioning_key: {conditioning_key}
    monitor: val/loss_simple_ema
    scale_factor: 0.18215
    use_ema: False
{extra}
    unet_config:
      target: ldm.modules.diffusionmodules.openaimodel.UNetModel
      params:
        use_checkpoint: {checkpoint}
        use_fp16: {fp16}
        image_size: 32 # unused
        in_channels: {in_channels}
        out_channels: 4
        model_channels: 32
        attention_resolutions: [ 2, 1 ]
        num_res_blocks: 1
        channel_mult: [ 1, 2 ]
        num_head_channels: 16
        use_spatial_transformer: True
        use_linear_in_transformer: True
        transformer_depth: 1
        context_dim: 32
        legacy: False

""" + _first_stage("[ 1, 1, 1, 1 ]") + "\n" + COND


# txt2img runs on the CPU (its --device default), as the README's Intel commands do: with the intel/ fp32 config
# (use_fp16 and use_checkpoint off) and --precision full. The script's default --precision autocast on the CPU is
# bfloat16 autocast, whose bfloat16 samples reach .numpy() and raise (a CPU-path bug of the script, not CUDA's).
V_FP32_CONFIG = _sd('    parameterization: "v"\n', fp16=False, checkpoint=False)
EPS_CONFIG = _sd("")
INPAINT_CONFIG = _sd("", target="ldm.models.diffusion.ddpm.LatentInpaintDiffusion", in_channels=9,
                     conditioning_key="hybrid", extra="    finetune_keys: null\n", fp16=False)

# x4-upscaling.yaml, scaled down: f4 autoencoder, UNet on the 4 latent + 3 low-res channels with noise-level classes,
# self-attention only at the deepest level (as the real config). The demo pads its input to at least 128 px, so the
# latents are 128x128 whatever the input: 2 DDIM steps.
UPSCALE_CONFIG = """\
model:
  base_learning_rate: 1.0e-04
  target: ldm.models.diffusion.ddpm.LatentUpscaleDiffusion
  params:
    parameterization: "v"
    low_scale_key: "lr"
    linear_start: 0.0001
    linear_end: 0.02
    num_timesteps_cond: 1
    log_every_t: 200
    timesteps: 1000
    first_stage_key: "jpg"
    cond_stage_key: "txt"
    image_size: 128
    channels: 4
    cond_stage_trainable: false
    conditioning_key: "hybrid-adm"
    monitor: val/loss_simple_ema
    scale_factor: 0.08333
    use_ema: False

    low_scale_config:
      target: ldm.modules.diffusionmodules.upscaling.ImageConcatWithNoiseAugmentation
      params:
        noise_schedule_config: # image space
          linear_start: 0.0001
          linear_end: 0.02
        max_noise_level: 350

    unet_config:
      target: ldm.modules.diffusionmodules.openaimodel.UNetModel
      params:
        use_checkpoint: True
        num_classes: 1000  # timesteps for noise conditioning (here constant, just need one)
        image_size: 128
        in_channels: 7
        out_channels: 4
        model_channels: 32
        attention_resolutions: [ 2, 4 ]
        num_res_blocks: 1
        channel_mult: [ 1, 2, 2 ]
        disable_self_attentions: [ True, True, False ]
        disable_middle_self_attn: False
        num_heads: 2
        use_spatial_transformer: True
        transformer_depth: 1
        context_dim: 32
        legacy: False
        use_linear_in_transformer: True

""" + _first_stage("[ 1, 1, 1 ]") + "\n" + COND

# gradio stand-in: components are inert, Button.click records the function, Blocks.launch() calls it once.
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
        from PIL import Image

        spec = json.loads(Path(os.environ["GAUNTLET_GRADIO"]).read_text())

        def value(v):
            if isinstance(v, dict) and "image_path" in v:
                return Image.open(v["image_path"])
            if isinstance(v, dict):
                return {k: value(x) for k, x in v.items()}
            return v

        out = Path(spec["outdir"])
        out.mkdir(parents=True, exist_ok=True)
        result = _clicks[-1](*[value(v) for v in spec["inputs"]])
        for i, image in enumerate(result):
            image.save(out / f"{i:05}.png")
        print(f"gauntlet gradio stand-in: {len(result)} image(s) in {out}")


def __getattr__(name):
    return _Component
'''


def _register_tiny_clip() -> None:
    """Write the tiny architecture into the environment's open_clip/model_configs (read at import)."""
    import importlib.util
    import json

    spec = importlib.util.find_spec("open_clip")
    folder = Path(spec.origin).parent / "model_configs"
    target = folder / f"{CLIP_ARCH}.json"
    text = json.dumps(TINY_CLIP, indent=2)
    if not target.is_file() or target.read_text() != text:
        target.write_text(text)


def prepare(tree: Path) -> None:
    import json
    import sys

    import numpy as np
    from PIL import Image

    work = tree / G
    work.mkdir(parents=True, exist_ok=True)
    _register_tiny_clip()

    configs = {"v2-inference-v-fp32.yaml": V_FP32_CONFIG, "v2-inference.yaml": EPS_CONFIG,
               "v2-inpainting-inference.yaml": INPAINT_CONFIG, "x4-upscaling.yaml": UPSCALE_CONFIG}
    for name, text in configs.items():
        (work / name).write_text(text)

    stubs = work / "stubs" / "gradio"
    stubs.mkdir(parents=True, exist_ok=True)
    (stubs / "__init__.py").write_text(GRADIO_STUB)

    # inputs: a 256 px image for img2img and inpainting (the watermark refuses images under 256x256), a mask with
    # a white square to fill, a 32 px low-resolution image for the x4 upscaler (padded to 128 by the demo).
    rng = np.random.default_rng(0)
    images = work / "images"
    images.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, size=(256, 256, 3), dtype=np.uint8)).save(images / "init.png")
    mask = np.zeros((256, 256, 3), dtype=np.uint8)
    mask[64:192, 64:192] = 255
    Image.fromarray(mask).save(images / "mask.png")
    Image.fromarray(rng.integers(0, 256, size=(32, 32, 3), dtype=np.uint8)).save(images / "lowres.png")

    (work / "gradio-inpainting.json").write_text(json.dumps({
        "outdir": f"{G}/out/inpainting",
        "inputs": [{"image": {"image_path": f"{G}/images/init.png"}, "mask": {"image_path": f"{G}/images/mask.png"}},
                   "a red sofa in a sunny living room", 4, 1, 10.0, 0],
    }))
    (work / "gradio-superresolution.json").write_text(json.dumps({
        "outdir": f"{G}/out/superresolution",
        "inputs": [{"image_path": f"{G}/images/lowres.png"}, "a professional photograph of a cat", 2, 1, 10.0, 0,
                   0.0, 20],
    }))

    # Checkpoints as a CUDA machine writes them ({"state_dict", "global_step"}), from the repository's own model
    # classes built from the configs above (the v and eps configs share one architecture, hence one checkpoint).
    import torch
    from omegaconf import OmegaConf

    sys.path.insert(0, str(tree))
    try:
        from ldm.util import instantiate_from_config

        for config, path in (("v2-inference.yaml", "sd/model.ckpt"),
                             ("v2-inpainting-inference.yaml", "inpaint/model.ckpt"),
                             ("x4-upscaling.yaml", "upscale/model.ckpt")):
            torch.manual_seed(0)
            model = instantiate_from_config(OmegaConf.load(work / config).model)
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            save_cuda_checkpoint({"state_dict": state, "global_step": 0}, work / path)
    finally:
        sys.path.remove(str(tree))


STEPS = [
    # the README's SD2.1-v command as its Intel section runs it on the CPU (fp32 config, --precision full), without
    # --device (its default, cpu) and without IPEX/TorchScript
    Step("txt2img", 'python scripts/txt2img.py --prompt "a professional photograph of an astronaut riding a horse" '
                    f"--ckpt {G}/sd/model.ckpt --config {G}/v2-inference-v-fp32.yaml --precision full "
                    f"--H 256 --W 256 --steps 4 "
                    f"--n_samples 1 --n_iter 1 --outdir {G}/out/txt2img",
         outputs=[f"{G}/out/txt2img/samples/00000.png", f"{G}/out/txt2img/grid-0000.png"], timeout=300, env=ENV),
    # the README's classic img2img
    Step("img2img", 'python scripts/img2img.py --prompt "A fantasy landscape, trending on artstation" '
                    f"--init-img {G}/images/init.png --strength 0.8 --ckpt {G}/sd/model.ckpt "
                    f"--config {G}/v2-inference.yaml --ddim_steps 4 --n_samples 1 --n_iter 1 "
                    f"--outdir {G}/out/img2img",
         outputs=[f"{G}/out/img2img/samples/00000.png", f"{G}/out/img2img/grid-0000.png"], timeout=300, env=ENV),
    # the README's inpainting demo: python scripts/gradio/inpainting.py CONFIG CKPT
    Step("gradio-inpainting", f"python scripts/gradio/inpainting.py {G}/v2-inpainting-inference.yaml "
                              f"{G}/inpaint/model.ckpt",
         outputs=[f"{G}/out/inpainting/00000.png"], timeout=300,
         env={**GRADIO_ENV, "GAUNTLET_GRADIO": f"{G}/gradio-inpainting.json"}),
    # the README's x4 upscaling demo: python scripts/gradio/superresolution.py CONFIG CKPT
    Step("gradio-superresolution", f"python scripts/gradio/superresolution.py {G}/x4-upscaling.yaml "
                                   f"{G}/upscale/model.ckpt",
         outputs=[f"{G}/out/superresolution/00000.png"], timeout=300,
         env={**GRADIO_ENV, "GAUNTLET_GRADIO": f"{G}/gradio-superresolution.json"}),
]
