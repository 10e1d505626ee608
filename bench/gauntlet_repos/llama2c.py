"""llama2.c's README, the PyTorch half, tiny: ``tinystories.py download`` (on a synthetic
TinyStories archive that prepare() writes where the download would land) and ``pretokenize``
with the shipped Llama 2 tokenizer, ``train.py`` (device, dtype and compile left at their
defaults: "cuda", bfloat16, True), ``sample.py`` on a checkpoint written as on a GPU box (as
the README's downloaded ``stories15M.pt``), an ``--init_from=resume`` run from such a
checkpoint, the custom-vocabulary route (``train_vocab``, ``pretokenize --vocab_size``,
``train.py --vocab_source=custom``, ``tokenizer.py`` export), ``export.py`` to the Q8_0 format,
and a 2-process ``torchrun`` (DDP) run. Scaled down by train.py's own ``--key=value`` flags.
"""

from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint

G = "_gauntlet"
VOCAB_CUSTOM = 512   # the size of the repository's own test tokenizer (tok512, stories260K)
TINY_MODEL = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, multiple_of=32, max_seq_len=64, dropout=0.0)
TINY = ("--dim=64 --n_layers=2 --n_heads=4 --n_kv_heads=2 --multiple_of=32 --max_seq_len=64 --batch_size=4 "
        "--eval_iters=2 --eval_interval=2 --log_interval=1 --warmup_iters=1 --always_save_checkpoint=True")


def _stories(seed: int, count: int) -> list:
    """TinyStories-shaped records ({"story": ...}) from a few hundred made-up words, varied enough for
    a 512-piece BPE vocabulary."""
    r = rng(seed)
    syllables = ["ba", "lo", "mi", "ta", "ke", "ru", "no", "pi", "sa", "do", "fe", "gu", "ha", "ji", "ly",
                 "mo", "ne", "qu", "ri", "st", "th", "ve", "wo", "xa", "ze", "an", "er", "in", "on", "un"]
    words = sorted({"".join(r.choice(syllables) for _ in range(r.randint(1, 3))) for _ in range(600)})
    common = "once upon a time there was little girl named she loved to play in the park one day saw big".split()
    records = []
    for _ in range(count):
        sentences = []
        for _ in range(r.randint(4, 8)):
            n = r.randint(5, 12)
            sentence = " ".join(r.choice(common) if r.random() < 0.4 else r.choice(words) for _ in range(n))
            sentences.append(sentence.capitalize() + r.choice([".", "!", "?", ", and then."]))
        records.append({"story": " ".join(sentences), "instruction": {"prompt:": "", "words": [], "features": []},
                        "summary": "", "source": "GPT-4"})
    return records


def _tinystories_archive(tree: Path) -> None:
    """data/TinyStories_all_data.tar.gz as download() would fetch it (data00.json ... at its top level):
    download() skips the fetch when the archive is there and unpacks it with tar."""
    import io
    import json
    import tarfile

    data = tree / "data"
    data.mkdir(parents=True, exist_ok=True)
    with tarfile.open(data / "TinyStories_all_data.tar.gz", "w:gz") as archive:
        for shard in range(3):   # shard 0 is the val split, the rest train
            payload = json.dumps(_stories(shard, 150)).encode()
            info = tarfile.TarInfo(f"data{shard:02d}.json")
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))


def _cuda_checkpoint(tree: Path, out_dir: str, vocab_source: str, vocab_size: int) -> None:
    """out/ckpt.pt as train.py writes it on a GPU (the README's stories15M.pt is one): the compiled
    model's state dict (``_orig_mod.`` keys), AdamW state after a step, storages tagged ``cuda:0``.
    Built with the tree's own model.py."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("_gauntlet_llama2c_model", tree / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    model_args = dict(TINY_MODEL, vocab_size=vocab_size)
    model = module.Transformer(module.ModelArgs(**model_args))
    optimizer = model.configure_optimizers(0.1, 5e-4, (0.9, 0.95), "cpu")
    x = torch.randint(vocab_size, (2, 16))
    model(x, x)
    model.last_loss.backward()
    optimizer.step()
    config = dict(model_args, out_dir=out_dir, batch_size=4, vocab_source=vocab_source, device="cuda",
                  dtype="bfloat16", compile=True, init_from="scratch", max_iters=2, learning_rate=5e-4)
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
    tree = Path(tree)
    _tinystories_archive(tree)
    _cuda_checkpoint(tree, f"{G}/out-cuda-sample", "llama2", 32000)
    _cuda_checkpoint(tree, f"{G}/out-cuda", "llama2", 32000)


STEPS = [
    Step("download", "python tinystories.py download",
         outputs=["data/TinyStories_all_data/data00.json"], timeout=120),
    Step("pretokenize", "python tinystories.py pretokenize",
         outputs=["data/TinyStories_all_data/data00.bin", "data/TinyStories_all_data/data02.bin"], timeout=180),
    Step("train", f"python train.py --out_dir={G}/out --max_iters=2 --gradient_accumulation_steps=1 {TINY}",
         outputs=[f"{G}/out/ckpt.pt", f"{G}/out/model.bin"], timeout=300),
    Step("sample", f"python sample.py --checkpoint={G}/out-cuda-sample/ckpt.pt --num_samples=1 --max_new_tokens=8",
         timeout=120),
    Step("resume", f"python train.py --out_dir={G}/out-cuda --init_from=resume --max_iters=4 "
                   f"--gradient_accumulation_steps=1 {TINY}",
         outputs=[f"{G}/out-cuda/model.bin"], timeout=300),
    Step("train-vocab", f"echo n | python tinystories.py train_vocab --vocab_size={VOCAB_CUSTOM}",
         outputs=[f"data/tok{VOCAB_CUSTOM}.model"], timeout=180),
    Step("pretokenize-custom", f"python tinystories.py pretokenize --vocab_size={VOCAB_CUSTOM}",
         outputs=[f"data/tok{VOCAB_CUSTOM}/data00.bin", f"data/tok{VOCAB_CUSTOM}/data02.bin"], timeout=180),
    Step("tokenizer-export", f"python tokenizer.py --tokenizer-model=data/tok{VOCAB_CUSTOM}.model",
         outputs=[f"data/tok{VOCAB_CUSTOM}.bin"], timeout=60),
    Step("ddp-custom", f"torchrun --standalone --nproc_per_node=2 train.py --vocab_source=custom "
                       f"--vocab_size={VOCAB_CUSTOM} --out_dir={G}/out-ddp --max_iters=2 "
                       f"--gradient_accumulation_steps=2 {TINY}",
         outputs=[f"{G}/out-ddp/ckpt.pt", f"{G}/out-ddp/model.bin"], timeout=300),
    Step("export-q80", f"python export.py {G}/out-ddp/model_q80.bin --version 2 --checkpoint {G}/out-ddp/ckpt.pt",
         outputs=[f"{G}/out-ddp/model_q80.bin"], timeout=120),
]
