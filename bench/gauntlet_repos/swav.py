"""facebookresearch/swav: the README's commands, tiny.

- ``train_swav``: the README's single-node SwAV pretraining (``python -m torch.distributed.launch --nproc_per_node=8
  main_swav.py --data_path ... --epochs 400 --base_lr 0.6 --final_lr 0.0006 --warmup_epochs 0 --batch_size 32
  --size_crops 224 96 --nmb_crops 2 6 --min_scale_crops 0.14 0.05 --max_scale_crops 1. 0.14 --use_fp16 true
  --freeze_prototypes_niters 5005 --queue_length 3840 --epoch_queue_starts 15``) under a 2-process torchrun, scaled
  down by the script's own flags: the repository's resnet50 (its smallest variant) with a narrow head (--hidden_mlp,
  --feat_dim, --nmb_prototypes), 2 + 2 crops of 32 and 16 pixels, 2 images a rank, 2 epochs of 2 iterations on a
  synthetic 2-class ImageFolder, the queue switched on from epoch 1, mixed precision as the README asks
  (--use_fp16 true), default --sync_bn pytorch.
- ``resume_swav``: the same command resuming epoch 3 of 3 from a checkpoint and per-rank queues written as
  main_swav.py writes them on a CUDA machine (model, LARC/SGD state, the apex amp loss-scaler state, the queue
  tensors; every storage tagged cuda:0): the queue is full, so the loss goes through the queue branch.
- ``eval_linear``: the README's linear evaluation (``python -m torch.distributed.launch --nproc_per_node=8
  eval_linear.py --data_path ... --pretrained ...``) under a 2-process torchrun on train_swav's checkpoint, one epoch.
- ``train_deepclusterv2``: main_deepclusterv2.py (scripts/deepclusterv2_*.sh, the same launcher) with two
  prototype heads of 3 centroids (k-means over a 4-entry memory bank a rank), one epoch.

Launcher: ``python -m torch.distributed.launch`` passes ``--local-rank=N`` on torch >= 2.0, which the scripts'
parsers (``--local_rank``) reject on any device; torchrun is its replacement and sets the same RANK / WORLD_SIZE
environment that init_distributed_mode reads.

NVIDIA apex (LARC, amp, apex SyncBN), which both trainers import at the top, is not in the environment: it is not
on PyPI (PyPI's ``apex`` is an unrelated package), the README asks for it "with CUDA extension", which does not build
without CUDA, and NVIDIA's apex today no longer has apex.amp or apex.parallel at all (removed in 2025), so a Mac
user cannot install what the scripts import. eval_semisup.py is not run: it downloads its 1%/10% subset list from
GitHub at start (urllib), which the recipe cannot reach.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

G = "_gauntlet"
# The scripts' own flags, scaled down (the README's values where they are not sizes).
HEAD = "--arch resnet50 --hidden_mlp 64 --feat_dim 16 --workers 0 --batch_size 2 --warmup_epochs 0"
CROPS = ("--size_crops 32 16 --nmb_crops 2 2 --min_scale_crops 0.14 0.05 --max_scale_crops 1. 0.14 "
         "--crops_for_assign 0 1")
SWAV = (f"{HEAD} {CROPS} --data_path {G}/data/train --base_lr 0.6 --final_lr 0.0006 --use_fp16 true "
        "--freeze_prototypes_niters 1 --nmb_prototypes 10 --queue_length 8 --epoch_queue_starts 1 --checkpoint_freq 1")
DCV2 = (f"{HEAD} {CROPS} --data_path {G}/data/train --base_lr 4.8 --final_lr 0.0048 --nmb_prototypes 3 3 "
        "--checkpoint_freq 1")
FEAT, PROTOS, QUEUE_PER_RANK = 16, 10, 4
# The trainers set each param group's lr from a numpy schedule (lr_schedule[iteration], a numpy.float64), so their
# checkpoints' optimizer state holds numpy scalars, which torch >= 2.6 refuses to load weights-only on any device (the
# repository predates it). This restores the load it was written for; it selects nothing about the device.
PICKLE = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


def prepare(tree: Path) -> None:
    import sys

    import torch

    work = tree / G
    # 2 classes x 4 images: with 2 ranks and --batch_size 2 (drop_last), 2 iterations a rank an epoch.
    write_images(work / "data" / "train", count=4, size=32)
    # eval_linear.py's ImageFolder pair (train/, val/): one image a class, one a rank.
    write_images(work / "lineval" / "train", count=1, size=32, seed=1)
    write_images(work / "lineval" / "val", count=1, size=32, seed=2)
    for folder in ("swav", "resume", "linear", "dcv2"):  # initialize_exp writes params.pkl there without making it
        (work / folder).mkdir(parents=True, exist_ok=True)

    # A SwAV checkpoint after epoch 2 of 3, as main_swav.py saves it on a CUDA machine with --use_fp16 true.
    sys.path.insert(0, str(tree))
    import src.resnet50 as resnet_models

    torch.manual_seed(0)
    model = resnet_models.resnet50(normalize=True, hidden_mlp=64, output_dim=FEAT, nmb_prototypes=PROTOS)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.6, momentum=0.9, weight_decay=1e-6)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()  # momentum buffers exist, as after a real epoch
    import numpy as np

    for group in optimizer.param_groups:
        group["lr"] = np.float64(0.3)  # as train() leaves it: an entry of the numpy cosine schedule
    checkpoint = {
        "epoch": 2,
        "state_dict": {"module." + k: v for k, v in model.state_dict().items()},  # saved from the DDP wrapper
        "optimizer": optimizer.state_dict(),  # LARC.state_dict() is its SGD's
        "amp": {"loss_scaler0": {"loss_scale": 65536.0, "unskipped": 0}},  # apex.amp.state_dict() under O1
    }
    save_cuda_checkpoint(checkpoint, work / "resume" / "checkpoint.pth.tar")
    for rank in range(2):  # main_swav.py's per-rank queue files, a full queue (len(crops_for_assign) x 4 x feat_dim)
        queue = torch.nn.functional.normalize(torch.randn(2, QUEUE_PER_RANK, FEAT), dim=2)
        save_cuda_checkpoint({"queue": queue}, work / "resume" / f"queue{rank}.pth")


# eval_linear.py runs at --batch_size 1: utils.accuracy's `correct[:k].view(-1)` on the transposed top-5 prediction
# raises "view size is not compatible with input tensor's size and stride" on torch >= 1.7 for a batch of more than one,
# on any device (a repository bug, met while checking the recipe on the original); a batch of one is contiguous there.
STEPS = [
    Step("train_swav", f"torchrun --nproc_per_node=2 main_swav.py {SWAV} --epochs 2 --dump_path {G}/swav",
         outputs=[f"{G}/swav/checkpoint.pth.tar", f"{G}/swav/checkpoints/ckp-1.pth", f"{G}/swav/queue1.pth"],
         timeout=600),
    Step("resume_swav", f"torchrun --nproc_per_node=2 main_swav.py {SWAV} --epochs 3 --dump_path {G}/resume",
         outputs=[f"{G}/resume/checkpoints/ckp-2.pth"], timeout=600, env=PICKLE),
    Step("eval_linear", f"torchrun --nproc_per_node=2 eval_linear.py --arch resnet50 --data_path {G}/lineval "
         f"--pretrained {G}/swav/checkpoint.pth.tar --epochs 1 --batch_size 1 --workers 0 --dump_path {G}/linear",
         outputs=[f"{G}/linear/checkpoint.pth.tar"], timeout=600, env=PICKLE),
    Step("train_deepclusterv2", f"torchrun --nproc_per_node=2 main_deepclusterv2.py {DCV2} --epochs 1 "
         f"--dump_path {G}/dcv2", outputs=[f"{G}/dcv2/checkpoints/ckp-0.pth", f"{G}/dcv2/mb1.pth"], timeout=600),
]
