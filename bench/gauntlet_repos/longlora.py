"""LongLoRA's README commands, tiny, with the repository's own flags:

- ``fine-tune``: the README's ``torchrun --nproc_per_node=8 fine-tune.py ...`` (full fine-tuning with the S2-Attn patch:
  ``--use_flash_attn True --low_rank_training False --bf16 True --tf32 True``, the same optimiser and schedule flags) as
  a 2-process torchrun, scaled down by its own flags: ``--model_max_length 256`` (over the tiny model's 128 positions,
  so fine-tune.py sets linear RoPE scaling, factor 2, as it does for 8k on LLaMA-2's 4k), ``--gradient_accumulation_steps
  1 --warmup_steps 1 --max_steps 2``. Without the README's ``--deepspeed ds_configs/stage2.json``: DeepSpeed 0.19.5
  installs and has a CPU accelerator, but accelerate 0.23 (the repository's floor, of transformers 4.34's time)
  hard-codes DeepSpeed's backend to nccl and its device to cuda:LOCAL_RANK (accelerate/state.py), so the ZeRO run cannot
  start off CUDA with these pins whatever the code; the README's launcher runs Trainer's own DDP without the flag.
  fine-tune.py reads its corpus with ``load_dataset("togethercomputer/RedPajama-Data-1T-Sample")`` (hard-coded): a
  local folder of that relative name (one jsonl, the Hub's text/meta columns, 2 documents) is what load_dataset reads
  first. ``num_proc=128`` is capped by datasets to the 2 rows.
- ``eval``: the README's ``python3 eval.py --seq_len ... --context_size ... --batch_size 1 --base_model
  path_to_saving_checkpoints --data_path pg19/test.bin`` on the fine-tuned model (a fully fine-tuned checkpoint:
  pytorch_model.bin and config.json), ``--seq_len 64 --context_size 256`` on a synthetic test.bin (uint16 tokens, as
  the README's tokenized PG19). eval.py's ``--flash_attn`` (type=bool) is True by default: the patch's full-attention
  flash forward.
- ``inference``: the README's ``python3 inference.py --base_model ... --question ... --context_size ... --max_gen_len
  ... --flash_attn True --material FILE.txt`` on the fine-tuned model (the flash inference forward, generate with a
  KV cache, torch.compile as written), ``--max_gen_len 8``.
- ``passkey``: the README's ``python3 passkey_retrivial.py --context_size --base_model --max_tokens --interval`` on the
  fine-tuned model, ``--max_tokens 300 --interval 300 --num_tests 1`` (one prompt of about 1k characters; the default
  --flash_attn True, so generate without a cache).

The base model is a tiny random LLaMA (hidden 32, 2 layers, 4 heads, 128 positions) in Hugging Face format with its
``pytorch_model.bin`` written as on a GPU box (storages tagged cuda:0), and a SentencePiece tokenizer (byte fallback,
identity normalisation, so inference.py's ``out.split(prompt)`` finds the prompt in the decoded output) saved as
LlamaTokenizer files. eval.py / inference.py / passkey_retrivial.py resize the embeddings to 32001 (LLaMA's vocabulary
plus [PAD]); the new rows are random, so the model is built to answer EOS at once (a constant residual channel only
EOS's output row reads), which keeps generated ids inside the tiny tokenizer's vocabulary.
"""

import json
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
MODEL = f"{G}/llama"
FT = f"{G}/ft"

ENV = {
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

PROMPT_TEXT = ("[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>> \n\n {instruction} [/INST]"
               "Below is an instruction that describes a task. ### Instruction: ### Response: "
               "What is the pass key? The pass key is 12345. Remember it. 67890 is the pass key. "
               "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
               "I will quiz you about the important information there. The grass is green. The sky is blue. "
               "The sun is yellow. Here we go. There and back again. What does the model learn?\n")


def tokenizer_model(text: str, prefix: Path) -> Path:
    import sentencepiece as spm

    prefix.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_prefix=str(prefix), vocab_size=400, model_type="bpe",
        character_coverage=1.0, byte_fallback=True, normalization_rule_name="identity",
        remove_extra_whitespaces=False, bos_id=1, eos_id=2, unk_id=0, pad_id=-1, minloglevel=2)
    return prefix.with_suffix(".model")


def prepare(tree: Path) -> None:
    import numpy as np
    import torch
    import transformers

    root = Path(tree) / G
    text = synthetic_text(words=3000, seed=0) + PROMPT_TEXT * 3
    spm = tokenizer_model(text, root / "spm" / "tok")
    tokenizer = transformers.LlamaTokenizer(vocab_file=str(spm), legacy=True)
    tokenizer.save_pretrained(root / "llama")
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
        bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    transformers.set_seed(0)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # greedy decoding answers EOS at once, whatever rows a resize adds
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[config.eos_token_id, 0] = 1.5
    model = model.to(torch.bfloat16)
    model.save_pretrained(root / "llama", safe_serialization=False)
    for stale in (root / "llama").glob("*.safetensors"):
        stale.unlink()
    save_cuda_checkpoint(model.state_dict(), root / "llama" / "pytorch_model.bin")

    corpus = Path(tree) / "togethercomputer" / "RedPajama-Data-1T-Sample"  # load_dataset's local-folder lookup
    corpus.mkdir(parents=True, exist_ok=True)
    rows = [{"text": synthetic_text(words=600, seed=s), "meta": json.dumps({"source": "gauntlet"})} for s in (1, 2)]
    (corpus / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    ids = tokenizer(synthetic_text(words=600, seed=3))["input_ids"]
    (root / "pg19").mkdir(parents=True, exist_ok=True)
    np.array(ids[:700], dtype=np.uint16).tofile(root / "pg19" / "test.bin")  # 700 tokens: two 64-token windows
    (root / "materials").mkdir(exist_ok=True)
    (root / "materials" / "paper1.txt").write_text(synthetic_text(words=60, seed=4))


FINE_TUNE = (
    f"torchrun --nproc_per_node=2 --master_port 29631 fine-tune.py --model_name_or_path {MODEL} --bf16 True "
    f"--output_dir {FT} --cache_dir {G}/cache --model_max_length 256 --use_flash_attn True "
    "--low_rank_training False --num_train_epochs 1 --per_device_train_batch_size 1 --per_device_eval_batch_size 2 "
    "--gradient_accumulation_steps 1 --evaluation_strategy no --save_strategy steps --save_steps 1000 "
    "--save_total_limit 2 --learning_rate 2e-5 --weight_decay 0.0 --warmup_steps 1 "
    "--lr_scheduler_type constant_with_warmup --logging_steps 1 --tf32 True --max_steps 2"
)

STEPS = [
    Step("fine-tune", FINE_TUNE, outputs=[f"{FT}/pytorch_model.bin", f"{FT}/config.json", f"{FT}/tokenizer.model"],
         timeout=600, env=ENV),
    Step("eval",
         f"python3 eval.py --seq_len 64 --context_size 256 --batch_size 1 --base_model {FT} "
         f"--cache_dir {G}/cache --data_path {G}/pg19/test.bin",
         timeout=300, env=ENV),
    Step("inference",
         f"python3 inference.py --base_model {FT} --cache_dir {G}/cache "
         "--question 'What does the model learn?' --context_size 256 --max_gen_len 8 --flash_attn True "
         f"--material {G}/materials/paper1.txt",
         timeout=300, env=ENV),
    Step("passkey",
         f"python3 passkey_retrivial.py --context_size 256 --base_model {FT} --cache_dir {G}/cache "
         "--max_tokens 300 --interval 300 --num_tests 1",
         timeout=300, env=ENV),
]
