"""pytorch-ddpm's CIFAR10 training, tiny: ``python main.py --train`` (its README's command, the
config's flags given on the command line so the multi-valued ones can shrink) for 2 steps of a
32-channel UNet with T=10, which samples with the EMA model and saves ckpt.pt at step 0; then the
README's multi-GPU form (``--parallel``: DataParallel) the same way.

The data is a synthetic CIFAR10 in torchvision's python-pickle layout under ./data. torchvision
checks each batch file's md5 before it would download, so the steps put a ``sitecustomize`` on
PYTHONPATH that makes ``torchvision.datasets.cifar.check_integrity`` test only that the file
exists (nothing else is patched). The evaluation (``--eval``: Inception-v3 FID/IS weights from a
URL, a 2048x2048 sqrtm) is too heavy for the recipe's budget and is not run."""

from pathlib import Path

from _recipe import Step

SITE = "_gauntlet/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE}
TINY = ("--T 10 --ch 32 --ch_mult 1 --ch_mult 2 --attn 1 --num_res_blocks 1 --dropout 0.1 --img_size 32 "
        "--batch_size 4 --num_workers 0 --total_steps 2 --warmup 1 --sample_size 4 --sample_step 1 "
        "--save_step 1 --eval_step 0 --noeval --nofid_use_torch")

SITECUSTOMIZE = '''\
# gauntlet: the recipe's CIFAR10 is synthetic, so its files can't match torchvision's md5s.
try:
    import os as _os
    import torchvision.datasets.cifar as _cifar

    _cifar.check_integrity = lambda fpath, md5=None: _os.path.isfile(fpath)
except Exception:  # no torchvision: nothing to do
    pass
'''


def _cifar10(root: Path, per_batch: int) -> None:
    """cifar-10-batches-py as torchvision's CIFAR10 reads it: 5 train batches, a test batch and
    batches.meta, pickled dicts of uint8 rows (3*32*32, channel-major) and int labels."""
    import pickle

    import numpy as np

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    generator = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        batch = {"batch_label": name, "data": generator.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
                 "labels": [int(x) for x in generator.integers(0, 10, size=per_batch)],
                 "filenames": [f"{name}_{i}.png" for i in range(per_batch)]}
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                            "truck"], "num_cases_per_batch": per_batch, "num_vis": 3072}
    with open(folder / "batches.meta", "wb") as handle:
        pickle.dump(meta, handle)


def prepare(tree: Path) -> None:
    _cifar10(tree / "data", per_batch=4)
    site = tree / SITE
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)


STEPS = [
    Step("train", f"python main.py --train {TINY} --logdir ./_gauntlet/logs/tiny",
         outputs=["_gauntlet/logs/tiny/ckpt.pt", "_gauntlet/logs/tiny/sample/1.png",
                  "_gauntlet/logs/tiny/flagfile.txt"], env=ENV, timeout=240),
    Step("train-parallel", f"python main.py --train {TINY} --parallel --logdir ./_gauntlet/logs/parallel",
         outputs=["_gauntlet/logs/parallel/ckpt.pt", "_gauntlet/logs/parallel/sample/1.png"], env=ENV, timeout=240),
]
