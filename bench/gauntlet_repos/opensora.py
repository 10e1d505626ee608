"""Open-Sora 2.0 (hpcaitech/Open-Sora): the README's text-to-video command
``torchrun --nproc_per_node 1 --standalone scripts/diffusion/inference.py configs/diffusion/inference/256px.py
--prompt "raining, sea"`` and docs/train.md's ``torchrun --nproc_per_node N scripts/diffusion/train.py CONFIG
--dataset.data-path CSV`` (the demo config, 2 processes), on tiny random models and a tiny synthetic video dataset.

The configs are mmengine Python configs with ``_base_`` inheritance: prepare() writes two small configs under
``_gauntlet/configs`` that inherit the repository's own (inference/256px.py, train/demo.py) and override only sizes
and counts (resolution 64px (the resolution name is free-form, "Npx"), the MMDiT's width and depth, the Hunyuan VAE's channels, text lengths, frames, steps, buckets, workers,
the output folders); nothing in them selects a device. The weights live where the configs look for them (README:
``./ckpts``): a tiny random MMDiT (Open_Sora_v2.safetensors) and Hunyuan VAE (hunyuan_vae.safetensors) written from
the repository's own classes, a tiny T5 encoder (``ckpts/google/t5-v1_1-xxl``, slow SentencePiece tokenizer) and
CLIP text model (``ckpts/openai/clip-vit-large-patch14``; the path must contain "openai"); the training configs'
hub names are pointed at the same folders. The training data: two 8-frame 64 px mp4 clips and the csv docs/train.md
describes (path, text, num_frames, height, width, aspect_ratio, resolution, fps).

Installation (requirements.txt pins torch 2.4, colossalai >= 0.4.4 pins torch <= 2.5.1): prepare() installs with pip
``--no-deps`` colossalai 0.4.9 (its sdist, BUILD_EXT unset: no kernels built), mmengine 0.10.7, liger-kernel 0.5.2
(whose triton, about 1 GB installed, is left out: no macOS build; on Linux pip would install it), galore-torch (which
colossalai's optimizer package imports) and torchvision 0.24.1 (0.28, the one that imports beside torch 2.13, no
longer has torchvision.io.video, which opensora/datasets/read_video.py imports; its C ops, built for CUDA torch 2.9,
are disabled as the gauntlet does for 0.28). flash-attn and xformers are not installable here (CUDA builds). Two
stand-in modules on PYTHONPATH: ``bitsandbytes`` (colossalai's GaLore optimizers import
bitsandbytes.optim.optimizer at module top; the wheel is 240 MB of CUDA libraries and nothing here calls it) and
``tensornvme`` (docs/train.md installs it from git with cmake; opensora/utils/ckpt.py imports AsyncFileWriter at
module top, used only with async_io=True, which the configs leave False).
"""
from pathlib import Path

from _recipe import Step

G = "_gauntlet"
SITE = f"{G}/site"
TEXT_DIM = 32

# pip --no-deps pins (see the docstring)
NO_DEPS = ["colossalai==0.4.9", "mmengine==0.10.7", "liger-kernel==0.5.2", "galore-torch==1.0",
           "torchvision==0.24.1"]

MMDIT_TINY = dict(vec_in_dim=TEXT_DIM, context_in_dim=TEXT_DIM, hidden_size=64, num_heads=2, depth=1,
                  depth_single_blocks=1, axes_dim=[8, 12, 12])
VAE_TINY = dict(block_out_channels=(32, 32, 32, 32), layers_per_block=1, norm_num_groups=8)

INFER_CONFIG = f'''\
# The gauntlet's: configs/diffusion/inference/256px.py with tiny sizes (README: text-to-video, 256px)
_base_ = ["../../configs/diffusion/inference/256px.py"]
save_dir = "{G}/samples"
num_workers = 0
sampling_option = dict(resolution="64px", aspect_ratio="1:1", num_frames=5, num_steps=2)
model = dict({", ".join(f"{k}={v!r}" for k, v in MMDIT_TINY.items())})
ae = dict({", ".join(f"{k}={v!r}" for k, v in VAE_TINY.items())})
t5 = dict(max_length=16)
clip = dict(max_length=16)
'''

TRAIN_CONFIG = f'''\
# The gauntlet's: configs/diffusion/train/demo.py (docs/train.md's debugging config) with tiny sizes
_base_ = ["../../configs/diffusion/train/demo.py"]
bucket_config = {{"_delete_": True, "64px": {{5: (1.0, 1)}}}}
model = dict({", ".join(f"{k}={v!r}" for k, v in MMDIT_TINY.items())})
ae = dict({", ".join(f"{k}={v!r}" for k, v in VAE_TINY.items())})
t5 = dict(from_pretrained="./ckpts/google/t5-v1_1-xxl", cache_dir=None, max_length=16)
clip = dict(from_pretrained="./ckpts/openai/clip-vit-large-patch14", cache_dir=None, max_length=16)
num_workers = 0
prefetch_factor = None
num_bucket_build_workers = 1
pin_memory_cache_pre_alloc_numels = None
outputs = "{G}/outputs"
epochs = 1
log_every = 1
ckpt_every = 1
'''

STUBS = {
    "bitsandbytes/__init__.py": '"""The gauntlet\'s stand-in: colossalai\'s GaLore optimizers import bitsandbytes at module top."""\n'
                                '__version__ = "0.0.0"\n',
    "bitsandbytes/optim/__init__.py": "",
    "bitsandbytes/optim/optimizer.py": (
        "class Optimizer2State:  # stand-in base class: no GaLore 8-bit optimizer is built by Open-Sora\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        raise RuntimeError('bitsandbytes stand-in: not installed in the gauntlet environment')\n"),
    "tensornvme/__init__.py": '"""The gauntlet\'s stand-in for TensorNVMe (git-only, cmake/libaio build)."""\n',
    "tensornvme/async_file_io.py": (
        "class AsyncFileWriter:  # used only with async_io=True, which the configs leave False\n"
        "    def __init__(self, *args, **kwargs):\n"
        "        raise RuntimeError('tensornvme stand-in: async checkpoint I/O is not installed here')\n"),
}

# Build the tiny MMDiT and Hunyuan VAE from the repository's own classes and save them as safetensors. In a child
# process with throwaway stand-ins for flash_attn / liger_kernel (imported at module top by opensora.models.mmdit,
# never called while a model is only built): prepare() runs on the unported original too, where they are missing.
WRITE_WEIGHTS = """\
import importlib.machinery, json, sys, types
spec = json.loads(sys.argv[1])

def stub(name, **attrs):
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__path__ = []
    module.__dict__.update(attrs)
    sys.modules[name] = module

for name in ("flash_attn", "flash_attn.flash_attn_interface", "liger_kernel", "liger_kernel.ops",
             "liger_kernel.ops.rope", "liger_kernel.ops.rms_norm"):
    if name.split(".")[0] in ("flash_attn", "liger_kernel"):
        stub(name, flash_attn_func=None, _flash_attn_forward=None, _flash_attn_backward=None,
             LigerRopeFunction=None, LigerRMSNormFunction=None)
import torch
from safetensors.torch import save_file
from opensora.models.mmdit.model import Flux
from opensora.models.hunyuan_vae.autoencoder_kl_causal_3d import CausalVAE3D_HUNYUAN

torch.manual_seed(0)
mmdit = dict(guidance_embed=False, fused_qkv=False, use_liger_rope=True, in_channels=64, mlp_ratio=4.0, theta=10_000,
             qkv_bias=True, cond_embed=True, **spec["mmdit"])
model = Flux(from_pretrained=None, device_map="cpu", torch_dtype=torch.bfloat16, **mmdit)
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, spec["out"] + "/Open_Sora_v2.safetensors")
torch.manual_seed(0)
vae = dict(in_channels=3, out_channels=3, latent_channels=16, use_spatial_tiling=True, use_temporal_tiling=False)
vae.update(spec["vae"])
vae["block_out_channels"] = tuple(vae["block_out_channels"])
ae = CausalVAE3D_HUNYUAN(from_pretrained=None, device_map="cpu", torch_dtype=torch.bfloat16, **vae)
save_file({k: v.contiguous() for k, v in ae.state_dict().items()}, spec["out"] + "/hunyuan_vae.safetensors")
"""


def _install(python: str) -> None:
    import importlib.metadata
    import subprocess

    wanted = {pin.split("==")[0]: pin.split("==")[1] for pin in NO_DEPS}
    missing = []
    for name, version in wanted.items():
        try:
            if importlib.metadata.version(name).split("+")[0] != version:
                missing.append(f"{name}=={version}")
        except importlib.metadata.PackageNotFoundError:
            missing.append(f"{name}=={version}")
    if missing:
        subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", *missing], check=True)
    import sysconfig

    meta = Path(sysconfig.get_paths()["purelib"]) / "torchvision" / "_meta_registrations.py"
    if "gauntlet" not in meta.read_text():
        meta.write_text("# gauntlet: torchvision 0.24.1's C ops are built for CUDA torch 2.9 and can't load here\n")


def _text_encoders(ckpts: Path) -> None:
    import json

    import sentencepiece as spm
    import torch
    import transformers
    from transformers.models.clip.tokenization_clip import bytes_to_unicode

    from _recipe import synthetic_text

    torch.manual_seed(0)
    text = synthetic_text(3000)
    t5 = ckpts / "google" / "t5-v1_1-xxl"
    if not (t5 / "config.json").is_file():
        prefix = ckpts.parent / G / "spm-t5" / "spiece"
        prefix.parent.mkdir(parents=True, exist_ok=True)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text.splitlines()), model_prefix=str(prefix), vocab_size=64, model_type="unigram",
            character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
        tokenizer = transformers.T5Tokenizer(vocab_file=str(prefix) + ".model", legacy=True)
        tokenizer.save_pretrained(t5)
        config = transformers.T5Config(vocab_size=len(tokenizer), d_model=TEXT_DIM, d_kv=16, d_ff=64, num_layers=1,
                                       num_heads=2, feed_forward_proj="gated-gelu", is_encoder_decoder=False,
                                       tie_word_embeddings=False)
        transformers.T5EncoderModel(config).save_pretrained(t5)
    clip = ckpts / "openai" / "clip-vit-large-patch14"
    if not (clip / "config.json").is_file():
        clip.mkdir(parents=True, exist_ok=True)
        chars = list(bytes_to_unicode().values())
        vocab = {}
        for c in chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]:
            vocab.setdefault(c, len(vocab))
        (clip / "vocab.json").write_text(json.dumps(vocab))
        (clip / "merges.txt").write_text("#version: 0.2\n")
        tokenizer = transformers.CLIPTokenizer(str(clip / "vocab.json"), str(clip / "merges.txt"))
        tokenizer.save_pretrained(clip)
        config = transformers.CLIPTextConfig(
            vocab_size=len(vocab), hidden_size=TEXT_DIM, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, max_position_embeddings=77, bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=vocab["<|endoftext|>"], pad_token_id=vocab["<|endoftext|>"], projection_dim=TEXT_DIM)
        transformers.CLIPTextModel(config).save_pretrained(clip)


def _videos(folder: Path) -> Path:
    import av
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    rows = ["path,text,num_frames,height,width,aspect_ratio,resolution,fps"]
    for i in range(2):
        path = folder / f"clip_{i}.mp4"
        container = av.open(str(path), "w")
        stream = container.add_stream("h264", rate=24)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        for _ in range(8):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        container.close()
        rows.append(f"{path.resolve()},a calm sea under the rain number {i},8,64,64,1.0,4096,24")
    csv = folder / "train.csv"
    csv.write_text("\n".join(rows) + "\n")
    return csv


def prepare(tree: Path) -> None:
    import json
    import subprocess
    import sys

    _install(sys.executable)
    work = tree / G
    for rel, text in STUBS.items():
        (tree / SITE / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / SITE / rel).write_text(text)
    (work / "configs").mkdir(parents=True, exist_ok=True)
    (work / "configs" / "inference_256px_tiny.py").write_text(INFER_CONFIG)
    (work / "configs" / "train_demo_tiny.py").write_text(TRAIN_CONFIG)
    ckpts = tree / "ckpts"
    ckpts.mkdir(exist_ok=True)
    _text_encoders(ckpts)
    _videos(work / "data")
    import os

    env = dict(os.environ, PYTHONPATH=f"{tree}:{tree / SITE}")
    subprocess.run([sys.executable, "-c", WRITE_WEIGHTS, json.dumps(
        {"mmdit": MMDIT_TINY, "vae": VAE_TINY, "out": str(ckpts.resolve())})], cwd=tree, env=env, check=True)


ENV = {"PYTHONPATH": f"{{tree}}:{{tree}}/{SITE}", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}

STEPS = [
    # README, Text-to-Video: torchrun --nproc_per_node 1 --standalone scripts/diffusion/inference.py
    # configs/diffusion/inference/256px.py --prompt "raining, sea" (the tiny config inherits 256px.py)
    Step("t2v-256px", "torchrun --nproc_per_node 1 --standalone scripts/diffusion/inference.py "
                      f"{G}/configs/inference_256px_tiny.py --prompt \"raining, sea\"",
         outputs=[f"{G}/samples/video_64px/*.mp4"], timeout=900, env=ENV),
    # docs/train.md: torchrun --nproc_per_node 8 scripts/diffusion/train.py [config] --dataset.data-path [csv]
    # (demo.py, "a demo config with small batch size for debugging"), on 2 processes
    Step("train-demo", "torchrun --nproc_per_node 2 --standalone scripts/diffusion/train.py "
                       f"{G}/configs/train_demo_tiny.py --dataset.data-path {G}/data/train.csv",
         outputs=[f"{G}/outputs/*/epoch0-global_step1"], timeout=900, env=ENV),
]
