"""Llama 3 inference as its README runs it: ``torchrun example_text_completion.py`` and
``example_chat_completion.py`` on a tiny random GQA checkpoint (bf16 tensors saved as on a GPU
box, as Meta ships them) with a tiny tiktoken BPE (``tokenizer.model``: base64 token and rank a
line) that prepare() trains on synthetic text, then the text example again with
``--nproc_per_node 2`` on a 2-shard (MP=2) fairscale model-parallel checkpoint.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
# params.json shaped like Meta-Llama-3-8B's (n_kv_heads, ffn_dim_multiplier, rope_theta), scaled down.
DIM, N_LAYERS, N_HEADS, N_KV_HEADS, MULTIPLE_OF, FFN_MULT = 64, 2, 4, 2, 32, 1.3
N_MERGES = 512              # BPE merges on top of the 256 byte tokens
N_SPECIAL = 256             # llama/tokenizer.py Tokenizer.num_reserved_special_tokens
VOCAB = 256 + N_MERGES + N_SPECIAL
# llama/tokenizer.py Tokenizer.pat_str (the pre-tokenizer the tokenizer applies before BPE)
PAT_STR = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"  # noqa: E501


def _ffn_hidden() -> int:
    # llama/model.py FeedForward: 4*dim -> 2/3 -> * ffn_dim_multiplier -> round up to multiple_of
    hidden = int(2 * (4 * DIM) / 3)
    hidden = int(FFN_MULT * hidden)
    return MULTIPLE_OF * ((hidden + MULTIPLE_OF - 1) // MULTIPLE_OF)


def _train_bpe(text: str, n_merges: int) -> dict:
    """Byte-level BPE trained on ``text`` pre-split by PAT_STR: {token bytes: rank}, ranks 0..N-1."""
    import collections

    import regex

    words = collections.Counter(tuple(bytes([b]) for b in w.encode("utf-8"))
                                for w in regex.findall(PAT_STR, text))
    ranks = {bytes([b]): b for b in range(256)}
    for _ in range(n_merges):
        pairs = collections.Counter()
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[a, b] += count
        if not pairs:
            break
        (a, b), _count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merged = a + b
        ranks[merged] = len(ranks)
        new_words = collections.Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words[tuple(out)] += count
        words = new_words
    return ranks


def _write_tiktoken(ranks: dict, path: Path) -> None:
    import base64

    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{base64.b64encode(token).decode()} {rank}" for token, rank in sorted(ranks.items(), key=lambda kv: kv[1])]
    path.write_text("\n".join(lines) + "\n")


def _shard(mp: int, generator) -> dict:
    """One consolidated.NN.pth of a model-parallel (fairscale) Llama 3 with ``mp`` shards.

    Column-parallel weights (wq/wk/wv/w1/w3/output) are split on dim 0, row-parallel ones
    (wo/w2) on dim 1, VocabParallelEmbedding on its vocabulary dim; norms are replicated.
    """
    import torch

    def rand(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    head_dim = DIM // N_HEADS
    hidden = _ffn_hidden()
    sd = {
        "tok_embeddings.weight": rand(VOCAB // mp, DIM),
        "norm.weight": torch.ones(DIM, dtype=torch.bfloat16),
        "output.weight": rand(VOCAB // mp, DIM),
    }
    for i in range(N_LAYERS):
        p = f"layers.{i}."
        sd[p + "attention.wq.weight"] = rand(N_HEADS * head_dim // mp, DIM)
        sd[p + "attention.wk.weight"] = rand(N_KV_HEADS * head_dim // mp, DIM)
        sd[p + "attention.wv.weight"] = rand(N_KV_HEADS * head_dim // mp, DIM)
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
    # English-like text plus the examples' own prompts (read from the tree, as text), so that
    # the trained BPE covers them in few tokens and the chat dialogs fit max_seq_len 512.
    text = synthetic_text()
    for example in ("example_text_completion.py", "example_chat_completion.py"):
        if (Path(tree) / example).is_file():
            text += (Path(tree) / example).read_text(encoding="utf-8")
    ranks = _train_bpe(text, N_MERGES)
    assert len(ranks) == 256 + N_MERGES, len(ranks)
    _write_tiktoken(ranks, g / "tokenizer.model")
    params = {"dim": DIM, "n_layers": N_LAYERS, "n_heads": N_HEADS, "n_kv_heads": N_KV_HEADS,
              "vocab_size": VOCAB, "multiple_of": MULTIPLE_OF, "ffn_dim_multiplier": FFN_MULT,
              "norm_eps": 1e-05, "rope_theta": 500000.0}
    generator = torch.Generator().manual_seed(0)
    for name, mp in (("llama3-tiny", 1), ("llama3-tiny-mp2", 2)):
        folder = g / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "params.json").write_text(json.dumps(params))
        for rank in range(mp):
            save_cuda_checkpoint(_shard(mp, generator), folder / f"consolidated.{rank:02d}.pth")


# The example scripts print their completions and write no files, so a step's success is its
# exit status. Sizes are the README's own (max_seq_len 128 / 512, max_batch_size 4 / 6);
# --max_gen_len (the examples' own flag) keeps the token-by-token loop short.
_TOK = f"--tokenizer_path {G}/tokenizer.model"
STEPS = [
    Step("text", f"torchrun --nproc_per_node 1 example_text_completion.py --ckpt_dir {G}/llama3-tiny/ "
                 f"{_TOK} --max_seq_len 128 --max_batch_size 4 --max_gen_len 8", timeout=180),
    Step("chat", f"torchrun --nproc_per_node 1 example_chat_completion.py --ckpt_dir {G}/llama3-tiny/ "
                 f"{_TOK} --max_seq_len 512 --max_batch_size 6 --max_gen_len 4", timeout=240),
    Step("text-mp2", f"torchrun --nproc_per_node 2 example_text_completion.py --ckpt_dir {G}/llama3-tiny-mp2/ "
                     f"{_TOK} --max_seq_len 128 --max_batch_size 4 --max_gen_len 8", timeout=240),
]
