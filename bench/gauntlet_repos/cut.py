"""CUT (contrastive unpaired translation, the CycleGAN code base) on a tiny synthetic unaligned dataset:
one epoch of CUT training with the default --gpu_ids, a continued epoch from its checkpoint, test.py on
it, and test.py on a generator checkpoint written as on CUDA.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, write_images

DATA = "_gauntlet/data"
CHECKPOINTS = "_gauntlet/checkpoints"
# The network and data, scaled down by the repository's own options; visdom off (--display_id 0).
SMALL = ("--dataroot " + DATA + " --checkpoints_dir " + CHECKPOINTS + " --CUT_mode CUT --load_size 32"
         " --crop_size 32 --netG resnet_6blocks --ngf 8 --ndf 8 --num_threads 0 --max_dataset_size 2")
TRAIN = SMALL + " --n_epochs_decay 0 --save_epoch_freq 1 --display_id 0 --print_freq 1"

# The generator of a CUT model, its weights as a CUDA run saves them; test.py loads only netG.
# Built with the repository's own options and model, in a child process from the tree's root.
_GENERATOR = r"""
import sys, torch
sys.path.insert(0, ".")
out, sys.argv = sys.argv[1], ["test.py", *sys.argv[2:], "--gpu_ids", "-1"]  # only to build the weights
from options.test_options import TestOptions
from models import create_model
torch.manual_seed(0)
model = create_model(TestOptions().parse())
torch.save(model.netG.state_dict(), out)
"""


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import torch

    for split, seed in (("trainA", 0), ("trainB", 1), ("testA", 2), ("testB", 3)):
        write_images(tree / DATA / split, 2, size=32, seed=seed, class_folders=False)

    local = tree / "_gauntlet" / "cpu_net_G.pth"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, "-c", _GENERATOR, str(local), *SMALL.split(), "--name", "cuda_cut"],
                   cwd=tree, env=env, check=True)
    save_cuda_checkpoint(torch.load(local, map_location="cpu"), tree / CHECKPOINTS / "cuda_cut" / "latest_net_G.pth")
    local.unlink()


STEPS = [
    Step("train", f"python train.py {TRAIN} --name gauntlet_cut --n_epochs 1",
         outputs=[f"{CHECKPOINTS}/gauntlet_cut/latest_net_{n}.pth" for n in "GDF"], timeout=300),
    Step("continue", f"python train.py {TRAIN} --name gauntlet_cut --n_epochs 2 --continue_train --epoch_count 2",
         outputs=[f"{CHECKPOINTS}/gauntlet_cut/2_net_{n}.pth" for n in "GDF"], timeout=300),
    Step("test", f"python test.py {SMALL} --name gauntlet_cut --results_dir _gauntlet/results --num_test 2",
         outputs=["_gauntlet/results/gauntlet_cut/test_latest/index.html",
                  "_gauntlet/results/gauntlet_cut/test_latest/images/fake_B/*.png"], timeout=300),
    Step("test-cuda-checkpoint", f"python test.py {SMALL} --name cuda_cut --results_dir _gauntlet/results"
         " --num_test 2",
         outputs=["_gauntlet/results/cuda_cut/test_latest/images/fake_B/*.png"], timeout=300),
]
