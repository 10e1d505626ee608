"""nanoGPT's shakespeare_char recipe, tiny: the repo's data prep on synthetic text, 2 iterations of
train.py (compile on, as the repo defaults), sample.py and a resume from checkpoints written as on a
CUDA machine (a compiled model's ``_orig_mod.`` keys), and a 2-process torchrun (DDP) run."""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text

CONFIG = "config/train_shakespeare_char.py"
TINY = ("--n_layer=2 --n_head=2 --n_embd=32 --block_size=32 --batch_size=4 --eval_iters=1 "
        "--eval_interval=2 --log_interval=1 --always_save_checkpoint=True")


def _cuda_checkpoint(tree: Path, text: str, out_dir: Path) -> None:
    """A checkpoint as train.py writes it on a GPU: compiled model (``_orig_mod.`` keys), AdamW
    state after one step, storages tagged ``cuda:0``. Built with the tree's own model.py."""
    import importlib.util
    import sys

    import torch

    sys.path.insert(0, str(tree))
    try:
        spec = importlib.util.spec_from_file_location("_gauntlet_nanogpt_model", tree / "model.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(tree))
    torch.manual_seed(0)
    model_args = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, bias=False,
                      vocab_size=len(set(text)), dropout=0.0)
    model = module.GPT(module.GPTConfig(**model_args))
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    x = torch.randint(model_args["vocab_size"], (2, 32))
    _, loss = model(x, x)
    loss.backward()
    optimizer.step()
    config = {"dataset": "shakespeare_char", "out_dir": str(out_dir), "batch_size": 4}
    checkpoint = {
        "model": {"_orig_mod." + k: v for k, v in model.state_dict().items()},
        "optimizer": optimizer.state_dict(),
        "model_args": model_args,
        "iter_num": 2,
        "best_val_loss": torch.tensor(9.0),
        "config": config,
    }
    save_cuda_checkpoint(checkpoint, tree / out_dir / "ckpt.pt")


def prepare(tree: Path) -> None:
    text = synthetic_text(words=6000)
    # data/shakespeare_char/prepare.py downloads input.txt only when it is missing
    (tree / "data" / "shakespeare_char" / "input.txt").write_text(text)
    _cuda_checkpoint(tree, text, Path("_gauntlet/out-cuda"))
    _cuda_checkpoint(tree, text, Path("_gauntlet/out-cuda-sample"))


STEPS = [
    Step("data", "python data/shakespeare_char/prepare.py",
         outputs=["data/shakespeare_char/train.bin", "data/shakespeare_char/val.bin",
                  "data/shakespeare_char/meta.pkl"], timeout=120),
    Step("train", f"python train.py {CONFIG} --out_dir=_gauntlet/out --max_iters=2 {TINY}",
         outputs=["_gauntlet/out/ckpt.pt"], timeout=300),
    Step("sample", "python sample.py --out_dir=_gauntlet/out-cuda-sample --num_samples=1 --max_new_tokens=5",
         timeout=120),
    Step("resume", f"python train.py {CONFIG} --out_dir=_gauntlet/out-cuda --init_from=resume --max_iters=4 {TINY}",
         outputs=["_gauntlet/out-cuda/ckpt.pt"], timeout=300),
    Step("ddp", f"torchrun --standalone --nproc_per_node=2 train.py {CONFIG} --out_dir=_gauntlet/out-ddp "
                f"--max_iters=2 --gradient_accumulation_steps=2 {TINY}",
         outputs=["_gauntlet/out-ddp/ckpt.pt"], timeout=300),
]
