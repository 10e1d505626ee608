"""mosaicml/llm-foundry: the README's Quickstart, tiny, with its own commands and yaml keys (run from scripts/).

- ``data-prep-train`` / ``data-prep-val``: ``python data_prep/convert_dataset_json.py`` (the README's
  convert_dataset_hf.py needs allenai/c4 from the Hub; its json twin is the same MDS conversion, concatenated and
  tokenized: ``--concat_tokens --tokenizer --eos_text '<|endoftext|>'``) on synthetic jsonl text, into
  ``_gauntlet/my-copy-c4/{train_small,val_small}``.
- ``train``: ``composer train/train.py train/yamls/pretrain/mpt-125m.yaml variables.data_local=...
  train_loader.dataset.split=train_small eval_loader.dataset.split=val_small max_duration=... eval_interval=...
  save_folder=...`` as the README has it, the model and batches scaled down by the yaml's own keys (d_model,
  n_heads, n_layers, expansion_ratio, vocab_size, max_seq_len, batch sizes, num_workers 0, t_warmup). Kept as the
  yaml has them: attn_impl flash, precision amp_bf16, FSDP FULL_SHARD (mixed_precision PURE), init_device meta, the
  speed / lr / memory / runtime-estimator callbacks. One process (``composer`` with its default -n).
- ``train-2proc``: the same on two processes, ``composer -n 2`` (Composer's own launcher; FSDP over 2 ranks).
- ``convert-to-hf``: ``python inference/convert_composer_to_hf.py --composer_path ep0-ba4-rank0.pt
  --hf_output_path ... --output_precision bf16`` on the single-process checkpoint, re-saved first as a CUDA
  machine's ``torch.save`` writes it (every storage tagged cuda:0; ``_gauntlet/cuda_tag.py``, the tagging of
  ``_recipe.save_cuda_checkpoint``), since a GPU run writes it on the GPU box.
- ``eval-copa``: ``composer eval/eval.py eval/yamls/hf_eval.yaml icl_tasks=eval/yamls/copa.yaml
  model_name_or_path=...`` on the converted model (as ``variables.model_name_or_path``: the README's top-level key is
  refused, "Unused parameters ['model_name_or_path']", on any device) (copa.jsonl ships with the repository), limited by its own
  ``icl_subset_num_batches`` and ``max_seq_len``.
- ``generate``: ``python inference/hf_generate.py --name_or_path ... --max_new_tokens 8 --prompts ...``
  (the README's two prompts).

The tokenizer is a tiny byte-level BPE GPTNeoXTokenizerFast (vocabulary 300, ``<|endoftext|>``) trained on
synthetic text by prepare() and passed as ``tokenizer.name`` (a local folder), in place of EleutherAI/gpt-neox-20b.
Composer 0.32.1 pins torch < 2.7.1 and torchvision < 0.22.1: prepare() installs ``mosaicml==0.32.1`` with pip's
``--no-deps`` beside torch 2.13 (its other requirements are in the entry's list). llmfoundry itself runs from the
tree (``PYTHONPATH``), as ``pip install -e .`` would.
"""

import json
from pathlib import Path

from _recipe import Step, synthetic_text

G = "_gauntlet"
ENV = {
    "PYTHONPATH": "{tree}",
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "disabled",
    "MLFLOW_TRACKING_URI": "file://{tree}/_gauntlet/mlruns",
    "TOKENIZERS_PARALLELISM": "false",
}
TOK = f"../{G}/tokenizer"
DATA = f"../{G}/my-copy-c4"

CUDA_TAG = r'''
import sys, torch
from torch import serialization
src, dst = sys.argv[1], sys.argv[2]
state = torch.load(src, map_location="cpu", weights_only=False)
original = serialization.location_tag
serialization.location_tag = lambda s: "cuda:0" if original(s) == "cpu" else original(s)
torch.save(state, dst)
'''

COMPOSER_PINS = ["mosaicml==0.32.1", "setuptools==80.9.0"]  # setuptools: pkg_resources (env_logging_callback)


def prepare(tree: Path) -> None:
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", *COMPOSER_PINS], check=True)

    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    root = Path(tree) / G
    root.mkdir(parents=True, exist_ok=True)
    text = synthetic_text(words=6000, seed=0)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<|padding|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text.splitlines(), trainer)
    fast = transformers.GPTNeoXTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                             eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.save_pretrained(root / "tokenizer")

    json_dir = root / "json"
    json_dir.mkdir(exist_ok=True)
    for split, seed, docs in (("train", 1, 40), ("val", 2, 12)):
        rows = [{"text": synthetic_text(words=60, seed=seed * 1000 + i).replace("\n", " ")} for i in range(docs)]
        (json_dir / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "cuda_tag.py").write_text(CUDA_TAG)


PREP = (f"cd scripts && python data_prep/convert_dataset_json.py --concat_tokens 32 --tokenizer {TOK} "
        "--eos_text '<|endoftext|>' --split train")
TRAIN = (f"train/train.py train/yamls/pretrain/mpt-125m.yaml variables.data_local={DATA} "
         "train_loader.dataset.split=train_small eval_loader.dataset.split=val_small max_duration=4ba "
         "eval_interval=2ba variables.max_seq_len=32 model.d_model=32 model.n_heads=2 model.n_layers=2 "
         f"model.expansion_ratio=2 model.vocab_size=320 tokenizer.name={TOK} global_train_batch_size=4 "
         "device_train_microbatch_size=2 device_eval_batch_size=2 train_loader.num_workers=0 "
         "eval_loader.num_workers=0 train_loader.prefetch_factor=null eval_loader.prefetch_factor=null "
         "train_loader.persistent_workers=false eval_loader.persistent_workers=false eval_subset_num_batches=2 scheduler.t_warmup=1ba")
HF = f"../{G}/mpt-125m-hf"

STEPS = [
    Step("data-prep-train", f"{PREP} --path ../{G}/json/train.jsonl --out_root {DATA}/train_small",
         outputs=[f"{G}/my-copy-c4/train_small/index.json"], env=ENV, timeout=300),
    Step("data-prep-val", f"{PREP} --path ../{G}/json/val.jsonl --out_root {DATA}/val_small",
         outputs=[f"{G}/my-copy-c4/val_small/index.json"], env=ENV, timeout=300),
    Step("train", f"cd scripts && composer {TRAIN} save_folder=../{G}/mpt-125m",
         outputs=[f"{G}/mpt-125m/ep0-ba4-rank0.pt"], env=ENV, timeout=600),
    Step("train-2proc", f"cd scripts && composer -n 2 {TRAIN} save_folder=../{G}/mpt-125m-2proc",
         outputs=[f"{G}/mpt-125m-2proc/ep0-ba4-rank0.pt"], env=ENV, timeout=600),
    Step("convert-to-hf",
         f"python {G}/cuda_tag.py {G}/mpt-125m/ep0-ba4-rank0.pt {G}/mpt-125m/cuda-ep0-ba4-rank0.pt && cd scripts && "
         f"python inference/convert_composer_to_hf.py --composer_path ../{G}/mpt-125m/cuda-ep0-ba4-rank0.pt "
         f"--hf_output_path {HF} --output_precision bf16",
         outputs=[f"{G}/mpt-125m-hf/config.json"], env=ENV, timeout=300),
    Step("eval-copa",
         f"cd scripts && composer eval/eval.py eval/yamls/hf_eval.yaml icl_tasks=eval/yamls/copa.yaml "
         f"variables.model_name_or_path={HF} variables.max_seq_len=64 icl_subset_num_batches=2",
         env=ENV, timeout=600),
    Step("generate",
         f"cd scripts && python inference/hf_generate.py --name_or_path {HF} --max_new_tokens 8 --prompts "
         "\"The answer to life, the universe, and happiness is\" "
         "\"Here's a quick recipe for baking chocolate chip cookies: Start by\"",
         env=ENV, timeout=300),
]
