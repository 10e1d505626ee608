"""minRF: the README's ``python rf.py`` (class-conditional rectified flow on MNIST, DiT_Llama dim 64 x 6 layers)
for its first epoch, on a synthetic MNIST of 256 images (one training step of batch 256), then its own sampling:
16 images, 50 Euler steps with classifier-free guidance, saved as ``contents/sample_0.gif`` and
``contents/sample_0_last.png``.

rf.py has no flags to shrink it (100 epochs, the model's size, 50 sampling steps: all hard-coded), so the step runs it
through ``_gauntlet/rf.py``, which gives rf.py's DiT_Llama 1 layer instead of 6 (dim 64 and 4 heads kept: its
GroupNorm(32, dim // 2) needs dim >= 64), runs rf.py as ``__main__`` with its own command line and exits 0 once the
first epoch's last image is saved. First run: with 6 layers the step ran past 300 s on a loaded 2-core machine (the
port had trained and was sampling; 4.5 s a batch-16 forward at load 9).
torchvision's MNIST (``download=True``) downloads nothing when the four raw idx files are in ``data/MNIST/raw``
(it checks that they exist, no md5). wandb is disabled by its own environment variable."""

import struct
from pathlib import Path

from _recipe import Step

G = "_gauntlet"
ENV = {"WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}

WRAPPER = r'''
"""gauntlet: rf.py's first epoch (see bench/gauntlet_repos/minrf.py). python _gauntlet/rf.py STOP [ARGS]"""
import runpy
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
STOP = sys.argv[1]
_save = Image.Image.save


def save(self, fp, *args, **kwargs):
    _save(self, fp, *args, **kwargs)
    if str(fp).endswith(STOP):
        print(f"gauntlet: {fp} saved, stopping after the first epoch")
        raise SystemExit(0)


Image.Image.save = save
script = ROOT / "rf.py"
sys.argv = [str(script)] + sys.argv[2:]
sys.path.insert(0, str(ROOT))  # as `python rf.py` puts the script's folder first
import dit  # rf.py's own `from dit import DiT_Llama` finds this module

_init = dit.DiT_Llama.__init__


def tiny_init(self, *args, **kwargs):
    kwargs["n_layers"] = 1  # rf.py's MNIST model has 6 (dim 64, 4 heads: kept)
    _init(self, *args, **kwargs)


dit.DiT_Llama.__init__ = tiny_init
runpy.run_path(str(script), run_name="__main__")
'''


def _idx(path: Path, magic: int, shape, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(struct.pack(">I", magic))
        for size in shape:
            handle.write(struct.pack(">I", size))
        handle.write(data)


def _mnist(raw: Path, train: int, test: int) -> None:
    """MNIST's four raw files as torchvision reads them: big-endian idx headers, then uint8 pixels / labels."""
    import numpy as np

    generator = np.random.default_rng(0)
    for prefix, count in (("train", train), ("t10k", test)):
        pixels = generator.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
        labels = (np.arange(count) % 10).astype(np.uint8)
        _idx(raw / f"{prefix}-images-idx3-ubyte", 0x00000803, (count, 28, 28), pixels.tobytes())
        _idx(raw / f"{prefix}-labels-idx1-ubyte", 0x00000801, (count,), labels.tobytes())


def prepare(tree: Path) -> None:
    _mnist(tree / "data" / "MNIST" / "raw", train=256, test=16)  # rf.py: batch_size=256, drop_last=True
    (tree / G).mkdir(parents=True, exist_ok=True)
    (tree / G / "rf.py").write_text(WRAPPER)
    (tree / "contents").mkdir(exist_ok=True)


STEPS = [
    Step("train-mnist", "python _gauntlet/rf.py contents/sample_0_last.png",
         outputs=["contents/sample_0.gif", "contents/sample_0_last.png"], timeout=300, env=ENV),
]
