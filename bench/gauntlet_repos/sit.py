"""SiT: train.py under torchrun (1 process sampling in the loop, and 2 processes with the README's Linear/noise
interpolant), one tiny epoch of SiT-S/8 on a synthetic ImageFolder with a tiny random VAE in an offline HF cache;
then sample.py (ODE and SDE) and sample_ddp.py (ODE under 2-process torchrun, ODE --likelihood, SDE) from a custom
checkpoint written as on CUDA."""

from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint, write_images

G = "_gauntlet"
ENV = {"HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
# train.py reads os.environ["ENTITY"] / ["PROJECT"] on rank 0 even without --wandb (the README exports them).
ENV_TRAIN = {**ENV, "ENTITY": "gauntlet", "PROJECT": "gauntlet"}
CKPT = "_gauntlet/cuda_ckpt/0000001.pt"


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

    # A custom SiT-S/8 checkpoint (256 px -> 32 latent) in train.py's layout, as a CUDA machine writes it. The
    # samplers build the model with learn_sigma=False for any --ckpt, so this one is too; the zero-initialised
    # output layers get small random weights so the samplers integrate a non-trivial drift.
    sys.path.insert(0, str(tree))
    from models import SiT_models

    torch.manual_seed(0)
    model = SiT_models["SiT-S/8"](input_size=32, num_classes=1000, learn_sigma=False)
    with torch.no_grad():
        for p in model.final_layer.parameters():
            p.normal_(0, 0.02)
    state = model.state_dict()
    save_cuda_checkpoint({"model": state, "ema": state}, work / "cuda_ckpt" / "0000001.pt")


TRAIN = ("torchrun --nnodes=1 --nproc_per_node={n} train.py --model SiT-S/8 --data-path _gauntlet/data "
         "--results-dir _gauntlet/{out} --image-size 256 --epochs 1 --global-batch-size 2 --num-workers 0 "
         "--log-every 1 --ckpt-every 1 {extra}")
SAMPLE_DDP = ("torchrun --nnodes=1 --nproc_per_node={n} sample_ddp.py {mode} --model SiT-S/8 --image-size 256 "
              "--num-sampling-steps 4 --per-proc-batch-size 1 --num-fid-samples 2 --sample-dir _gauntlet/{out} "
              f"--ckpt {CKPT} {{extra}}")

STEPS = [
    Step("train", TRAIN.format(n=1, out="results", extra="--sample-every 1"),
         outputs=["_gauntlet/results/000-SiT-S-8-Linear-velocity-None/checkpoints/0000001.pt"],
         timeout=300, env=ENV_TRAIN),
    Step("ddp", TRAIN.format(n=2, out="results_ddp", extra="--path-type Linear --prediction noise"),
         outputs=["_gauntlet/results_ddp/000-SiT-S-8-Linear-noise-None/checkpoints/0000001.pt"],
         timeout=300, env=ENV_TRAIN),
    Step("sample_ode", f"python sample.py ODE --model SiT-S/8 --image-size 256 --num-sampling-steps 4 --seed 1 "
         f"--ckpt {CKPT}", outputs=["sample.png"], timeout=300, env=ENV),
    Step("sample_sde", f"rm -f sample.png && python sample.py SDE --model SiT-S/8 --image-size 256 "
         f"--num-sampling-steps 4 --ckpt {CKPT}", outputs=["sample.png"], timeout=300, env=ENV),
    Step("sample_ddp", SAMPLE_DDP.format(n=2, mode="ODE", out="samples", extra=""),
         outputs=["_gauntlet/samples/*.npz"], timeout=300, env=ENV),
    # --likelihood draws a fresh Hutchinson probe at every drift evaluation, so dopri5's error estimate never settles
    # on a random model (the first recipe's step ran past 300 s on the CPU): the fixed-grid Euler of torchdiffeq.
    Step("likelihood", SAMPLE_DDP.format(n=1, mode="ODE", out="samples_ll",
                                         extra="--likelihood --sampling-method euler"),
         outputs=["_gauntlet/samples_ll/*.npz"], timeout=300, env=ENV),
    Step("sample_ddp_sde", SAMPLE_DDP.format(n=1, mode="SDE", out="samples_sde", extra=""),
         outputs=["_gauntlet/samples_sde/*.npz"], timeout=300, env=ENV),
]
