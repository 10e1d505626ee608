"""Stanford Alpaca's README fine-tune (torchrun, FSDP full_shard auto_wrap on LlamaDecoderLayer, bf16, tf32)
on a tiny random Llama and a synthetic alpaca_data.json, then weight_diff.py make_diff / recover."""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text, tiny_llama

G = "_gauntlet"
# everything is local: fail fast instead of retrying the hub when a path is missing
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def prepare(tree: Path) -> None:
    import json

    import transformers

    root = Path(tree) / G
    root.mkdir(parents=True, exist_ok=True)
    text = synthetic_text(3000)

    # "<your_path_to_hf_converted_llama_ckpt_and_tokenizer>": config + slow tokenizer + weights
    # written on a CUDA machine (pytorch_model.bin, storages tagged cuda:0).
    llama = root / "llama"
    _, config = tiny_llama(llama, text)
    model = transformers.LlamaForCausalLM(config)
    config.save_pretrained(llama)
    save_cuda_checkpoint(model.state_dict(), llama / "pytorch_model.bin")

    # alpaca_data.json: instruction / input / output records, with and without input.
    lines = text.splitlines()
    records = []
    for i in range(8):
        records.append({
            "instruction": lines[i][:60],
            "input": lines[i + 10][:40] if i % 2 else "",
            "output": lines[i + 20][:50],
        })
    (root / "alpaca_data.json").write_text(json.dumps(records, indent=2))


# The README's command, sizes shrunk (2 processes, batch 1, 2 steps) and
# a random port for --master_port.
TRAIN = (
    "torchrun --nproc_per_node=2 --master_port=$((20000 + RANDOM % 20000)) train.py"
    f" --model_name_or_path {G}/llama"
    f" --data_path {G}/alpaca_data.json"
    " --bf16 True"
    f" --output_dir {G}/out"
    " --num_train_epochs 1"
    " --max_steps 2"
    " --per_device_train_batch_size 1"
    " --per_device_eval_batch_size 1"
    " --gradient_accumulation_steps 1"
    " --evaluation_strategy 'no'"
    " --save_strategy 'steps'"
    " --save_steps 2"
    " --save_total_limit 1"
    " --learning_rate 2e-5"
    " --weight_decay 0."
    " --warmup_ratio 0.03"
    " --lr_scheduler_type 'cosine'"
    " --logging_steps 1"
    " --fsdp 'full_shard auto_wrap'"
    " --fsdp_transformer_layer_cls_to_wrap 'LlamaDecoderLayer'"
    " --tf32 True"
)

STEPS = [
    Step("train-fsdp", TRAIN, outputs=[f"{G}/out/config.json", f"{G}/out/trainer_state.json",
                                       f"{G}/out/checkpoint-2/*"], timeout=300, env=OFFLINE),
    Step("make_diff", f"python weight_diff.py make_diff --path_raw {G}/llama --path_tuned {G}/out"
                      f" --path_diff {G}/diff", outputs=[f"{G}/diff/config.json"], timeout=120, env=OFFLINE),
    # the naive integrity check compares to the real Alpaca-7B weights' sum: off for random ones
    Step("recover", f"python weight_diff.py recover --path_raw {G}/llama --path_diff {G}/diff"
                    f" --path_tuned {G}/recovered --check_integrity_naively False",
         outputs=[f"{G}/recovered/config.json"], timeout=120, env=OFFLINE),
]
