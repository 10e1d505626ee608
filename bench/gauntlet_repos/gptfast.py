"""gpt-fast's README commands, tiny: ``scripts/convert_hf_checkpoint.py`` on a Hugging Face-layout checkpoint
(sharded safetensors and their index) of the repository's own smallest listed model, ``stories15M`` (6 layers, width
288, LLaMA's 32000-token vocabulary), with random weights; ``quantize.py --mode int8`` (scripts/prepare.sh's last
command); ``generate.py --compile`` on the bf16 checkpoint and ``generate.py`` on the int8 one; ``generate.py`` on a converted checkpoint written as on a CUDA machine (storages
tagged cuda:0: the checkpoint a user brings from a GPU box); the README's tensor-parallel command,
``torchrun --standalone --nproc_per_node=2 generate.py``; then mixtral-moe/'s README: its
``convert_hf_checkpoint.py`` on a consolidated ``*.pt`` checkpoint and its ``generate.py`` (``--device`` defaults to
``"cuda"``), through ``_gauntlet/mixtral.py``, which shrinks the one Mixtral entry of mixtral-moe/model.py's
``transformer_configs`` (8x7B) to 2 layers of width 64 with 4 experts and runs the script as ``__main__`` with its
own command line; then (added after the first run) mixtral-moe/quantize.py --mode int8 and generate.py on its
int8 checkpoint, from inside mixtral-moe/ as that README runs them. Nothing picks a device: no step passes ``--device``.

The tokenizer is a SentencePiece BPE model trained on synthetic text and padded with user-defined pieces to 32000
ids, so every id the random model samples decodes. Speculative decoding (``--draft_checkpoint_path``) is left out: at
HEAD it fails on every device (generate.py:106, ``torch.cat([cur_token.view(1), draft_tokens])`` mixes 1-D and 2-D
tensors since the batched-generation commit), not CUDA. Generation is 8 new tokens, 2 samples (the scripts' flags). Only the README's first command keeps ``--compile``
(inductor's CPU compile of the decode step takes minutes on a shared 2-core machine); the int8 and
tensor-parallel steps run the same commands without it.
"""

import json
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
CK = "checkpoints/tinyllamas/stories15M"
CUDA_CK = "checkpoints/cuda/stories15M"
MIX = "checkpoints/mistralai/Mixtral-8x7B-v0.1"
VOCAB = 32000
# model.py's transformer_configs["stories15M"]: n_layer=6, n_head=6, dim=288 (intermediate find_multiple(768, 256)).
LAYERS, HEADS, DIM, HIDDEN = 6, 6, 288, 768
MIXTRAL = dict(block_size=256, n_layer=2, n_head=4, n_local_heads=2, dim=64, intermediate_size=128,
               rope_base=1000000.0, num_experts=4, num_activated_experts=2)
ENV = {"OMP_NUM_THREADS": "1"}

WRAPPER = r'''
"""gauntlet: mixtral-moe/ at toy size (see bench/gauntlet_repos/gptfast.py). python _gauntlet/mixtral.py SCRIPT ARGS"""
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MOE = ROOT / "mixtral-moe"
TINY = %(tiny)s

script = (ROOT / sys.argv[1]).resolve()
sys.argv = [str(script)] + sys.argv[2:]
sys.path.insert(0, str(MOE))
sys.path.insert(0, str(script.parent))  # as `python SCRIPT` puts the script's folder first
import model  # mixtral-moe/model.py (the script's own `from model import ...` finds this module)

model.transformer_configs["Mixtral-8x7B-v0.1"] = dict(TINY)
runpy.run_path(str(script), run_name="__main__")
'''


def _tokenizer(target: Path) -> None:
    import sentencepiece as spm

    lines = synthetic_text(words=6000).splitlines() + ["Hello, my name is. Hi my name is. What is your prompt?"]
    target.parent.mkdir(parents=True, exist_ok=True)
    # user-defined pieces fill the vocabulary up to LLaMA's 32000 ids (the trainer learns about 250 on this text)
    extra = [f"<g{i}>" for i in range(VOCAB - 250)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(target.with_suffix("")), vocab_size=VOCAB,
        model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1, minloglevel=2,
        user_defined_symbols=extra)


def _hf_checkpoint(folder: Path) -> None:
    """A Hugging Face Llama checkpoint as scripts/download.py leaves it: two safetensors shards and their index."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    tensors = {"model.embed_tokens.weight": w(VOCAB, DIM), "model.norm.weight": torch.ones(DIM),
               "lm_head.weight": w(VOCAB, DIM)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": w(DIM, DIM), p + "self_attn.k_proj.weight": w(DIM, DIM),
            p + "self_attn.v_proj.weight": w(DIM, DIM), p + "self_attn.o_proj.weight": w(DIM, DIM),
            p + "self_attn.rotary_emb.inv_freq": torch.ones(DIM // HEADS // 2),
            p + "mlp.gate_proj.weight": w(HIDDEN, DIM), p + "mlp.up_proj.weight": w(HIDDEN, DIM),
            p + "mlp.down_proj.weight": w(DIM, HIDDEN),
            p + "input_layernorm.weight": torch.ones(DIM), p + "post_attention_layernorm.weight": torch.ones(DIM)})
    folder.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: tensors[k].contiguous() for k in keys}, str(folder / shard), metadata={"format": "pt"})
        weight_map.update({k: shard for k in keys})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def _converted_state(seed: int) -> dict:
    """model.pth as scripts/convert_hf_checkpoint.py writes it for stories15M (fused wqkv), bfloat16."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    state = {"tok_embeddings.weight": w(VOCAB, DIM), "norm.weight": torch.ones(DIM, dtype=torch.bfloat16),
             "output.weight": w(VOCAB, DIM)}
    for i in range(LAYERS):
        p = f"layers.{i}."
        state.update({
            p + "attention.wqkv.weight": w(3 * DIM, DIM), p + "attention.wo.weight": w(DIM, DIM),
            p + "feed_forward.w1.weight": w(HIDDEN, DIM), p + "feed_forward.w3.weight": w(HIDDEN, DIM),
            p + "feed_forward.w2.weight": w(DIM, HIDDEN),
            p + "attention_norm.weight": torch.ones(DIM, dtype=torch.bfloat16),
            p + "ffn_norm.weight": torch.ones(DIM, dtype=torch.bfloat16)})
    return state


def _mixtral_checkpoint(folder: Path) -> None:
    """Mixtral's consolidated checkpoint (the *.pt files mixtral-moe/scripts/convert_hf_checkpoint.py globs), at
    the recipe's tiny size: experts stacked as [experts * intermediate, dim]."""
    import torch

    g = torch.Generator().manual_seed(1)
    c = MIXTRAL
    head_dim = c["dim"] // c["n_head"]
    kv = c["n_local_heads"] * head_dim
    stacked = c["num_experts"] * c["intermediate_size"]

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.bfloat16)

    state = {"tok_embeddings.weight": w(VOCAB, c["dim"]), "norm.weight": torch.ones(c["dim"]),
             "output.weight": w(VOCAB, c["dim"])}
    for i in range(c["n_layer"]):
        p = f"layers.{i}."
        state.update({
            p + "attention.wq.weight": w(c["dim"], c["dim"]), p + "attention.wk.weight": w(kv, c["dim"]),
            p + "attention.wv.weight": w(kv, c["dim"]), p + "attention.wo.weight": w(c["dim"], c["dim"]),
            p + "block_sparse_moe.w1": w(stacked, c["dim"]), p + "block_sparse_moe.w2": w(stacked, c["dim"]),
            p + "block_sparse_moe.w3": w(stacked, c["dim"]),
            p + "block_sparse_moe.gate.weight": w(c["num_experts"], c["dim"]),
            p + "attention_norm.weight": torch.ones(c["dim"]), p + "ffn_norm.weight": torch.ones(c["dim"])})
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "consolidated.00.pt")


def prepare(tree: Path) -> None:
    import shutil

    tree = Path(tree)
    (tree / G).mkdir(parents=True, exist_ok=True)
    (tree / G / "mixtral.py").write_text(WRAPPER % {"tiny": repr(MIXTRAL)})
    tokenizer = tree / CK / "tokenizer.model"
    _tokenizer(tokenizer)
    _hf_checkpoint(tree / CK)
    (tree / CUDA_CK).mkdir(parents=True, exist_ok=True)
    shutil.copy(tokenizer, tree / CUDA_CK / "tokenizer.model")
    save_cuda_checkpoint(_converted_state(seed=2), tree / CUDA_CK / "model.pth")
    _mixtral_checkpoint(tree / MIX)
    shutil.copy(tokenizer, tree / MIX / "tokenizer.model")


GEN = "--max_new_tokens 8 --num_samples 2"
STEPS = [
    Step("convert", f"python scripts/convert_hf_checkpoint.py --checkpoint_dir {CK}",
         outputs=[f"{CK}/model.pth"], timeout=120, env=ENV),
    Step("quantize-int8", f"python quantize.py --checkpoint_path {CK}/model.pth --mode int8",
         outputs=[f"{CK}/model_int8.pth"], timeout=120, env=ENV),
    Step("generate", f'python generate.py --compile --checkpoint_path {CK}/model.pth --prompt "Hello, my name is" {GEN}',
         timeout=300, env=ENV),
    Step("generate-int8", f"python generate.py --checkpoint_path {CK}/model_int8.pth {GEN}",
         timeout=300, env=ENV),
    Step("generate-cuda-checkpoint", f'python generate.py --checkpoint_path {CUDA_CK}/model.pth '
                                     f'--prompt "Hi my name is" {GEN}', timeout=200, env=ENV),
    Step("tensor-parallel", f"torchrun --standalone --nproc_per_node=2 generate.py "
                            f"--checkpoint_path {CK}/model.pth {GEN}",
         timeout=300, env={**ENV, "ENABLE_INTRA_NODE_COMM": "1"}),
    Step("mixtral-convert", f"python {G}/mixtral.py mixtral-moe/scripts/convert_hf_checkpoint.py "
                            f"--checkpoint_dir {MIX}", outputs=[f"{MIX}/model.pth"], timeout=120, env=ENV),
    Step("mixtral-generate", f'python {G}/mixtral.py mixtral-moe/generate.py --checkpoint_path {MIX}/model.pth '
                             f'--prompt "Hello, my name is" {GEN}', timeout=200, env=ENV),
    # Added after the first-contact run (see gptfast.toml's notes): the Mixtral README's int8 commands, run from
    # mixtral-moe/ as its README does (`python quantize.py ...`, `python generate.py ...`).
    Step("mixtral-quantize-int8", f"cd mixtral-moe && python ../{G}/mixtral.py mixtral-moe/quantize.py "
                                  f"--checkpoint_path ../{MIX}/model.pth --mode int8",
         outputs=[f"{MIX}/model_int8.pth"], timeout=120, env=ENV),
    Step("mixtral-generate-int8", f"cd mixtral-moe && python ../{G}/mixtral.py mixtral-moe/generate.py "
                                  f"--checkpoint_path ../{MIX}/model_int8.pth {GEN}", timeout=200, env=ENV),
]
