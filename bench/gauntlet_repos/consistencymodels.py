"""consistency_models: EDM-trains a tiny UNet (with its flash-attention block) for 2 steps on synthetic 32x32
images, resumes 2 more from a checkpoint set written as on CUDA, consistency-trains (CT, l2) for 2 steps,
samples 2 images in one step from the CT EMA weights, and EDM-trains 2 steps on 2 MPI ranks
(`mpiexec -n 2`, as scripts/launch.sh does; mpi4py + MPICH from pip).

The scripts import the ``cm`` package, which the README installs with ``pip install -e .``; the steps put
the tree on ``PYTHONPATH`` instead. Training stops at ``--lr_anneal_steps`` (and, for cm_train,
``--total_training_steps``) and writes ``model/ema/opt{step:06d}.pt`` under ``OPENAI_LOGDIR``.
"""
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

SIZES = dict(image_size=32, num_channels=32, channel_mult="1,2", num_res_blocks=1, num_head_channels=32,
             attention_resolutions="16", dropout=0.0, use_scale_shift_norm=True, use_fp16=True)
MODEL = " ".join(f"--{k} {v}" for k, v in SIZES.items())
DATA = "--data_dir _gauntlet/data --log_interval 1 --save_interval 100"
CT = ("--training_mode consistency_training --target_ema_mode adaptive --start_ema 0.95 "
      "--scale_mode progressive --start_scales 2 --end_scales 10 --total_training_steps 2 --loss_norm l2 "
      "--schedule_sampler uniform --weight_schedule uniform")


def _env(logdir: str) -> dict:
    # TORCH_HOME: the torch-hub cache prepare() fills with stand-ins for the LPIPS and VGG16 downloads.
    return {"PYTHONPATH": ".", "OPENAI_LOGDIR": logdir, "TORCH_HOME": "_gauntlet/torch"}


def _fake_lpips_downloads(hub: Path) -> None:
    """KarrasDenoiser always builds piq's LPIPS, which downloads its layer weights and torchvision's VGG16
    weights through torch.hub: lay both out in the hub cache, as constants (stride-0 tensors keep the
    VGG16 file tiny; LPIPS is only evaluated with --loss_norm lpips, which the recipe does not use)."""
    import torch
    from torchvision.models import VGG16_Weights, vgg16

    checkpoints = hub / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in vgg16().state_dict().items()}
    torch.save({k: torch.full((), 0.01).expand(shape) for k, shape in shapes.items()},
               checkpoints / VGG16_Weights.IMAGENET1K_V1.url.rsplit("/", 1)[1])
    torch.save([torch.full((1, c, 1, 1), 0.1) for c in (64, 128, 256, 512, 512)],
               checkpoints / "lpips_weights.pt")


def prepare(tree: Path) -> None:
    import os
    import sys
    import types

    import torch
    import torch.nn as nn
    from torch.optim import RAdam

    gauntlet = tree / "_gauntlet"
    write_images(gauntlet / "data", 8, size=32, class_folders=False)
    _fake_lpips_downloads(gauntlet / "torch" / "hub")
    os.environ["TORCH_HOME"] = str(gauntlet / "torch")

    # The checkpoint set an EDM run of the same model leaves on a CUDA box at step 2. Building the model
    # here needs flash_attn's FlashAttention, which has no parameters: a stand-in module is enough.
    stub = types.ModuleType("flash_attn.flash_attention")
    stub.FlashAttention = type("FlashAttention", (nn.Module,), {"__init__": lambda self, **kw: nn.Module.__init__(self)})
    saved = {name: sys.modules.get(name) for name in ("flash_attn", "flash_attn.flash_attention")}
    sys.modules.update({"flash_attn": types.ModuleType("flash_attn"), "flash_attn.flash_attention": stub})
    sys.path.insert(0, str(tree))
    try:
        from cm.fp16_util import MixedPrecisionTrainer
        from cm.script_util import create_model_and_diffusion, model_and_diffusion_defaults

        options = model_and_diffusion_defaults()
        options.update(SIZES)
        torch.manual_seed(0)
        model, _ = create_model_and_diffusion(**options)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        # The optimizer holds the flat fp32 master parameters, as TrainLoop's with --use_fp16 True.
        trainer = MixedPrecisionTrainer(model=model, use_fp16=True)
    finally:
        sys.path.remove(str(tree))
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    opt = RAdam(trainer.master_params, lr=1e-4)
    for p in trainer.master_params:
        p.grad = torch.zeros_like(p)
    opt.step()
    cuda = gauntlet / "cuda"
    save_cuda_checkpoint(state, cuda / "model000002.pt")
    save_cuda_checkpoint(state, cuda / "ema_0.9999_000002.pt")
    save_cuda_checkpoint(opt.state_dict(), cuda / "opt000002.pt")


STEPS = [
    Step("edm", f"python scripts/edm_train.py {DATA} {MODEL} --global_batch_size 2 --lr_anneal_steps 2 "
                "--schedule_sampler lognormal --weight_schedule karras",
         outputs=["_gauntlet/log/edm/model000002.pt", "_gauntlet/log/edm/ema_0.9999_000002.pt",
                  "_gauntlet/log/edm/opt000002.pt"],
         timeout=300, env=_env("_gauntlet/log/edm")),
    Step("resume", f"python scripts/edm_train.py {DATA} {MODEL} --global_batch_size 2 --lr_anneal_steps 2 "
                   "--schedule_sampler lognormal --weight_schedule karras "
                   "--resume_checkpoint _gauntlet/cuda/model000002.pt",
         outputs=["_gauntlet/log/resume/model000004.pt", "_gauntlet/log/resume/ema_0.9999_000004.pt"],
         timeout=300, env=_env("_gauntlet/log/resume")),
    Step("ct", f"python scripts/cm_train.py {DATA} {MODEL} {CT} --global_batch_size 2 --lr_anneal_steps 2",
         outputs=["_gauntlet/log/ct/model000002.pt", "_gauntlet/log/ct/ema_0.9999_000002.pt",
                  "_gauntlet/log/ct/target_model000002.pt"],
         timeout=300, env=_env("_gauntlet/log/ct")),
    Step("sample", f"python scripts/image_sample.py {MODEL} --training_mode consistency_training "
                   "--sampler onestep --weight_schedule uniform --num_samples 2 --batch_size 2 "
                   "--model_path _gauntlet/log/ct/ema_0.9999_000002.pt",
         outputs=["_gauntlet/log/sample/samples_2x32x32x3.npz"],
         timeout=300, env=_env("_gauntlet/log/sample")),
    Step("mpi", f"mpiexec -n 2 python scripts/edm_train.py {DATA} {MODEL} --global_batch_size 4 "
                "--lr_anneal_steps 2 --schedule_sampler lognormal --weight_schedule karras",
         outputs=["_gauntlet/log/mpi/model000002.pt", "_gauntlet/log/mpi/opt000002.pt"],
         timeout=300, env=_env("_gauntlet/log/mpi")),
]
