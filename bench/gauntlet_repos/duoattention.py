"""DuoAttention's commands, tiny, with its own flags:

- ``train``: scripts/train.sh's ``torchrun --nnodes 1 --nproc_per_node N duo_attn/train.py`` with 2 processes
  (FSDP2 + Ulysses sequence parallelism across the 2 ranks, the default ``blocksparse`` streaming attention, the
  multiple-passkey dataset read from a ``booksum.jsonl.zst`` as the README downloads it), 5 steps at 1024-2048
  tokens (``--num_steps`` under 5 divides by zero in the repository's LR lambda), ``--disable_wandb``;
  writes the learned gates ``full_attention_heads.tsv`` (and the optimizer state at ``--save_steps 5``).
- ``needle``: scripts/niah.sh's ``needle_in_haystack.py`` (run from eval/needle, on the repository's own Paul
  Graham essays) with an attention pattern at sparsity 0.5, chunked pre-filling (``--prefilling_chunk_size``),
  then its ``visualize.py``; 2 context lengths x 2 depths, sink 16 / recent 32.
- ``longbench``: scripts/longbench.sh's ``eval/LongBench/pred.py --method duo_attn`` on one task (passage_count)
  of 2 synthetic samples; ``longbench-full``: the same with ``--method full`` (the dense baseline, the tuple KV
  cache patch).
- ``efficiency``: scripts/efficiency.sh's ``eval/efficiency/benchmark_static.py`` (static KV cache, the
  flashinfer RMSNorm / RoPE patches) at 256 tokens in chunks of 64.

The model is one tiny random Llama (2 layers, hidden 64, 4 heads / 2 KV heads, bf16) with a SentencePiece tokenizer
trained on synthetic text, the repository's needle/passkey sentences and one of its essays, saved where
eval/LongBench/config/model2path.json looks (models/Llama-2-7B-32K-Instruct), its pytorch_model.bin written as on a
GPU box (save_cuda_checkpoint). The attention pattern the evaluations load (config.json + full_attention_heads.tsv,
2 layers x 2 KV heads) is written by prepare, as attn_patterns/ holds them. ``pip install -e .`` is replaced by
PYTHONPATH={tree}.

Not CUDA, worked around the same on the original and the port: pred.py reads ``load_dataset("THUDM/LongBench",
task)`` from the Hub; a sitecustomize under _gauntlet/site (on PYTHONPATH for the longbench steps only) answers that
one call from a local jsonl and then runs the next sitecustomize on sys.path (the harness's own).
"""

import json
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
MODEL = "models/Llama-2-7B-32K-Instruct"

ENV = {
    "PYTHONPATH": "{tree}",
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "true",
    "WANDB_MODE": "disabled",
}

LONGBENCH_ENV = dict(ENV, PYTHONPATH="{tree}/_gauntlet/site:{tree}",
                     GAUNTLET_LONGBENCH_DIR="{tree}/_gauntlet/longbench")

SITECUSTOMIZE = '''\
"""Gauntlet (not a CUDA matter): eval/LongBench/pred.py loads load_dataset("THUDM/LongBench", task, split="test")
from the Hugging Face Hub, which this machine cannot reach; that call is answered from GAUNTLET_LONGBENCH_DIR/TASK.jsonl
(the same columns). Then the next sitecustomize on sys.path runs (the harness's own, if any)."""
import importlib.util
import os
import sys

_dir = os.environ.get("GAUNTLET_LONGBENCH_DIR")
if _dir:
    import datasets as _datasets

    _load_dataset = _datasets.load_dataset

    def _local_longbench(path, name=None, *args, **kwargs):
        if path == "THUDM/LongBench":
            split = kwargs.get("split", "test")
            return _load_dataset("json", data_files={split: os.path.join(_dir, f"{name}.jsonl")}, split=split)
        return _load_dataset(path, name, *args, **kwargs)

    _datasets.load_dataset = _local_longbench

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in list(sys.path):
    if not _entry or os.path.abspath(_entry) == _here:
        continue
    _next = os.path.join(_entry, "sitecustomize.py")
    if os.path.isfile(_next):
        _spec = importlib.util.spec_from_file_location("_gauntlet_next_sitecustomize", _next)
        _module = importlib.util.module_from_spec(_spec)
        _spec.loader.exec_module(_module)
        break
'''

PASSKEY_WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima mike november oscar papa "
                 "quebec romeo sierra tango uniform victor whiskey xray yankee zulu first second third fourth fifth "
                 "sixth seventh eighth ninth tenth")
PROMPTS = ("Remeber this sequence of words, it's the first passkey to the vault: \n"
           "Based on the content of the book, what is the first passkey to the vault?\nPasskey: \n"
           "<|im_start|> This is a very long story book: <book> </book>.\n\n"
           "Remember, the best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.\n"
           "Question: Based on the content of the book, what is the best thing to do in San Francisco?\n\n"
           "Answer: The best thing to do in San Francisco is\n"
           "There are some paragraphs below sourced from Wikipedia. Please enter the final count of unique "
           "paragraphs after removing duplicates. The final answer is: 1, 2, 3\n")


def _tokenizer(tree: Path, folder: Path):
    import sentencepiece as spm
    import transformers

    essay = (tree / "eval" / "needle" / "PaulGrahamEssays" / "gba.txt").read_text()
    lines = (synthetic_text(words=3000).splitlines() + [PASSKEY_WORDS] * 20 + PROMPTS.splitlines() * 10
             + essay.splitlines())
    prefix = folder.parent / "spm" / "tok"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([line for line in lines if line.strip()]), model_prefix=str(prefix),
        vocab_size=512, hard_vocab_limit=False, model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2,
        unk_id=0, pad_id=-1, minloglevel=2)
    tokenizer = transformers.LlamaTokenizer(vocab_file=str(prefix.with_suffix(".model")), legacy=True)
    tokenizer.save_pretrained(folder)
    return tokenizer


def _model(tree: Path) -> None:
    import torch
    import transformers

    folder = tree / MODEL
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(tree, folder)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, bos_token_id=1,
        eos_token_id=2, torch_dtype="bfloat16")
    transformers.set_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    model.save_pretrained(folder, safe_serialization=False)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    save_cuda_checkpoint(model.state_dict(), folder / "pytorch_model.bin")


def _pattern(folder: Path) -> None:
    """An attention pattern as attn_patterns/ holds them: the training config (sink/recent sizes) and the gates,
    one row per layer, one column per KV head."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"sink_size": 16, "recent_size": 32}))
    np.savetxt(folder / "full_attention_heads.tsv", np.array([[0.9, 0.1], [0.2, 0.7]]), delimiter="\t")


def _booksum(path: Path) -> None:
    """Long-Data-Collections' fine-tune/booksum.jsonl.zst layout: zstd-compressed JSON lines with a "text" field."""
    import zstandard

    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.dumps({"text": synthetic_text(words=1500, seed=seed)}) + "\n" for seed in range(8)]
    path.write_bytes(zstandard.ZstdCompressor().compress("".join(rows).encode()))


def _longbench(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(2):
        paragraphs = [f"Paragraph {k}: " + synthetic_text(words=40, seed=100 + i * 10 + k % 3).replace("\n", " ")
                      for k in range(5)]
        rows.append({"input": "", "context": "\n\n".join(paragraphs), "answers": ["3"], "length": 200,
                     "dataset": "passage_count", "language": "en", "all_classes": None, "_id": f"gauntlet{i}"})
    (folder / "passage_count.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def prepare(tree: Path) -> None:
    tree = Path(tree)
    root = tree / G
    _model(tree)
    _pattern(root / "pattern")
    _booksum(root / "datasets" / "booksum.jsonl.zst")
    _longbench(root / "longbench")
    (root / "site").mkdir(parents=True, exist_ok=True)
    (root / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (root / "out").mkdir(parents=True, exist_ok=True)


TRAIN = ("torchrun --nnodes 1 --nproc_per_node 2 duo_attn/train.py "
         f"--model_name {MODEL} --batch_size 1 --max_length 2048 --dataset_name {G}/datasets/booksum.jsonl.zst "
         "--sink_size 128 --recent_size 256 --num_steps 5 --lr 0.02 --reg_weight 0.05 --exp_name tiny "
         "--min_needle_depth_ratio 0.05 --max_needle_depth_ratio 0.95 --context_length_min 1024 "
         "--context_length_max 2048 --context_lengths_num_intervals 4 --depth_ratio_num_intervals 100 "
         "--gradient_accumulation_steps 1 --num_passkey 2 --dataset_format multiple_passkey "
         f"--output_dir {G}/attn_patterns/tiny --disable_wandb --save_steps 5")

NEEDLE = ("cd eval/needle && mkdir -p logs img results && "
          "python -u needle_in_haystack.py --s_len 0 --e_len 512 --context_lengths_min 256 "
          "--context_lengths_max 512 --model_provider LLaMA --model_name_suffix duo --attn_load_dir ../../_gauntlet/pattern "
          "--sparsity 0.5 --simulation_length 0 --context_lengths_num_intervals 2 --document_depth_percent_intervals 2 "
          "--sink_size 16 --recent_size 32 --prefilling_chunk_size 128 --model_path ../../models/Llama-2-7B-32K-Instruct "
          "&& python visualize.py --folder_path results/Llama-2-7B-32K-Instruct_duo/ --model_name tiny "
          "--pretrained_len 512")

LONGBENCH = "python -u eval/LongBench/pred.py --model Llama-2-7B-32K-Instruct --task passage_count"
PRED = "eval/LongBench/pred/Llama-2-7B-32K-Instruct"

STEPS = [
    Step("train", TRAIN, outputs=[f"{G}/attn_patterns/tiny/full_attention_heads.tsv",
                                  f"{G}/attn_patterns/tiny/optimizer_scheduler_state-step=5-rank=1.pt"],
         timeout=600, env=ENV),
    Step("needle", NEEDLE, outputs=["eval/needle/results/Llama-2-7B-32K-Instruct_duo/*_results.json",
                                    "eval/needle/img/*"], timeout=400, env=ENV),
    Step("longbench", f"{LONGBENCH} --method duo_attn --attn_load_dir {G}/pattern --sparsity 0.5 --sink_size 16 "
                      "--recent_size 32 --decoding_simulation_length 8",
         outputs=[f"{PRED}/passage_count-duo_attn-pattern-pattern-sp-0.5.jsonl"], timeout=300, env=LONGBENCH_ENV),
    Step("longbench-full", f"{LONGBENCH} --method full --decoding_simulation_length 8",
         outputs=[f"{PRED}/passage_count-full.jsonl"], timeout=300, env=LONGBENCH_ENV),
    Step("efficiency", f"python eval/efficiency/benchmark_static.py --model_name {MODEL} --max_length 256 "
                       f"--attn_load_dir {G}/pattern --output_dir {G}/out/efficiency --seed 42 --sparsity 0.5 "
                       "--prefilling_chunk_size 64",
         outputs=[f"{G}/out/efficiency/benchmark_result.txt"], timeout=300, env=ENV),
]
