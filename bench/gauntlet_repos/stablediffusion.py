"""Stable Diffusion v1: the README's scripts/txt2img.py (PLMS, and DDIM with --fixed_code) and scripts/img2img.py
on a tiny text-to-image LatentDiffusion (v1-inference.yaml's architecture, a few channels, 256 px) from a checkpoint
written as on CUDA, with a tiny random CLIP text encoder + tokenizer and safety checker in an offline HF cache;
then main.py trains an unconditional tiny LDM for 2 steps on a synthetic LSUN-style folder (the repository's
LSUNBase), and scripts/sample_diffusion.py samples from a CUDA-written checkpoint of it.

The scripts import ``ldm``, which the README installs with ``pip install -e .``: the steps put the tree on
``PYTHONPATH`` instead.
"""
from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint, write_images

G = "_gauntlet"
ENV = {"HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": "."}
# pytorch-lightning 1.4 (main.py needs it: CUDACallback.on_train_epoch_end takes `outputs`, dropped in 1.5) builds
# attribute names as f"_has_setup_{stage}" from a (str, Enum); Python 3.11 formats that as "TrainerFn.FITTING", so
# DataModule.setup raises AttributeError on every device. A sitecustomize restores the <= 3.10 formatting.
TRAIN_ENV = {**ENV, "PYTHONPATH": ".:_gauntlet/py311"}
PY311 = """\
from pytorch_lightning.utilities.enums import LightningEnum

LightningEnum.__format__ = lambda self, spec: format(self.value, spec)
"""

# v1-inference.yaml, scaled down: 32-channel UNet (GroupNorm(32) needs multiples of 32), f8 KL autoencoder,
# CLIP text embeddings of width 32, 32x32 images (4x4 latents).
UNET = """\
    unet_config:
      target: ldm.modules.diffusionmodules.openaimodel.UNetModel
      params:
        image_size: 4
        in_channels: 4
        out_channels: 4
        model_channels: 32
        attention_resolutions: [ 1, 2 ]
        num_res_blocks: 1
        channel_mult: [ 1, 2 ]
        num_heads: 2
{extra}
"""
FIRST_STAGE = """\
    first_stage_config:
      target: ldm.models.autoencoder.AutoencoderKL
      params:
        embed_dim: 4
        monitor: val/rec_loss
        ddconfig:
          double_z: true
          z_channels: 4
          resolution: 32
          in_channels: 3
          out_ch: 3
          ch: 32
          ch_mult: [ 1, 1, 1, 1 ]
          num_res_blocks: 1
          attn_resolutions: []
          dropout: 0.0
        lossconfig:
          target: torch.nn.Identity
"""
TXT2IMG = """\
model:
  base_learning_rate: 1.0e-04
  target: ldm.models.diffusion.ddpm.LatentDiffusion
  params:
    linear_start: 0.00085
    linear_end: 0.0120
    num_timesteps_cond: 1
    log_every_t: 200
    timesteps: 1000
    first_stage_key: "jpg"
    cond_stage_key: "txt"
    image_size: 4
    channels: 4
    cond_stage_trainable: false
    conditioning_key: crossattn
    monitor: val/loss_simple_ema
    scale_factor: 0.18215
    use_ema: False

""" + UNET.format(extra="""\
        use_spatial_transformer: True
        transformer_depth: 1
        context_dim: 32
        use_checkpoint: True
        legacy: False""") + FIRST_STAGE + """\
    cond_stage_config:
      target: ldm.modules.encoders.modules.FrozenCLIPEmbedder
"""
# lsun_churches-ldm-kl-8.yaml, scaled down (no first-stage ckpt_path: a random autoencoder), on LSUNBase.
UNCOND = """\
model:
  base_learning_rate: 5.0e-5
  target: ldm.models.diffusion.ddpm.LatentDiffusion
  params:
    linear_start: 0.0015
    linear_end: 0.0155
    num_timesteps_cond: 1
    log_every_t: 200
    timesteps: 1000
    loss_type: l1
    first_stage_key: "image"
    cond_stage_key: "image"
    image_size: 4
    channels: 4
    cond_stage_trainable: False
    concat_mode: False
    scale_by_std: True
    monitor: 'val/loss_simple_ema'

""" + UNET.format(extra="""\
        use_scale_shift_norm: True
        resblock_updown: True""") + FIRST_STAGE + """\
    cond_stage_config: "__is_unconditional__"

data:
  target: main.DataModuleFromConfig
  params:
    batch_size: 2
    num_workers: 0
    wrap: False
    train:
      target: ldm.data.lsun.LSUNBase
      params:
        txt_file: _gauntlet/lsun/train.txt
        data_root: _gauntlet/lsun/images
        size: 32
    validation:
      target: ldm.data.lsun.LSUNBase
      params:
        txt_file: _gauntlet/lsun/val.txt
        data_root: _gauntlet/lsun/images
        size: 32
        flip_p: 0.0

lightning:
  callbacks:
    image_logger:
      target: main.ImageLogger
      params:
        batch_frequency: 1
        max_images: 1
        increase_log_steps: False
        log_images_kwargs:
          N: 1
          ddim_steps: 2
          plot_progressive_rows: False
  trainer:
    benchmark: True
    max_steps: 2
"""


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


def prepare(tree: Path) -> None:
    import json
    import os
    import sys

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

    # txt2img's safety checker (diffusers' StableDiffusionSafetyChecker, a CLIP vision tower) and its
    # feature extractor, tiny: 32 px crops, 8 px patches.
    def save_safety(folder):
        from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker

        torch.manual_seed(0)
        config = transformers.CLIPConfig(
            text_config=text_config.to_dict(),
            vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                               image_size=32, patch_size=8, projection_dim=16),
            projection_dim=16)
        StableDiffusionSafetyChecker(config).save_pretrained(folder)
        extractor = transformers.CLIPImageProcessor(size={"shortest_edge": 32},
                                                    crop_size={"height": 32, "width": 32})
        extractor.save_pretrained(folder)
        pre = Path(folder) / "preprocessor_config.json"
        data = json.loads(pre.read_text())
        data["feature_extractor_type"] = "CLIPFeatureExtractor"
        pre.write_text(json.dumps(data, indent=2))

    fake_hub_model(hf, "CompVis/stable-diffusion-safety-checker", save_safety)

    (work / "py311").mkdir(parents=True, exist_ok=True)
    (work / "py311" / "sitecustomize.py").write_text(PY311)
    (work / "txt2img.yaml").write_text(TXT2IMG)
    uncond = work / "uncond"
    uncond.mkdir(parents=True, exist_ok=True)
    (work / "uncond.yaml").write_text(UNCOND)
    # sample_diffusion.py reads LOGDIR/config.yaml beside LOGDIR/model.ckpt (the model zoo's layout)
    (uncond / "config.yaml").write_text(UNCOND)

    # img2img's input, and the LSUN-style folder main.py trains on (4 train, 2 validation images).
    write_images(work, 1, size=32, classes=("init",))
    images = write_images(work / "lsun" / "images", 6, size=32, class_folders=False)
    names = [p.name for p in images]
    (work / "lsun" / "train.txt").write_text("\n".join(names[:4]) + "\n")
    (work / "lsun" / "val.txt").write_text("\n".join(names[4:]) + "\n")

    # Checkpoints as a CUDA machine writes them ({"state_dict", "global_step"}), from the repository's own
    # model classes built from the configs above.
    from omegaconf import OmegaConf

    sys.path.insert(0, str(tree))
    try:
        from ldm.util import instantiate_from_config

        for config, path in ((work / "txt2img.yaml", work / "sd" / "model.ckpt"),
                             (work / "uncond.yaml", uncond / "model.ckpt")):
            torch.manual_seed(0)
            model = instantiate_from_config(OmegaConf.load(config).model)
            state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            save_cuda_checkpoint({"state_dict": state, "global_step": 0}, path)
    finally:
        sys.path.remove(str(tree))


# txt2img at 256 px: its invisible watermark refuses images under 256x256 (32x32 latents)
SD = f"--config {G}/txt2img.yaml --ckpt {G}/sd/model.ckpt --H 256 --W 256 --n_samples 1 --n_iter 1"

STEPS = [
    # the README's command: PLMS, guidance scale 7.5, autocast
    Step("txt2img-plms", f'python scripts/txt2img.py --prompt "a photograph of an astronaut riding a horse" --plms '
                         f"--ddim_steps 4 {SD} --outdir {G}/out/plms",
         outputs=[f"{G}/out/plms/samples/00000.png", f"{G}/out/plms/grid-0000.png"], timeout=300, env=ENV),
    Step("txt2img-ddim", f'python scripts/txt2img.py --prompt "the theme" --ddim_steps 4 --fixed_code '
                         f"--precision full {SD} --outdir {G}/out/ddim",
         outputs=[f"{G}/out/ddim/samples/00000.png"], timeout=300, env=ENV),
    Step("img2img", f'python scripts/img2img.py --prompt "A fantasy landscape, trending on artstation" '
                    f"--init-img {G}/init/init_0000.png --strength 0.5 --ddim_steps 4 --n_samples 1 --n_iter 1 "
                    f"--config {G}/txt2img.yaml --ckpt {G}/sd/model.ckpt --outdir {G}/out/img2img",
         outputs=[f"{G}/out/img2img/samples/00000.png", f"{G}/out/img2img/grid-0000.png"], timeout=300, env=ENV),
    Step("train", f"python main.py --base {G}/uncond.yaml -t --no-test --name uncond --logdir {G}/logs",
         outputs=[f"{G}/logs/*_uncond/checkpoints/last.ckpt", f"{G}/logs/*_uncond/images/train/*.png"],
         timeout=300, env=TRAIN_ENV),
    Step("sample_diffusion", f"python scripts/sample_diffusion.py -r {G}/uncond/model.ckpt -n 2 --batch_size 1 "
                             "-c 2 -e 0",
         outputs=[f"{G}/uncond/samples/00000000/*/img/sample_000000.png",
                  f"{G}/uncond/samples/00000000/*/numpy/*.npz"], timeout=300, env=ENV),
]
