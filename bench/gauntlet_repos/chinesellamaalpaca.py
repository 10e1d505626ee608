"""ymcui/Chinese-LLaMA-Alpaca: the README's training scripts, the LoRA merge and transformers inference, tiny.

- ``sft``: scripts/training/run_sft.sh's command (from scripts/training: ``torchrun --nnodes 1 --nproc_per_node 1
  run_clm_sft_with_peft.py ... --fp16 ... --torch_dtype float16 --gradient_checkpointing --ddp_find_unused_parameters
  False``, LoRA rank 8 on q/k/v/o/gate/down/up with embed_tokens and lm_head as modules_to_save), scaled down by its
  own flags: ``--max_seq_length 256 --gradient_accumulation_steps 2 --max_steps 3 --logging_steps 1 --eval_steps 3
  --save_steps 3 --preprocessing_num_workers 1`` and a fixed ``--seed`` (the script's ``$RANDOM``). Without the
  script's ``--deepspeed ds_zero2_no_offload.json``: off CUDA, accelerate 0.23's DeepSpeed path JIT-builds DeepSpeed's
  shm comm op (over 10 minutes on a loaded 2-core machine) and then asks for nccl, so the ZeRO run cannot start off
  CUDA with these pins whatever the code; the launcher runs Trainer's own path without the flag. ``--peft_path``
  (continue from a released Alpaca LoRA, optional in the wiki) is left out: the LoRA is made new. The base model is
  the "merged Chinese LLaMA" (vocabulary 49953), the tokenizer the Chinese Alpaca one (49954 with [PAD]): the script
  refuses any other tokenizer size, and resizes the embeddings to it.
- run_pt.sh is not a step: run_clm_pt_with_peft.py imports transformers.testing_utils (pytest, not in these pins),
  and a 2-process run of it took 455 s here.
- ``merge``: the README's ``python scripts/merge_llama_with_chinese_lora.py --base_model ... --lora_model
  SFT_OUTPUT/sft_lora_model --output_type huggingface --output_dir ...`` on the SFT LoRA. The script infers the model
  size from the hidden size through a hard-coded table (4096 / 5120 / 6656 / 8192: 7B ... 65B) and stops with a
  KeyError for anything else; a tiny model cannot have those sizes (the embedding alone would be 49954 x 4096), so
  prepare() writes a copy of the tree's script beside it (scripts/_gauntlet_merge_llama_with_chinese_lora.py, the
  ported file on the port) whose table has one more row, the tiny hidden size -> '7B'. Nothing else is changed.
- ``inference``: the README's ``python scripts/inference/inference_hf.py --base_model MERGED --with_prompt
  --data_file FILE --predictions_file ...`` on the merged model (its own device choice: cuda:0 when CUDA is there,
  else the CPU; float16 loads, device_map='auto', the repository's attention and NTK patches, 400 sampled tokens).

The tokenizers are made as scripts/merge_tokenizer/merge_tokenizers.py makes Chinese LLaMA's: a tiny SentencePiece
BPE model ("LLaMA's", trained on synthetic text plus the repository's prompt template) with the pieces of the
repository's own scripts/merge_tokenizer/chinese_sp.model appended, then filler pieces up to Chinese LLaMA's 49953;
the Alpaca tokenizer adds [PAD] (49954). The model is a tiny random LLaMA (hidden 32, 2 layers, 4 heads) in float16,
its pytorch_model.bin written as on a GPU box (storages tagged cuda:0). The data are Alpaca-style JSON records
(instruction / input / output) and a plain-text corpus, synthetic (data/alpaca_data_zh_51k.json and
data/pt_sample_data.txt are absent from the snapshot, large blobs).
"""

import json
import os
from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
TINY_HIDDEN = 32
ENV = {
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_DISABLED": "true",
    "TOKENIZERS_PARALLELISM": "false",
    "TORCH_EXTENSIONS_DIR": "{tree}/_gauntlet/torch_extensions",
}

PROMPTS = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n\n{instruction}\n\n### Response:\n\n"
    "### Instruction:\n{instruction}\n\n### Response: \n"
    "为什么要减少污染，保护环境？\n"
)


def tokenizer_model(text: str, folder: Path) -> bytes:
    """Chinese LLaMA's SentencePiece model, tiny: LLaMA's (trained here) + chinese_sp.model's pieces + filler."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2_model

    folder.mkdir(parents=True, exist_ok=True)
    prefix = folder / "llama"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_prefix=str(prefix), vocab_size=160, model_type="bpe",
        character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1, minloglevel=2)
    llama = sp_pb2_model.ModelProto()
    llama.ParseFromString(prefix.with_suffix(".model").read_bytes())
    chinese = sp_pb2_model.ModelProto()
    chinese.ParseFromString((folder.parent.parent / "scripts" / "merge_tokenizer" / "chinese_sp.model").read_bytes())
    seen = {p.piece for p in llama.pieces}
    for p in chinese.pieces:  # as merge_tokenizers.py does
        if p.piece not in seen and len(llama.pieces) < 49953:
            new = sp_pb2_model.ModelProto().SentencePiece()
            new.piece = p.piece
            new.score = 0
            llama.pieces.append(new)
            seen.add(p.piece)
    i = 0
    while len(llama.pieces) < 49953:  # Chinese LLaMA's size: 49953 pieces
        new = sp_pb2_model.ModelProto().SentencePiece()
        new.piece = f"\u2581zzq{i}"
        new.score = -1000.0
        llama.pieces.append(new)
        i += 1
    return llama.SerializeToString()


def prepare(tree: Path) -> None:
    os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"  # sentencepiece 0.1.99's old pb2
    import torch
    import transformers

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    text = synthetic_text(words=3000, seed=0) + PROMPTS * 5

    sp_file = root / "spm" / "chinese_llama.model"
    sp_file.write_bytes(tokenizer_model(text, root / "spm"))
    llama_tok = transformers.LlamaTokenizer(vocab_file=str(sp_file))
    assert len(llama_tok) == 49953, len(llama_tok)
    llama_tok.save_pretrained(root / "chinese_llama_tokenizer")
    alpaca_tok = transformers.LlamaTokenizer(vocab_file=str(sp_file))
    alpaca_tok.add_special_tokens({"pad_token": "[PAD]"})
    assert len(alpaca_tok) == 49954, len(alpaca_tok)
    alpaca_tok.save_pretrained(root / "chinese_alpaca_tokenizer")

    # The "merged Chinese LLaMA" base model (vocabulary 49953), float16, as a GPU box saves it.
    config = transformers.LlamaConfig(
        vocab_size=49953, hidden_size=TINY_HIDDEN, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=512, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        torch_dtype="float16")
    transformers.set_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.float16)
    base = root / "chinese_llama"
    model.save_pretrained(base, safe_serialization=False)
    llama_tok.save_pretrained(base)
    for stale in base.glob("*.safetensors"):
        stale.unlink()
    save_cuda_checkpoint(model.state_dict(), base / "pytorch_model.bin")

    # Alpaca-style instruction data (data/alpaca_data_zh_51k.json's format) and a validation file.
    r = rng(0)
    lines = [line for line in text.splitlines() if line and "#" not in line and "{" not in line]
    def records(n):
        return [{"instruction": r.choice(lines)[:60], "input": r.choice(["", r.choice(lines)[:30]]),
                 "output": r.choice(lines)[:80]} for _ in range(n)]
    (root / "sft_data").mkdir(exist_ok=True)
    (root / "sft_data" / "alpaca_tiny.json").write_text(json.dumps(records(8), ensure_ascii=False, indent=2))
    (root / "sft_eval").mkdir(exist_ok=True)
    (root / "sft_eval" / "eval.json").write_text(json.dumps(records(2), ensure_ascii=False, indent=2))

    # Plain-text pre-training corpus (data/pt_sample_data.txt's format: one document a line).
    (root / "pt_data").mkdir(exist_ok=True)
    (root / "pt_data" / "pt_tiny.txt").write_text(synthetic_text(words=1200, seed=5))

    (root / "instructions.txt").write_text("What does the model learn?\n为什么要减少污染，保护环境？\n")
    (root / "out").mkdir(exist_ok=True)

    # The merge script's model-size table, one row longer (the tiny hidden size); nothing else changes.
    source = (tree / "scripts" / "merge_llama_with_chinese_lora.py").read_text(encoding="utf8")
    marker = "emb_to_model_size = {\n"
    assert marker in source
    source = source.replace(marker, marker + f"    {TINY_HIDDEN} : '7B',  # gauntlet: the tiny model's hidden size\n", 1)
    (tree / "scripts" / "_gauntlet_merge_llama_with_chinese_lora.py").write_text(source, encoding="utf8")


LORA = ("--lora_rank 8 --lora_alpha 32 --trainable q_proj,v_proj,k_proj,o_proj,gate_proj,down_proj,up_proj "
        "--modules_to_save embed_tokens,lm_head --lora_dropout 0.05")
UP = "../.."

SFT = (
    "cd scripts/training && torchrun --nnodes 1 --nproc_per_node 1 --master_port $((20000 + RANDOM % 20000)) "
    "run_clm_sft_with_peft.py "
    f"--model_name_or_path {UP}/{G}/chinese_llama --tokenizer_name_or_path {UP}/{G}/chinese_alpaca_tokenizer "
    f"--dataset_dir {UP}/{G}/sft_data --validation_split_percentage 0.001 --per_device_train_batch_size 1 "
    "--per_device_eval_batch_size 1 --do_train --do_eval --seed 1234 --fp16 --num_train_epochs 1 --max_steps 3 "
    "--lr_scheduler_type cosine --learning_rate 1e-4 --warmup_ratio 0.03 --weight_decay 0 --logging_strategy steps "
    "--logging_steps 1 --save_strategy steps --save_total_limit 3 --evaluation_strategy steps --eval_steps 3 "
    "--save_steps 3 --gradient_accumulation_steps 2 --preprocessing_num_workers 1 --max_seq_length 256 "
    f"--output_dir {UP}/{G}/output/sft --overwrite_output_dir --ddp_timeout 30000 --logging_first_step True {LORA} "
    f"--torch_dtype float16 --validation_file {UP}/{G}/sft_eval/eval.json --gradient_checkpointing "
    "--ddp_find_unused_parameters False"
)

STEPS = [
    Step("sft", SFT, outputs=[f"{G}/output/sft/sft_lora_model/adapter_model.bin",
                              f"{G}/output/sft/sft_lora_model/adapter_config.json",
                              f"{G}/output/sft/eval_results.json"], timeout=600, env=ENV),
    Step("merge",
         f"python scripts/_gauntlet_merge_llama_with_chinese_lora.py --base_model {G}/chinese_llama "
         f"--lora_model {G}/output/sft/sft_lora_model --output_type huggingface --output_dir {G}/merged",
         outputs=[f"{G}/merged/config.json", f"{G}/merged/pytorch_model.bin", f"{G}/merged/tokenizer.model"],
         timeout=300, env=ENV),
    Step("inference",
         f"python scripts/inference/inference_hf.py --base_model {G}/merged --with_prompt "
         f"--data_file {G}/instructions.txt --predictions_file {G}/out/predictions/predictions.json",
         outputs=[f"{G}/out/predictions/predictions.json"], timeout=300, env=ENV),
]
