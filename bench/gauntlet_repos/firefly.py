"""yangjianxin1/Firefly: the README's training commands and its chat script, tiny.

Every training run is ``train.py --train_args_file JSON``; the JSONs are the repository's own (train_args/), copied
by prepare() into ``_gauntlet/train_args/`` and scaled down by their own keys only: ``output_dir``, ``train_file``,
``max_seq_length``, ``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``max_steps`` (2),
``logging_steps`` / ``save_steps`` / ``warmup_steps`` (1), ``tokenize_num_workers``. Their precision (``fp16: true``),
optimizer (``paged_adamw_32bit`` for QLoRA, ``adamw_hf`` for full), ``gradient_checkpointing``, ``deepspeed``
(the repository's train_args/ds_z3_config.json, ZeRO-3 with CPU offload) and ``report_to: tensorboard`` are kept.
``model_name_or_path`` stays ``01-ai/Yi-6B-Chat`` (the name both Yi configs and chat.py use): a tiny random Llama
(Yi's architecture) laid out in an offline Hugging Face cache (HF_HOME, HF_HUB_OFFLINE=1), its weights
``pytorch_model.bin`` written as a GPU box writes them (storages tagged cuda:0).

- ``sft-qlora``: README "单卡QLoRA指令微调" ``python train.py --train_args_file train_args/sft/qlora/yi-6b-sft-qlora.json``
  (train_mode defaults to qlora there: BitsAndBytesConfig(load_in_4bit, nf4), trl's get_kbit_device_map,
  prepare_model_for_kbit_training, bnb.nn.Linear4bit LoRA targets, paged AdamW).
- ``sft-full``: README "全量参数指令微调" ``deepspeed --num_gpus={num_gpus} train.py --train_args_file
  train_args/sft/full/yi-6b-sft-full.json`` (train_mode full, the ZeRO-3 config with CPU offload) with --num_gpus=1
  (the deepspeed launcher sets RANK / WORLD_SIZE / MASTER_ADDR; a bare ``python train.py`` with a ``deepspeed`` key
  needs mpi4py, which requirements.txt lists, to discover a one-process world).
- ``sft-qlora-2proc``: README "多卡QLoRA指令微调" ``torchrun --nproc_per_node={num_gpus} train.py ...`` with 2
  processes, on the QLoRA JSON with its own output_dir.
- ``chat``: README "模型推理" ``cd script/chat; python chat.py`` as written (it hard-codes 01-ai/Yi-6B-Chat, template
  yi, fp16, device_map='auto'); one question on stdin, then EOF, which ends its input() loop with EOFError: the step
  passes when it printed the model's answer ("Firefly：") and ended on that EOFError.

The data: a synthetic jsonl in data/dummy_data.jsonl's format (conversation_id, category, conversation: [{human,
assistant}, ...]), 8 records, English words (the tiny tokenizer knows no Chinese).
"""

import json
from pathlib import Path

from _recipe import Step, fake_hub_model, rng, save_cuda_checkpoint, synthetic_text, tiny_llama

G = "_gauntlet"
MODEL = "01-ai/Yi-6B-Chat"
ENV = {
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_DISABLED": "true",
    "TORCH_EXTENSIONS_DIR": "{tree}/_gauntlet/torch_extensions",
}

# The repository's JSON keys that scale a run down (nothing that picks a device or a precision).
SCALE = {
    "train_file": f"./{G}/data/sft.jsonl",
    "max_seq_length": 64,
    "per_device_train_batch_size": 2,
    "gradient_accumulation_steps": 1,
    "max_steps": 2,
    "logging_steps": 1,
    "save_steps": 1,
    "warmup_steps": 1,
    "save_total_limit": 1,
}

CONFIGS = {  # (the repository's JSON, the copy's output_dir)
    "qlora": ("train_args/sft/qlora/yi-6b-sft-qlora.json", f"{G}/output/firefly-yi-6b-sft-qlora"),
    "full": ("train_args/sft/full/yi-6b-sft-full.json", f"{G}/output/firefly-yi-6b-sft-full"),
    "qlora2": ("train_args/sft/qlora/yi-6b-sft-qlora.json", f"{G}/output/firefly-yi-6b-sft-qlora-2proc"),
}


def args_file(key: str) -> str:
    return f"{G}/train_args/{key}.json"


def prepare(tree: Path) -> None:
    import torch
    import transformers

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    text = synthetic_text(3000)

    # A tiny random Llama (Yi-6B-Chat is a Llama) and its slow SentencePiece tokenizer, in an offline HF cache.
    tokenizer, config = tiny_llama(root / "tiny", text)
    config.torch_dtype = "bfloat16"
    model = transformers.LlamaForCausalLM(config)

    def save(folder: Path) -> None:
        config.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        save_cuda_checkpoint(state, folder / "pytorch_model.bin")  # as a GPU box writes it

    fake_hub_model(root / "hf", MODEL, save)

    # data/dummy_data.jsonl's format, English words.
    r = rng(0)
    lines = text.splitlines()
    (root / "data").mkdir(parents=True, exist_ok=True)
    with open(root / "data" / "sft.jsonl", "w", encoding="utf8") as out:
        for i in range(8):
            turns = [{"human": r.choice(lines)[:60], "assistant": r.choice(lines)[:80]} for _ in range(1 + i % 2)]
            out.write(json.dumps({"conversation_id": i + 1, "category": "Brainstorming", "conversation": turns},
                                 ensure_ascii=False) + "\n")

    # The repository's train args, scaled down by their own keys.
    (root / "train_args").mkdir(parents=True, exist_ok=True)
    for key, (source, output_dir) in CONFIGS.items():
        args = json.loads((tree / source).read_text(encoding="utf8"))
        args.update(SCALE, output_dir=f"./{output_dir}")
        (tree / args_file(key)).write_text(json.dumps(args, indent=4), encoding="utf8")
    (root / "out").mkdir(parents=True, exist_ok=True)
    del torch


CHAT_LOG = f"{G}/out/chat.txt"

STEPS = [
    Step("sft-qlora", f"python train.py --train_args_file {args_file('qlora')}",
         outputs=[f"{CONFIGS['qlora'][1]}/adapter_config.json", f"{CONFIGS['qlora'][1]}/adapter_model.*",
                  f"{CONFIGS['qlora'][1]}/train_results.json"], timeout=600, env=ENV),
    Step("sft-full", "deepspeed --num_gpus=1 --master_port=$((20000 + RANDOM % 20000)) train.py "
         f"--train_args_file {args_file('full')}",
         outputs=[f"{CONFIGS['full'][1]}/config.json", f"{CONFIGS['full'][1]}/train_results.json"],
         timeout=420, env=ENV),
    Step("sft-qlora-2proc", "torchrun --nproc_per_node=2 --master_port=$((20000 + RANDOM % 20000)) train.py "
         f"--train_args_file {args_file('qlora2')}",
         outputs=[f"{CONFIGS['qlora2'][1]}/adapter_config.json", f"{CONFIGS['qlora2'][1]}/train_results.json"],
         timeout=600, env=ENV),
    Step("chat", f"cd script/chat && printf 'What does the model learn?\\n' | python chat.py > ../../{CHAT_LOG} 2>&1; "
         f"cd ../..; tail -c 1500 {CHAT_LOG}; grep -q 'Firefly：' {CHAT_LOG} && tail -n 2 {CHAT_LOG} | grep -q EOFError",
         outputs=[CHAT_LOG], timeout=300, env=ENV),
]
