"""alpaca-lora's finetune.py (LoRA via peft on an 8-bit Llama) on a tiny random Llama and a synthetic
alpaca json: train, resume from a LoRA adapter saved on CUDA, a 2-process torchrun run, and
export_hf_checkpoint.py merging the "tloen/alpaca-lora-7b" adapter (a local folder of that name)."""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text, tiny_llama

G = "_gauntlet"
# Everything is local: fail fast instead of retrying the hub.
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": f"{G}/datasets", "WANDB_DISABLED": "true"}


def prepare(tree: Path) -> None:
    import json

    import torch
    import transformers
    from peft import LoraConfig, get_peft_model, get_peft_model_state_dict

    root = Path(tree) / G
    root.mkdir(parents=True, exist_ok=True)
    text = synthetic_text(3000)

    # --base_model: a tiny random Llama with a slow (sentencepiece) LlamaTokenizer.
    llama = root / "llama"
    _, config = tiny_llama(llama, text, pad_token_id=0)
    transformers.LlamaForCausalLM(config).save_pretrained(llama)

    # --data_path: alpaca-format records (instruction / input / output), with and without input.
    lines = text.splitlines()
    records = [{"instruction": lines[i][:50], "input": lines[i + 10][:30] if i % 2 else "",
                "output": lines[i + 20][:40]} for i in range(8)]
    (root / "alpaca_data.json").write_text(json.dumps(records, indent=2))

    # A LoRA adapter (the finetune.py defaults: r=8, alpha=16, q_proj/v_proj) trained on a GPU box,
    # saved the pre-safetensors way: adapter_model.bin with every storage tagged cuda:0.
    model = transformers.LlamaForCausalLM(config)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.05,
                      bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:  # B starts at zero: make the adapter change the weights
                param.normal_(0, 0.02)
    state = {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}

    save_cuda_checkpoint(state, root / "cuda_adapter" / "adapter_model.bin")

    # export_hf_checkpoint.py loads the adapter "tloen/alpaca-lora-7b" by name. peft 0.9 (the last with
    # prepare_model_for_int8_training) asks the hub's file_exists() even with HF_HUB_OFFLINE=1, so an
    # offline HF cache (_recipe.fake_hub_model) is not found; a local folder of that name, relative to
    # the tree's root where the step runs, is loaded first.
    named = Path(tree) / "tloen" / "alpaca-lora-7b"
    lora.save_pretrained(str(named))  # adapter_config.json
    save_cuda_checkpoint(state, named / "adapter_model.bin")


FINETUNE = (
    "python finetune.py"
    f" --base_model '{G}/llama'"
    f" --data_path '{G}/alpaca_data.json'"
    " --batch_size 2"
    " --micro_batch_size 1"
    " --num_epochs 1"
    " --learning_rate 1e-4"
    " --cutoff_len 32"
    " --val_set_size 0"
    " --lora_r 8"
    " --lora_alpha 16"
    " --lora_dropout 0.05"
    " --lora_target_modules '[q_proj,v_proj]'"
    " --train_on_inputs"
    " --group_by_length"
)

STEPS = [
    Step("finetune", FINETUNE + f" --output_dir '{G}/lora-alpaca'",
         outputs=[f"{G}/lora-alpaca/adapter_config.json", f"{G}/lora-alpaca/adapter_model.*"],
         timeout=300, env=ENV),
    # resume from an adapter_model.bin written on CUDA (finetune.py torch.load()s it)
    Step("resume-cuda-adapter", FINETUNE + f" --output_dir '{G}/lora-resumed'"
         f" --resume_from_checkpoint '{G}/cuda_adapter'",
         outputs=[f"{G}/lora-resumed/adapter_config.json"], timeout=300, env=ENV),
    # finetune.py's DDP path (WORLD_SIZE / LOCAL_RANK from torchrun)
    Step("ddp", "torchrun --nproc_per_node=2 --master_port=$((20000 + RANDOM % 20000)) "
         + FINETUNE.removeprefix("python ") + f" --output_dir '{G}/lora-ddp'",
         outputs=[f"{G}/lora-ddp/adapter_config.json"], timeout=300, env=ENV),
    # merge the "tloen/alpaca-lora-7b" adapter into the base model, written to ./hf_ckpt
    Step("export-hf", "python export_hf_checkpoint.py", outputs=["hf_ckpt/config.json"],
         timeout=180, env={**ENV, "BASE_MODEL": f"{G}/llama"}),
]
