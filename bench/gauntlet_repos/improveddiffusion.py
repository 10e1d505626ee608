"""improved-diffusion: trains a tiny UNet for 2 steps on synthetic 32x32 images, resumes for 2 more
from a checkpoint set (model, EMA, AdamW) written as on CUDA, samples 2 images from the EMA weights,
and trains 2 steps on 2 MPI ranks (`mpiexec -n 2`, as the README does; mpi4py + MPICH from pip).

The scripts import the ``improved_diffusion`` package, which the README installs with
``pip install -e .``; the steps put the tree on ``PYTHONPATH`` instead, so the recipe's venv is
shared by the original and the port. Training loops forever unless ``--lr_anneal_steps`` is set;
it then stops and saves ``model/ema/opt{step:06d}.pt`` under ``OPENAI_LOGDIR``.
"""
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

MODEL = ("--image_size 32 --num_channels 32 --num_res_blocks 1 --num_heads 1 "
         "--attention_resolutions 8 --diffusion_steps 10 --noise_schedule cosine")
TRAIN = "--data_dir _gauntlet/data --batch_size 2 --log_interval 1 --save_interval 100"


def _env(logdir: str) -> dict:
    return {"PYTHONPATH": ".", "OPENAI_LOGDIR": logdir}


def prepare(tree: Path) -> None:
    import sys

    import torch
    from torch.optim import AdamW

    gauntlet = tree / "_gauntlet"
    write_images(gauntlet / "data", 8, size=32, class_folders=False)

    # The checkpoint set a CUDA run of the same model leaves at step 2 (what --resume_checkpoint reads).
    sys.path.insert(0, str(tree))
    try:
        from improved_diffusion.script_util import create_model_and_diffusion, model_and_diffusion_defaults
    finally:
        sys.path.remove(str(tree))
    options = model_and_diffusion_defaults()
    options.update(image_size=32, num_channels=32, num_res_blocks=1, num_heads=1,
                   attention_resolutions="8", diffusion_steps=10, noise_schedule="cosine")
    torch.manual_seed(0)
    model, _ = create_model_and_diffusion(**options)
    opt = AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    cuda = gauntlet / "cuda"
    save_cuda_checkpoint(model.state_dict(), cuda / "model000002.pt")
    save_cuda_checkpoint(model.state_dict(), cuda / "ema_0.9999_000002.pt")
    save_cuda_checkpoint(opt.state_dict(), cuda / "opt000002.pt")


STEPS = [
    Step("train", f"python scripts/image_train.py {TRAIN} {MODEL} --lr_anneal_steps 2",
         outputs=["_gauntlet/log/train/model000002.pt", "_gauntlet/log/train/ema_0.9999_000002.pt",
                  "_gauntlet/log/train/opt000002.pt"],
         timeout=300, env=_env("_gauntlet/log/train")),
    Step("resume", f"python scripts/image_train.py {TRAIN} {MODEL} --lr_anneal_steps 4 "
                   "--resume_checkpoint _gauntlet/cuda/model000002.pt",
         outputs=["_gauntlet/log/resume/model000004.pt", "_gauntlet/log/resume/ema_0.9999_000004.pt"],
         timeout=300, env=_env("_gauntlet/log/resume")),
    Step("sample", f"python scripts/image_sample.py {MODEL} --num_samples 2 --batch_size 2 "
                   "--model_path _gauntlet/log/train/ema_0.9999_000002.pt",
         outputs=["_gauntlet/log/sample/samples_2x32x32x3.npz"],
         timeout=300, env=_env("_gauntlet/log/sample")),
    Step("mpi", f"mpiexec -n 2 python scripts/image_train.py {TRAIN} {MODEL} --lr_anneal_steps 2",
         outputs=["_gauntlet/log/mpi/model000002.pt", "_gauntlet/log/mpi/opt000002.pt"],
         timeout=300, env=_env("_gauntlet/log/mpi")),
]
