"""PixArt-alpha: train_scripts/train.py as the README launches it (``python -m torch.distributed.launch
--nproc_per_node=2``) on a tiny config derived from configs/pixart_config/PixArt_xl2_img256_SAM.py, once on
pre-extracted VAE latents + T5 features (the SAM config's load_vae_feat=True) and once on images through a tiny
VAE (load_vae_feat=False); then scripts/inference.py at 512 px with each of its three samplers (dpm-solver, iddpm,
sa-solver) from a checkpoint written as on CUDA, with a tiny random T5 encoder/tokenizer and a tiny random VAE.

Non-CUDA workarounds (the same on the original and the port):
- mmcv==1.7.0 is an sdist whose setup.py imports pkg_resources, which the latest setuptools that pip's build
  isolation fetches no longer has: prepare() builds it without isolation (setuptools 80.9 pinned) into
  _gauntlet/site, which the steps put on PYTHONPATH.
- train.py imports ``diffusion`` before it puts the repository root on sys.path, so the README's command works only
  with the root on PYTHONPATH: the steps put it there.
- scripts/inference.py hard-codes PixArt_XL_2 (600M parameters, caption_channels=4096); with
  GAUNTLET_PIXART_TINY=1 the sitecustomize in _gauntlet/site makes diffusion.model.nets.PixArt's PixArt_XL_2 a
  2-block, 64-wide model reading 32-wide T5 features (the same class, only smaller numbers).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

G = "_gauntlet"
SITE = f"{G}/site"
TINY = dict(depth=2, hidden_size=64, patch_size=2, num_heads=4, caption_channels=32)
T5_DIM = 32
TOKENS = 120

SITECUSTOMIZE = '''\
import os
import sys

if os.environ.get("GAUNTLET_PIXART_TINY"):
    import importlib.abc
    import importlib.machinery

    _TINY = %r

    class _TinyPixArt(importlib.abc.MetaPathFinder):
        """After diffusion.model.nets.PixArt runs, its PixArt_XL_2 builds the same class with tiny numbers."""

        def find_spec(self, name, path, target=None):
            if name != "diffusion.model.nets.PixArt":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None:
                return None
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                cls = module.PixArt

                def PixArt_XL_2(**kwargs):
                    return cls(**{**kwargs, **_TINY})

                module.PixArt_XL_2 = PixArt_XL_2

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _TinyPixArt())
''' % (TINY,)

CONFIG = f'''\
_base_ = ['../../configs/pixart_config/PixArt_xl2_img256_SAM.py']
data_root = '{G}/data'
data = dict(type='SAM', root='SA1B', image_list_txt=['part0.txt'], transform='default_train', load_vae_feat=%s)
vae_pretrained = '{G}/vae'
model = dict(_delete_=True, type='PixArt', **{TINY!r})
train_batch_size = 1
num_workers = 0
num_epochs = 1
log_interval = 1
save_model_epochs = 1
'''


def _mmcv(site: Path) -> None:
    import subprocess
    import sys

    if (site / "mmcv" / "__init__.py").is_file():
        return
    wheels = Path(sys.prefix) / "gauntlet-wheels"
    if not list(wheels.glob("mmcv-1.7.0-*.whl")):
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(wheels), "mmcv==1.7.0"], check=True)
    wheel = sorted(wheels.glob("mmcv-1.7.0-*.whl"))[0]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True)


def prepare(tree: Path) -> None:
    import sys
    import types

    import numpy as np
    import torch

    work = tree / G
    site = tree / SITE
    site.mkdir(parents=True, exist_ok=True)
    _mmcv(site)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)

    # Tiny configs through the repository's own config system (mmcv Config, _base_ = the README's SAM config).
    configs = work / "configs"
    configs.mkdir(parents=True, exist_ok=True)
    (configs / "tiny_sam_feat.py").write_text(CONFIG % "True")
    (configs / "tiny_sam_img.py").write_text(CONFIG % "False")

    # SAM data as diffusion/data/datasets/SA.py reads it: partition list, VAE mean/std latents (256 px -> 8x32x32),
    # T5 caption features with their attention mask (tools/extract_features.py's npz), and the images.
    gen = np.random.default_rng(0)
    root = work / "data" / "SA1B"
    names = ["sa_0", "sa_1"]
    (root / "partition").mkdir(parents=True, exist_ok=True)
    (root / "partition" / "part0.txt").write_text("\n".join(names) + "\n")
    feat = root / "img_vae_feature" / "train_vae_256" / "noflip"
    caps = root / "caption_feature_wmask"
    feat.mkdir(parents=True, exist_ok=True)
    caps.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        mean = gen.standard_normal((4, 32, 32)).astype(np.float32)
        std = np.abs(gen.standard_normal((4, 32, 32))).astype(np.float32) * 0.1
        np.save(feat / f"{name}.npy", np.concatenate([mean, std]))
        mask = np.zeros((1, TOKENS), dtype=np.int64)
        mask[0, : 7 + 5 * i] = 1
        np.savez_compressed(caps / f"{name}.npz",
                            caption_feature=gen.standard_normal((1, TOKENS, T5_DIM)).astype(np.float32),
                            attention_mask=mask)
    images = write_images(root / "images", count=2, size=64, suffix=".jpg", class_folders=False)
    for path, name in zip(sorted(images), names):
        path.rename(root / "images" / f"{name}.jpg")

    # A tiny random VAE with the real one's contract (3 -> 4 latent channels, /8).
    from diffusers.models import AutoencoderKL

    torch.manual_seed(0)
    AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1, norm_num_groups=2,
                  block_out_channels=(4, 4, 4, 4), down_block_types=("DownEncoderBlock2D",) * 4,
                  up_block_types=("UpDecoderBlock2D",) * 4).save_pretrained(work / "vae")

    # A tiny random T5 encoder and its SentencePiece tokenizer where T5Embedder(local_cache=True) looks.
    import sentencepiece as spm
    import transformers

    from _recipe import synthetic_text

    t5 = work / "t5" / "t5-v1_1-xxl"
    t5.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(synthetic_text().splitlines()), model_prefix=str(work / "t5" / "spiece"),
        vocab_size=64, model_type="unigram", character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
        minloglevel=2)
    tokenizer = transformers.T5Tokenizer(vocab_file=str(work / "t5" / "spiece.model"), extra_ids=0, legacy=True)
    tokenizer.save_pretrained(t5)
    transformers.set_seed(0)
    config = transformers.T5Config(vocab_size=len(tokenizer), d_model=T5_DIM, d_kv=8, num_heads=4, d_ff=64,
                                   num_layers=1, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    transformers.T5EncoderModel(config).save_pretrained(t5)

    # The prompts inference.py reads (one line, one image).
    (work / "prompts.txt").write_text("a small red cube on a wooden table\n")

    # A PixArt checkpoint of the tiny architecture as a CUDA machine writes it ({'state_dict': ...}).
    # xformers is a CUDA-only package, not installed: a stub lets the module be imported to build the weights.
    for mod in ("xformers", "xformers.ops"):
        sys.modules.setdefault(mod, types.ModuleType(mod))
    sys.path.insert(0, str(tree))
    sys.path.insert(0, str(site))
    from diffusion.model.nets.PixArt import PixArt

    torch.manual_seed(0)
    model = PixArt(input_size=64, lewei_scale=1, **TINY)
    save_cuda_checkpoint({"state_dict": model.state_dict()}, work / "ckpt" / "PixArt-XL-2-512x512.pth")


ENV = {"PYTHONPATH": f"{{tree}}/{SITE}:{{tree}}", "HF_HUB_OFFLINE": "1"}
ENV_TINY = {**ENV, "GAUNTLET_PIXART_TINY": "1"}

TRAIN = ("python -m torch.distributed.launch --nproc_per_node=2 --master_port={port} train_scripts/train.py "
         "_gauntlet/configs/{config}.py --work-dir _gauntlet/{out}")
INFER = ("python scripts/inference.py --image_size 512 --t5_path _gauntlet/t5 --tokenizer_path _gauntlet/vae "
         "--txt_file _gauntlet/prompts.txt --model_path _gauntlet/ckpt/PixArt-XL-2-512x512.pth --bs 1 "
         "--sampling_algo {algo} --step 2")

STEPS = [
    Step("train", TRAIN.format(port=29641, config="tiny_sam_feat", out="train_feat"),
         outputs=["_gauntlet/train_feat/checkpoints/epoch_1_step_1.pth"], timeout=600, env=ENV),
    Step("train_img", TRAIN.format(port=29642, config="tiny_sam_img", out="train_img"),
         outputs=["_gauntlet/train_img/checkpoints/epoch_1_step_1.pth"], timeout=600, env=ENV),
    Step("infer_dpm", INFER.format(algo="dpm-solver"), outputs=["_gauntlet/vis/*sampdpm-solver*/*.jpg"],
         timeout=400, env=ENV_TINY),
    Step("infer_iddpm", INFER.format(algo="iddpm"), outputs=["_gauntlet/vis/*sampiddpm*/*.jpg"],
         timeout=400, env=ENV_TINY),
    Step("infer_sa", INFER.format(algo="sa-solver"), outputs=["_gauntlet/vis/*sampsa-solver*/*.jpg"],
         timeout=400, env=ENV_TINY),
]
