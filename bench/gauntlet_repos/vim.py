"""hustvl/Vim (Vision Mamba): the README's ImageNet commands, tiny.

- ``pretrain``: ``bash vim/scripts/pt-vim-t.sh`` (``cd vim``; ``python -m torch.distributed.launch
  --nproc_per_node=8 --use_env main.py --model vim_tiny_patch16_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2
  --batch-size 128 --drop-path 0.0 --weight-decay 0.1 --num_workers 25 --data-path ... --output_dir ... --no_amp``)
  as a 2-process ``torchrun`` (``--use_env``'s successor: LOCAL_RANK in the environment), scaled down by main.py's own
  flags: --batch-size 2, --num_workers 0, --epochs 1, --input-size 48 (3x3 patches of 16), and --no-repeated-aug,
  because the RASampler the default picks keeps floor(len // 256 * 256 / world) samples, none of a dataset under 256
  images (an empty epoch then divides by zero in MetricLogger.log_every, on any device). Epoch 0 trains, evaluates,
  writes checkpoint.pth / best_checkpoint.pth / log.txt; rank 0 logs to mlflow (./mlruns under vim/).
- ``eval``: the README's "Evaluation on Provided Weights" (``python main.py --eval --resume /path/to/ckpt --model
  vim_tiny_..._div2 --data-path ...``), one process, on the pretrain checkpoint re-saved as a CUDA machine writes it
  (every storage tagged cuda:0): main.py evaluates the model and its EMA.
- ``finetune``: ``bash vim/scripts/ft-vim-t.sh`` (the stride-8 model, --finetune from the pretrain checkpoint, which
  main.py loads with map_location='cpu' and whose position embedding it interpolates from 3x3 to 5x5; --lr 5e-6
  --min-lr 1e-5 --warmup-lr 1e-5 --drop-path 0.0 --weight-decay 1e-8 --no_amp) as a 1-process ``torchrun``, --epochs 1.

Not CUDA, the same on the original and the port: the README installs causal-conv1d and mamba-1p1p1 with
``pip install -e`` (an nvcc build); the steps put the two vendored folders on PYTHONPATH instead (no kernel is built,
as on a Mac). mlflow (vim_requirements.txt: mlflow 2.9.1) comes as mlflow-skinny 2.9.1, the same ``mlflow`` package
without the server's dependencies; main.py only calls start_run / log_param / log_metric (a local ./mlruns store).
TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 where a checkpoint is loaded: main.py pickles its argparse Namespace into each one,
which torch >= 2.6's weights-only default refuses on every device. Data: a synthetic ImageNet folder layout
(train/ and val/ class folders, --data-set IMNET, the default; 1000-way head as main.py builds it).
"""

from pathlib import Path

from _recipe import Step, write_images

G = "_gauntlet"
DATA = f"../{G}/imagenet"
PATHS = "{tree}/mamba-1p1p1:{tree}/causal-conv1d"
ENV = {"PYTHONPATH": PATHS, "OMP_NUM_THREADS": "1", "MLFLOW_TRACKING_URI": "file:{tree}/vim/mlruns"}
PICKLE = {**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}
CLASSES = ("n01440764", "n01443537")
TINY = "vim_tiny_patch16_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2"
TINY_S8 = "vim_tiny_patch16_stride8_224_bimambav2_final_pool_mean_abs_pos_embed_with_midclstok_div2"
SMALL = "--batch-size 2 --num_workers 0 --epochs 1 --input-size 48"

AS_CUDA = '''\
"""Re-save a checkpoint as a CUDA machine writes it: every storage tagged cuda:0 (_recipe.save_cuda_checkpoint)."""
import sys

import torch
from torch import serialization

source, target = sys.argv[1], sys.argv[2]
obj = torch.load(source, map_location="cpu", weights_only=False)
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
torch.save(obj, target)
'''


def prepare(tree: Path) -> None:
    write_images(tree / G / "imagenet" / "train", count=4, size=64, classes=CLASSES, suffix=".JPEG", seed=0)
    write_images(tree / G / "imagenet" / "val", count=2, size=64, classes=CLASSES, suffix=".JPEG", seed=1)
    (tree / G / "as_cuda.py").write_text(AS_CUDA)


STEPS = [
    # pt-vim-t.sh, 2 processes
    Step("pretrain", f"cd vim && torchrun --nproc_per_node=2 main.py --model {TINY} --drop-path 0.0 "
         f"--weight-decay 0.1 --data-path {DATA} --output_dir ../{G}/pt --no_amp {SMALL} --no-repeated-aug",
         outputs=[f"{G}/pt/checkpoint.pth", f"{G}/pt/log.txt"], timeout=420, env=ENV),
    # README: python main.py --eval --resume /path/to/ckpt --model ... --data-path ..., on a CUDA-written checkpoint
    # (/bin/sh is dash here: no pipefail, so the log is written, shown, and the exit status kept)
    Step("eval", f"python {G}/as_cuda.py {G}/pt/checkpoint.pth {G}/pt_cuda.pth && cd vim && "
         f"python main.py --eval --resume ../{G}/pt_cuda.pth --model {TINY} --data-path {DATA} "
         f"--batch-size 2 --num_workers 0 --input-size 48 > ../{G}/eval.log 2>&1; rc=$?; cat ../{G}/eval.log; "
         f"test $rc = 0 && grep -q 'Accuracy of the ema network' ../{G}/eval.log",
         outputs=[f"{G}/eval.log"], timeout=300, env=PICKLE),
    # ft-vim-t.sh, from the CUDA-written pretrain checkpoint, 1 process
    Step("finetune", f"cd vim && torchrun --nproc_per_node=1 main.py --model {TINY_S8} --lr 5e-6 --min-lr 1e-5 "
         f"--warmup-lr 1e-5 --drop-path 0.0 --weight-decay 1e-8 --data-path {DATA} --output_dir ../{G}/ft "
         f"--finetune ../{G}/pt_cuda.pth --no_amp {SMALL} --no-repeated-aug",
         outputs=[f"{G}/ft/checkpoint.pth", f"{G}/ft/log.txt"], timeout=420, env=PICKLE),
]
