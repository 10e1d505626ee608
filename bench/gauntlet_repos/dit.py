"""DiT: train.py under torchrun (1 and 2 processes, one tiny epoch of DiT-S/8 on a synthetic ImageFolder with a
tiny random VAE in an offline HF cache), then sample.py from train's checkpoint and sample_ddp.py (torchrun)
from a checkpoint written as on CUDA."""

from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint, write_images

G = "_gauntlet"
ENV = {"HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1"}
# train.py pickles its argparse Namespace into the checkpoint; torch >= 2.6 loads weights-only by default, which
# refuses it on any device (download.py predates that). This restores the load the repository was written for.
ENV_PICKLE = {**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


def prepare(tree: Path) -> None:
    import sys

    import torch
    from diffusers.models import AutoencoderKL

    work = tree / G
    # 2 classes x 1 image: one epoch is 1 step at global batch 2 (1 image a rank under 2 processes).
    write_images(work / "data", count=1, size=32)

    # A tiny random VAE with the real one's shape contract: 3 -> 4 latent channels, downsampling by 8.
    def save_vae(folder):
        torch.manual_seed(0)
        vae = AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1, norm_num_groups=2,
            block_out_channels=(4, 4, 4, 4),
            down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        )
        vae.save_pretrained(folder)

    for name in ("ema", "mse"):  # train.py and sample_ddp.py default to ema, sample.py to mse
        fake_hub_model(work / "hf", f"stabilityai/sd-vae-ft-{name}", save_vae)

    # A train.py-style checkpoint of DiT-S/8 (256 px -> 32 latent) as a CUDA machine writes it.
    sys.path.insert(0, str(tree))
    from models import DiT_models

    torch.manual_seed(0)
    model = DiT_models["DiT-S/8"](input_size=32, num_classes=1000)
    state = model.state_dict()
    save_cuda_checkpoint({"model": state, "ema": state}, work / "cuda_ckpt" / "0000001.pt")


TRAIN = ("torchrun --nnodes=1 --nproc_per_node={n} train.py --model DiT-S/8 --data-path _gauntlet/data "
         "--results-dir _gauntlet/{out} --image-size 256 --epochs 1 --global-batch-size 2 --num-workers 0 "
         "--log-every 1 --ckpt-every 1")

STEPS = [
    Step("train", TRAIN.format(n=1, out="results"),
         outputs=["_gauntlet/results/000-DiT-S-8/checkpoints/0000001.pt"], timeout=300, env=ENV),
    Step("ddp", TRAIN.format(n=2, out="results_ddp"),
         outputs=["_gauntlet/results_ddp/000-DiT-S-8/checkpoints/0000001.pt"], timeout=300, env=ENV),
    Step("sample", "python sample.py --model DiT-S/8 --image-size 256 --num-sampling-steps 2 "
         "--ckpt _gauntlet/results/000-DiT-S-8/checkpoints/0000001.pt",
         outputs=["sample.png"], timeout=300, env=ENV_PICKLE),
    Step("sample_ddp", "torchrun --nnodes=1 --nproc_per_node=1 sample_ddp.py --model DiT-S/8 --image-size 256 "
         "--num-sampling-steps 2 --per-proc-batch-size 1 --num-fid-samples 2 --sample-dir _gauntlet/samples "
         "--ckpt _gauntlet/cuda_ckpt/0000001.pt",
         outputs=["_gauntlet/samples/*.npz"], timeout=300, env=ENV),
]
