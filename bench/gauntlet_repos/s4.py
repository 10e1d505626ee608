"""state-spaces/s4 as its README runs it, tiny, with its own Hydra overrides and flags:

- ``train-mnist``: the README's first training command, ``python -m train pipeline=mnist dataset.permute=True model=s4
  model.n_layers=3 model.d_model=128 model.norm=batch model.prenorm=True wandb=null``, with one layer of width 16,
  batch 4, one epoch of 2 train / 2 val batches (``trainer.limit_{train,val}_batches``, the README's "Data
  subsampling" flags) on a synthetic MNIST (the idx files torchvision's MNIST reads, 40 train and 8 test images,
  under ``DATA_PATH``, the repository's own variable for its data folder). ``hydra.run.dir`` keeps the run under
  ``_gauntlet/``. The trainer stays as configs/trainer/default.yaml says (``accelerator: gpu``).
- ``resume-mnist``: the README's "Resuming" (``train.ckpt=<path>.ckpt``) from that run's last.ckpt re-saved as a
  CUDA machine writes it (every storage tagged cuda:0), for a second epoch.
- ``evaluate-mnist``: checkpoints/README.md's ``python -m checkpoints.evaluate wandb=null experiment=...
  trainer.devices=1 loader.batch_size=1`` on the CUDA-written checkpoint (the script reads ``checkpoint_path``; the
  README's ``train.ckpt`` is not read by it), 2 test batches.
- ``train-sashimi``: the README's Example 2 (Audio), ``python -m train experiment=audio/sashimi-sc09 model.n_layers=2
  trainer.limit_train_batches=0.1 trainer.limit_val_batches=0.1``, with d_model 16, batch 2, one epoch, on a synthetic
  SC09 (one 256-sample 16 kHz wav per digit, the dataset's validation_list.txt / testing_list.txt naming two each).
- ``convert-pl-to-pt``: checkpoints/README.md's ``python -m checkpoints.convert_pl_to_pt checkpoints/<name>.ckpt`` on
  the SaShiMi run's val/loss.ckpt re-saved as on CUDA (cuda.ckpt -> cuda.pt beside it).
- ``generate-ckpt``: the README's generation Option 1, ``python -m generate experiment=audio/sashimi-sc09
  model.n_layers=2 checkpoint_path=<...>/checkpoints/val/loss.ckpt n_samples=4 l_sample=16000`` on the CUDA-written
  .ckpt, 2 samples of 64 steps conditioned on the val split, saved as wav (decode=audio, the default).
- ``generate-pt``: the README's Option 2, ``python -m generate experiment_path=<run> checkpoint_path=...`` with the
  converted .pt (a state dict: generate.py's ``torch.load(..., map_location='cuda')`` path), 2 samples of 64 steps.
- ``example-mnist``: the README's ``example.py`` as its docstring runs MNIST (``python -m example --dataset mnist
  --d_model 256 --weight_decay 0.0``), with --d_model 8 --n_layers 1 --batch_size 8 --num_workers 0 on the synthetic
  MNIST under ./data (the script's fixed root). ``--epochs`` is left at its default 100: the flag is declared
  ``type=float`` and ``range(start_epoch, args.epochs)`` refuses a float (a repository bug on any device); 100 epochs
  of 5 tiny batches take seconds. A control step: example.py picks ``'cuda' if torch.cuda.is_available() else 'cpu'``.
- ``example-resume``: ``python -m example ... --resume`` from ./checkpoint/ckpt.pth re-saved as on CUDA: example.py
  loads it with a bare ``torch.load``. Its ``epoch`` is set to 0: resuming from any later epoch fails on any device at
  the loop's first ``pbar.set_description(... val_acc)`` (val_acc is only assigned by the loop itself, a repository
  bug), so the resumed run trains the 100 epochs again (the first blind run had ``epoch=99``; it never reached this
  step).

Environment: torchtext (imported at the top of src/dataloaders/lra.py, which src/dataloaders/__init__ imports; used
only by the LRA text datasets) has no build for torch 2.13: prepare() puts a stand-in package in the environment
whose attributes raise. torchaudio (generate.py, src/dataloaders/audio.py and base.py import it) has none either:
prepare() installs torchaudio 2.8.0 with pip's ``--no-deps`` and removes its C++ libraries; its soundfile backend
(the ``soundfile`` requirement) reads and writes the wavs. pykeops and the CUDA Cauchy / Vandermonde extension are not
installed (the README calls both optional; the code falls back to its naive kernels).
"""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
# TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD: Lightning 2.0's checkpoints hold the OmegaConf hparams, which torch >= 2.6's
# weights_only default refuses (Lightning 2.0.4 and convert_pl_to_pt.py call torch.load without weights_only); a
# torch-version matter, not a device one.
ENV = {"DATA_PATH": "{tree}/_gauntlet/data", "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "1",
       "PYTHONWARNINGS": "ignore", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}

# The README's MNIST command, scaled down by its own overrides.
MNIST = ("pipeline=mnist dataset.permute=True model=s4 model.n_layers=1 model.d_model=16 model.norm=batch "
         "model.prenorm=True wandb=null loader.batch_size=4 loader.num_workers=0")
MNIST_TRAIN = f"{MNIST} trainer.limit_train_batches=2 trainer.limit_val_batches=2"
MNIST_RUN = f"{G}/runs/mnist"
# The README's SaShiMi SC09 command (Example 2), scaled down.
SASHIMI = "experiment=audio/sashimi-sc09 model.n_layers=2 model.d_model=16"
SASHIMI_RUN = f"{G}/runs/sashimi"
EXAMPLE = "python -m example --dataset mnist --d_model 8 --n_layers 1 --weight_decay 0.0 --batch_size 8 --num_workers 0"

# Re-save a checkpoint as a CUDA machine writes it (every storage tagged cuda:0); KEY=INT pairs set top-level keys.
CUDA_CHECKPOINT = '''\
import sys

import torch
from torch import serialization

source, target, *pairs = sys.argv[1:]
checkpoint = torch.load(source, map_location="cpu", weights_only=False)
for pair in pairs:
    key, value = pair.split("=")
    checkpoint[key] = int(value)
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
try:
    torch.save(checkpoint, target)
finally:
    serialization.location_tag = original
print("re-saved as on CUDA:", source, "->", target)
'''

TORCHTEXT_STUB = '''\
"""Stand-in for torchtext (no build for this torch): importable, every attribute raises."""


def __getattr__(name):
    raise ImportError(f"torchtext.{name}: torchtext is a stand-in in this environment")
'''


def _environment() -> None:
    """torchaudio 2.8 without its C++ libraries (soundfile backend) and the torchtext stand-in, in this environment."""
    import importlib.util
    import subprocess
    import sys
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    if importlib.util.find_spec("torchaudio") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "torchaudio==2.8.0"], check=True)
    for library in (site / "torchaudio" / "lib").glob("*.so"):
        library.unlink()
    stub = site / "torchtext" / "__init__.py"
    if not stub.is_file():
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_text(TORCHTEXT_STUB)


def _mnist(raw: Path, n_train: int = 40, n_test: int = 8) -> None:
    """The four uncompressed idx files torchvision's MNIST reads from ``raw``."""
    import struct

    import numpy as np

    rng = np.random.default_rng(0)
    raw.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=(count,), dtype=np.uint8)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 2051, count, 28, 28) + images.tobytes())
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 2049, count) + labels.tobytes())


def _sc09(folder: Path) -> None:
    """One 256-sample 16 kHz wav per digit; the first two are the validation split, the next two the test split."""
    import numpy as np
    import soundfile

    rng = np.random.default_rng(1)
    digits = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    names = []
    for i, digit in enumerate(digits):
        (folder / digit).mkdir(parents=True, exist_ok=True)
        t = np.arange(256) / 16000.0
        wave = 0.5 * np.sin(2 * np.pi * (200 + 50 * i) * t) + 0.05 * rng.standard_normal(256)
        soundfile.write(str(folder / digit / f"gauntlet_{i}.wav"), (wave * 20000).astype(np.int16), 16000,
                        subtype="PCM_16")
        names.append(f"{digit}/gauntlet_{i}.wav")
    (folder / "validation_list.txt").write_text("\n".join(names[:2]) + "\n")
    (folder / "testing_list.txt").write_text("\n".join(names[2:4]) + "\n")


def prepare(tree: Path) -> None:
    _environment()
    root = tree / G
    _mnist(root / "data" / "mnist" / "MNIST" / "raw")
    _mnist(tree / "data" / "MNIST" / "raw")  # example.py's root='./data'
    _sc09(root / "data" / "sc09")
    (root / "cuda").mkdir(parents=True, exist_ok=True)
    (root / "cuda_checkpoint.py").write_text(CUDA_CHECKPOINT)


RESAVE = f"python {G}/cuda_checkpoint.py"

STEPS = [
    Step("train-mnist",
         f"python -m train {MNIST_TRAIN} trainer.max_epochs=1 hydra.run.dir={MNIST_RUN}",
         outputs=[f"{MNIST_RUN}/checkpoints/last.ckpt"], env=ENV, timeout=300),
    Step("resume-mnist",
         f"{RESAVE} {MNIST_RUN}/checkpoints/last.ckpt {G}/cuda/mnist.ckpt && "
         f"python -m train {MNIST_TRAIN} trainer.max_epochs=2 train.ckpt={{tree}}/{G}/cuda/mnist.ckpt "
         f"hydra.run.dir={G}/runs/mnist-resume",
         outputs=[f"{G}/runs/mnist-resume/checkpoints/last.ckpt"], env=ENV, timeout=300),
    Step("evaluate-mnist",
         f"python -m checkpoints.evaluate {MNIST} checkpoint_path={G}/cuda/mnist.ckpt trainer.devices=1 "
         f"+trainer.limit_test_batches=2 hydra.run.dir={G}/runs/mnist-evaluate",
         env=ENV, timeout=300),
    Step("train-sashimi",
         f"python -m train {SASHIMI} wandb=null loader.batch_size=2 loader.num_workers=0 trainer.max_epochs=1 "
         f"trainer.limit_train_batches=2 trainer.limit_val_batches=1 hydra.run.dir={SASHIMI_RUN}",
         outputs=[f"{SASHIMI_RUN}/checkpoints/val/loss.ckpt", f"{SASHIMI_RUN}/.hydra/config.yaml"],
         env=ENV, timeout=300),
    Step("convert-pl-to-pt",
         f"{RESAVE} {SASHIMI_RUN}/checkpoints/val/loss.ckpt {SASHIMI_RUN}/checkpoints/cuda.ckpt && "
         f"python -m checkpoints.convert_pl_to_pt {SASHIMI_RUN}/checkpoints/cuda.ckpt",
         outputs=[f"{SASHIMI_RUN}/checkpoints/cuda.pt"], env=ENV, timeout=300),
    Step("generate-ckpt",
         f"python -m generate {SASHIMI} wandb=null loader.num_workers=0 "
         f"checkpoint_path={SASHIMI_RUN}/checkpoints/cuda.ckpt n_samples=2 l_sample=64 l_prefix=16 "
         f"save_dir={G}/samples/ckpt hydra.run.dir={G}/runs/generate-ckpt",
         outputs=[f"{G}/samples/ckpt/*.wav"], env=ENV, timeout=300),
    Step("generate-pt",
         f"python -m generate experiment_path={SASHIMI_RUN} checkpoint_path=checkpoints/cuda.pt wandb=null "
         f"n_samples=2 l_sample=64 save_dir={G}/samples/pt hydra.run.dir={G}/runs/generate-pt",
         outputs=[f"{G}/samples/pt/*.wav"], env=ENV, timeout=300),
    Step("example-mnist", EXAMPLE, outputs=["checkpoint/ckpt.pth"], env=ENV, timeout=300),
    Step("example-resume",
         f"{RESAVE} checkpoint/ckpt.pth checkpoint/ckpt.pth epoch=0 && {EXAMPLE} --resume",
         env=ENV, timeout=300),
]
