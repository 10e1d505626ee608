"""FoundationVision/VAR as its README runs it: train.py under a 2-process torchrun on an ImageNet-layout folder, the
README's "automatically resume" rerun, then demo_sample.ipynb's code on the trained checkpoint.

- ``train``: the README's d16 command (``torchrun --nproc_per_node=8 ... train.py --depth=16 --bs=768 --ep=200 --fp16=1
  --alng=1e-3 --wpe=0.1``) with ``--nproc_per_node=2`` and the model and data scaled down by train.py's own flags:
  ``--depth=2`` (heads = depth, width = 64 x depth: the smallest with more than one block and one head),
  ``--pn=1_2_3`` (the token pyramid the repository's own local-debug mode uses: 48x48 images, a 3x3 latent),
  ``--bs=4`` (global) and ``--ep=1``, on a synthetic ImageNet folder (two classes, ``train/`` and ``val/``) that
  prepare() writes. ``--fp16=1`` as the README: CUDA autocast and GradScaler; the default ``--afuse``/``--fuse`` (fused
  AdamW; flash-attn / xformers when installed, SDPA otherwise). The last epoch validates and saves
  ``local_output/ar-ckpt-last.pth`` (and ``-best``).
- ``resume``: the README's "just rerun the command, and the training will automatically resume from the last
  checkpoint in local_output/ckpt*.pth", with ``--ep=2``, from ar-ckpt-last.pth re-saved as a CUDA machine writes it.
- ``sample``: demo_sample.ipynb's code cells as one script (extracted from the tree's notebook at the step, so the port's
  notebook on the port), run from the tree's root. The notebook downloads ``vae_ch160v4096z32.pth`` and
  ``var_d{MODEL_DEPTH}.pth`` only when they are missing: prepare() writes the VQVAE checkpoint (the tree's VQVAE at its
  hard-coded ch160 / v4096 / z32 size, random weights, each conv a small storage expanded to its shape, written as on
  CUDA; train.py loads the same file), and ``export`` writes ``var_d2.pth`` as on CUDA from the trained checkpoint's
  ``trainer.var_wo_ddp`` state (what the released var_d16.pth is). Three lines of the notebook are set to the trained
  model: ``MODEL_DEPTH = 2``, its ``assert MODEL_DEPTH in {...}`` (which lists the released depths) with 2 added, and
  ``patch_nums = (1, 2, 3)``; one line is added at the end to save the grid it ``show()``s. Everything else (the
  device line, autocast('cuda', float16), the 8 class labels, cfg 4, top-k 900, top-p 0.95) is the notebook's.

Not run: demo_zero_shot_edit.ipynb (the README does not point to it), FID evaluation (the README's "sampling script
later" does not exist).
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint

G = "_gauntlet"
DEPTH = 2
ENV = {"PYTHONPATH": "{tree}"}
# torchrun as the README launches it, on one node with two processes: --standalone (a free local port) in place of the
# README's --nnodes/--node_rank/--master_addr/--master_port, so that runs side by side never meet on one port.
TORCHRUN = "torchrun --standalone --nproc_per_node=2 train.py"
TRAIN = (f"--depth={DEPTH} --bs=4 --fp16=1 --alng=1e-3 --wpe=0.1 --pn=1_2_3 --data_path={G}/imagenet")

NOTEBOOK_TO_SCRIPT = '''\
# demo_sample.ipynb's code cells as one script (IPython magics and shell lines left out; it has none), with the
# depth and token pyramid of the trained model, and the grid it show()s also saved.
import json
import sys

notebook = json.load(open(sys.argv[1]))
lines = []
for cell in notebook["cells"]:
    if cell["cell_type"] != "code":
        continue
    for line in "".join(cell["source"]).splitlines():
        if line.lstrip().startswith(("%", "!")):
            continue
        lines.append(line)
    lines.append("")
text = "\\n".join(lines) + "\\n"
for old, new in (("MODEL_DEPTH = 16 ", "MODEL_DEPTH = @DEPTH@ "),
                 ("assert MODEL_DEPTH in {16, 20, 24, 30}", "assert MODEL_DEPTH in {@DEPTH@, 16, 20, 24, 30}"),
                 ("patch_nums = (1, 2, 3, 4, 5, 6, 8, 10, 13, 16)", "patch_nums = (1, 2, 3)")):
    assert text.count(old) == 1, f"the notebook has {text.count(old)} of {old!r}"
    text = text.replace(old, new)
text += "chw.save('@OUT@')\\nprint('gauntlet: saved', '@OUT@')\\n"
open(sys.argv[2], "w").write(text)
'''.replace("@DEPTH@", str(DEPTH)).replace("@OUT@", f"{G}/samples.png")

# Re-save a checkpoint as a CUDA machine writes it (every storage tagged cuda:0), or export the VAR weights of a
# trainer checkpoint (train.py's {'trainer': {'var_wo_ddp': ...}}) as the released var_dN.pth, a state dict.
CHECKPOINTS = '''\
import sys
import torch
from torch import serialization

mode, source, target = sys.argv[1:4]
checkpoint = torch.load(source, map_location="cpu", weights_only=False)
if mode == "export":
    checkpoint = checkpoint["trainer"]["var_wo_ddp"]
original = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0" if original(storage) == "cpu" else original(storage)
try:
    torch.save(checkpoint, target)
finally:
    serialization.location_tag = original
print("gauntlet:", mode, source, "->", target, "(as on CUDA)")
'''


def _vqvae_state(tree: Path) -> dict:
    """The tree's VQVAE as train.py and the notebook build it (V=4096, Cvae=32, ch=160, share_quant_resi=4, the
    trained patch_nums), random weights, each tensor of a convolution one small storage expanded to its shape."""
    import math
    import sys

    import torch

    sys.path.insert(0, str(tree))
    try:
        from models.vqvae import VQVAE

        with torch.device("meta"):
            vae = VQVAE(vocab_size=4096, z_channels=32, ch=160, test_mode=True, share_quant_resi=4,
                        v_patch_nums=(1, 2, 3))
        shapes = {k: tuple(v.shape) for k, v in vae.state_dict().items()}
    finally:
        sys.path.remove(str(tree))
        for name in [m for m in sys.modules if m == "models" or m.startswith("models.") or m == "dist"]:
            del sys.modules[name]
    generator = torch.Generator().manual_seed(0)
    state = {}
    for key, shape in shapes.items():
        if key.endswith("embedding.weight"):  # the codebook: distinct entries
            state[key] = torch.randn(shape, generator=generator)
        elif len(shape) == 4:  # conv: the same weights for every input channel, He-scaled over the kernel
            small = torch.randn(shape[0], 1, *shape[2:], generator=generator)
            small *= math.sqrt(2.0 / math.prod(shape[2:])) / shape[1]
            state[key] = small.expand(shape)
        elif key.endswith("weight") and len(shape) == 1:  # norms
            state[key] = torch.ones(shape)
        else:
            state[key] = torch.zeros(shape)
    return state


def prepare(tree: Path) -> None:
    from _recipe import write_images

    work = tree / G
    work.mkdir(parents=True, exist_ok=True)
    (work / "nb2py.py").write_text(NOTEBOOK_TO_SCRIPT)
    (work / "checkpoints.py").write_text(CHECKPOINTS)
    # ImageNet's layout (README): train/ and val/ with one folder per class, JPEG files.
    for split, count, seed in (("train", 4, 0), ("val", 2, 1)):
        write_images(work / "imagenet" / split, count, size=64, classes=("n01440764", "n01443537"), suffix=".JPEG",
                     seed=seed)
    # train.py and the notebook load ./vae_ch160v4096z32.pth (and wget it only when it is missing).
    save_cuda_checkpoint(_vqvae_state(tree), tree / "vae_ch160v4096z32.pth")


STEPS = [
    Step("train", f"{TORCHRUN} {TRAIN} --ep=1",
         outputs=["local_output/ar-ckpt-last.pth", "local_output/log.txt"], env=ENV, timeout=420),
    Step("resume", f"python {G}/checkpoints.py cuda local_output/ar-ckpt-last.pth local_output/ar-ckpt-last.pth && "
                   f"{TORCHRUN} {TRAIN} --ep=2 && grep -q \"'ep': '2/2'\" local_output/log.txt",
         outputs=["local_output/ar-ckpt-last.pth"], env=ENV, timeout=420),
    # (then ar-ckpt-best.pth, a copy of -last that nothing reads, is removed: each holds the 430 MB VQVAE)
    Step("export", f"python {G}/checkpoints.py export local_output/ar-ckpt-last.pth var_d{DEPTH}.pth && "
                   "rm -f local_output/ar-ckpt-best.pth",
         outputs=[f"var_d{DEPTH}.pth"], env=ENV, timeout=120),
    Step("sample", f"python {G}/nb2py.py demo_sample.ipynb {G}/demo_sample.py && python {G}/demo_sample.py",
         outputs=[f"{G}/samples.png"], env=ENV, timeout=300),
]
