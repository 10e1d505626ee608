"""DINO: main_dino.py self-distillation of a vit_tiny/16 for one epoch on a synthetic ImageFolder under torchrun
(2 processes), then launched naively (`python main_dino.py`, the single-process path of init_distributed_mode),
a resume from a checkpoint written as on CUDA (fp16 scaler state included), and eval_linear.py on CUDA weights."""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

G = "_gauntlet"
# main_dino.py's argument parser calls torch.hub.list("facebookresearch/xcit:main") (a download) for its --arch
# choices; prepare lays out that hub repository's entry points offline under TORCH_HOME.
HUB = {"TORCH_HOME": "{tree}/_gauntlet/torch_home"}
XCIT = ["xcit_nano_12_p16", "xcit_tiny_12_p16", "xcit_small_12_p16", "xcit_medium_24_p16", "xcit_large_24_p16",
        "xcit_nano_12_p8", "xcit_tiny_12_p8", "xcit_small_12_p8", "xcit_medium_24_p8", "xcit_large_24_p8"]
# main_dino.py and eval_linear.py pickle their argparse Namespace into checkpoints, and torch.load them without
# weights_only; torch >= 2.6 refuses that on every device (the repository predates it). This restores the load
# the repository was written for; it selects nothing about the device.
PICKLE = {**HUB, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
OUT_DIM = 1024
FLAGS = (f"--arch vit_tiny --patch_size 16 --out_dim {OUT_DIM} --local_crops_number 2 --warmup_epochs 0 "
         "--batch_size_per_gpu 2 --num_workers 0 --saveckp_freq 1 --data_path _gauntlet/data/train")


def prepare(tree: Path) -> None:
    import os
    import sys

    import torch

    work = tree / G
    xcit = work / "torch_home" / "hub" / "facebookresearch_xcit_main"
    xcit.mkdir(parents=True, exist_ok=True)
    (xcit / "hubconf.py").write_text('dependencies = ["torch"]\n\n' + "".join(
        f"def {name}(pretrained=False, **kwargs):\n    raise NotImplementedError('gauntlet: offline stub')\n\n\n"
        for name in XCIT))
    os.environ["TORCH_HOME"] = str(work / "torch_home")  # main_dino.get_args_parser() below lists it
    # 2 classes x 2 images to train on: one step a rank under 2 processes, two steps in one.
    write_images(work / "data" / "train", count=2, size=32)
    write_images(work / "data" / "val", count=1, size=32, seed=1)
    (work / "linear").mkdir(parents=True, exist_ok=True)  # eval_linear.py writes there without making it

    # A DINO checkpoint after epoch 1 of 2, as main_dino.py writes it on a CUDA machine.
    sys.path.insert(0, str(tree))
    import main_dino
    import utils
    import vision_transformer as vits

    torch.manual_seed(0)
    args = main_dino.get_args_parser().parse_args(
        FLAGS.split() + ["--epochs", "2", "--output_dir", str(work / "resume")])

    def network():
        backbone = vits.vit_tiny(patch_size=16, drop_path_rate=0.1)
        return utils.MultiCropWrapper(backbone, vits.DINOHead(backbone.embed_dim, OUT_DIM))

    student, teacher = network(), network()
    teacher.load_state_dict(student.state_dict())
    optimizer = torch.optim.AdamW(utils.get_params_groups(student))
    for p in student.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # Adam moments exist, as after a real epoch
    dino_loss = main_dino.DINOLoss(OUT_DIM, 4, 0.04, 0.04, 0, 2)
    checkpoint = {
        "student": {"module." + k: v for k, v in student.state_dict().items()},  # saved from the DDP wrapper
        "teacher": teacher.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": 1,
        "args": args,
        "dino_loss": dino_loss.state_dict(),
        "fp16_scaler": {"scale": 32768.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                        "_growth_tracker": 3},
    }
    save_cuda_checkpoint(checkpoint, work / "resume" / "checkpoint.pth")
    save_cuda_checkpoint(checkpoint, work / "cuda" / "checkpoint.pth")


STEPS = [
    # The README's launch (python -m torch.distributed.launch, which now passes --local-rank that main_dino.py's
    # parser rejects); torchrun is its replacement and sets the same environment.
    Step("train_ddp", f"torchrun --nproc_per_node=2 main_dino.py {FLAGS} --epochs 1 --output_dir _gauntlet/ddp",
         outputs=["_gauntlet/ddp/checkpoint.pth", "_gauntlet/ddp/log.txt"], timeout=300, env=HUB),
    # Launched naively: init_distributed_mode's `elif torch.cuda.is_available()` branch, else sys.exit(1).
    Step("train", f"python main_dino.py {FLAGS} --epochs 1 --output_dir _gauntlet/single",
         outputs=["_gauntlet/single/checkpoint.pth", "_gauntlet/single/log.txt"], timeout=300, env=HUB),
    # Resumes epoch 1 of 2 from the CUDA checkpoint (student, teacher, optimizer, dino_loss, fp16_scaler).
    Step("resume", f"python main_dino.py {FLAGS} --epochs 2 --output_dir _gauntlet/resume",
         outputs=["_gauntlet/resume/checkpoint0001.pth"], timeout=300, env=PICKLE),
    Step("eval_linear", "torchrun --nproc_per_node=1 eval_linear.py --arch vit_tiny --patch_size 16 "
         "--pretrained_weights _gauntlet/cuda/checkpoint.pth --checkpoint_key teacher --data_path _gauntlet/data "
         "--num_labels 2 --epochs 1 --batch_size_per_gpu 2 --num_workers 0 --output_dir _gauntlet/linear",
         outputs=["_gauntlet/linear/checkpoint.pth.tar"], timeout=300, env=PICKLE),
]
