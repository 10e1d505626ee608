"""Llama 2 inference as its README runs it: ``torchrun example_text_completion.py`` and
``example_chat_completion.py`` on a tiny random checkpoint (bf16 tensors saved as on a GPU
box, as Meta ships them) with a tiny SentencePiece tokenizer, then the text example again
with ``--nproc_per_node 2`` on a 2-shard (MP=2) fairscale model-parallel checkpoint.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text, train_sentencepiece

G = "_gauntlet"
DIM, N_LAYERS, N_HEADS, MULTIPLE_OF, VOCAB = 64, 2, 4, 32, 512


def _ffn_hidden(dim: int, multiple_of: int) -> int:
    # llama/model.py FeedForward: 4*dim -> 2/3 -> round up to multiple_of
    hidden = int(2 * (4 * dim) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _shard(mp: int, rank: int, generator) -> dict:
    """One consolidated.NN.pth of a model-parallel (fairscale) Llama with ``mp`` shards.

    Column-parallel weights (wq/wk/wv/w1/w3/output) are split on dim 0, row-parallel ones
    (wo/w2) on dim 1, ParallelEmbedding on its embedding dim; norms are replicated.
    """
    import torch

    def rand(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    head_dim = DIM // N_HEADS
    hidden = _ffn_hidden(DIM, MULTIPLE_OF)
    sd = {
        "tok_embeddings.weight": rand(VOCAB, DIM // mp),
        "norm.weight": torch.ones(DIM, dtype=torch.bfloat16),
        "output.weight": rand(VOCAB // mp, DIM),
        "rope.freqs": torch.ones(head_dim // 2, dtype=torch.bfloat16),  # as in Meta's files; ignored
    }
    for i in range(N_LAYERS):
        p = f"layers.{i}."
        for w in ("wq", "wk", "wv"):
            sd[p + f"attention.{w}.weight"] = rand(N_HEADS * head_dim // mp, DIM)
        sd[p + "attention.wo.weight"] = rand(DIM, N_HEADS * head_dim // mp)
        sd[p + "feed_forward.w1.weight"] = rand(hidden // mp, DIM)
        sd[p + "feed_forward.w3.weight"] = rand(hidden // mp, DIM)
        sd[p + "feed_forward.w2.weight"] = rand(DIM, hidden // mp)
        sd[p + "attention_norm.weight"] = torch.ones(DIM, dtype=torch.bfloat16)
        sd[p + "ffn_norm.weight"] = torch.ones(DIM, dtype=torch.bfloat16)
    return sd


def prepare(tree: Path) -> None:
    import json

    import torch

    g = Path(tree) / G
    # English-like text plus the examples' own prompts (read from the tree, as text): a real
    # tokenizer covers them in few pieces; without them the chat dialogs are ~770 pieces long
    # and the chat step's token-by-token loop would dominate the recipe's time.
    text = synthetic_text()
    for example in ("example_text_completion.py", "example_chat_completion.py"):
        if (Path(tree) / example).is_file():
            text += (Path(tree) / example).read_text(encoding="utf-8")
    train_sentencepiece(text, g / "tokenizer", vocab_size=VOCAB)
    params = {"dim": DIM, "n_layers": N_LAYERS, "n_heads": N_HEADS, "multiple_of": MULTIPLE_OF,
              "norm_eps": 1e-5, "vocab_size": VOCAB}
    generator = torch.Generator().manual_seed(0)
    for name, mp in (("llama-tiny", 1), ("llama-tiny-mp2", 2)):
        folder = g / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "params.json").write_text(json.dumps(params))
        for rank in range(mp):
            save_cuda_checkpoint(_shard(mp, rank, generator), folder / f"consolidated.{rank:02d}.pth")


# The example scripts print their completions and write no files, so a step's success is its
# exit status. Sizes: with the 512-piece tokenizer the text prompts are up to ~70 pieces and
# the chat dialogs up to ~410, hence max_seq_len 128 and 512 (the README's own values); the
# batch sizes are the examples' prompt counts (4 and 6), which generate() asserts against.
_TOK = f"--tokenizer_path {G}/tokenizer.model"
_TORCHRUN = "torchrun"  # the README's launcher (the runner writes one into the recipe's venv)
STEPS = [
    Step("text", f"{_TORCHRUN} --nproc_per_node 1 example_text_completion.py --ckpt_dir {G}/llama-tiny/ "
                 f"{_TOK} --max_seq_len 128 --max_batch_size 4 --max_gen_len 8", timeout=180),
    Step("chat", f"{_TORCHRUN} --nproc_per_node 1 example_chat_completion.py --ckpt_dir {G}/llama-tiny/ "
                 f"{_TOK} --max_seq_len 512 --max_batch_size 6 --max_gen_len 4", timeout=300),
    Step("text-mp2", f"{_TORCHRUN} --nproc_per_node 2 example_text_completion.py --ckpt_dir {G}/llama-tiny-mp2/ "
                     f"{_TOK} --max_seq_len 128 --max_batch_size 4 --max_gen_len 8", timeout=240),
]
