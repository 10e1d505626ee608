"""The Alignment Handbook's README commands: Zephyr-7B-beta step 1 (SFT, ``accelerate launch ... scripts/sft.py
--config recipes/zephyr-7b-beta/sft/config_full.yaml``) with 2 processes through the repository's accelerate config,
its resume from a checkpoint whose optimizer state was written as on CUDA, step 2 (DPO on the SFT model,
``scripts/dpo.py --config recipes/zephyr-7b-beta/dpo/config_full.yaml``), and orpo.py's own LoRA usage line
(``python scripts/orpo.py ... --use_peft``), on a tiny random Mistral and synthetic chat / preference data."""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
# Everything is local: fail fast instead of retrying the hub. The README installs the tree (`uv pip install .`,
# package alignment under src/): src/ on PYTHONPATH is the same for `scripts/*.py`.
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true",
       "WANDB_MODE": "disabled", "PYTHONPATH": "src", "ACCELERATE_LOG_LEVEL": "info",
       "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
BASE = f"{G}/Mistral-7B-v0.1"
SFT_OUT = f"{G}/zephyr-7b-sft-full"
DPO_OUT = f"{G}/zephyr-7b-dpo-full"
ORPO_OUT = f"{G}/Qwen2-0.5B-ORPO"
# a dataset cache inside the tree (the original and the port do not share one)
PRE = f"export HF_HOME=$PWD/{G}/hf; "

WORDS = ("the model learns a small function of its inputs and writes loss to the log "
         "while data flows through layers of attention and weights").split()


def _sentence(r, n):
    return " ".join(r.choice(WORDS) for _ in range(n)).capitalize() + "."


def _dataset(folder: Path, splits: dict) -> None:
    """A local dataset folder whose README declares its splits, as the hub datasets' cards do."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    card = ["---", "configs:", "- config_name: default", "  data_files:"]
    for split, rows in splits.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        card += [f"  - split: {split}", f"    path: {split}.jsonl"]
    (folder / "README.md").write_text("\n".join(card + ["---", ""]))


def prepare(tree: Path) -> None:
    import inspect
    import random

    import transformers
    import yaml

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    r = random.Random(0)

    # synthetic ultrachat_200k (messages) and ultrafeedback_binarized (chosen / rejected), the columns the recipe
    # configs select
    def chat(i):
        return [{"role": "user", "content": _sentence(r, 6)}, {"role": "assistant", "content": _sentence(r, 10)}]

    _dataset(root / "ultrachat_200k", {"train_sft": [{"messages": chat(i)} for i in range(24)],
                                       "test_sft": [{"messages": chat(i)} for i in range(8)]})

    def pref(i):
        prompt = {"role": "user", "content": _sentence(r, 6)}
        return {"chosen": [prompt, {"role": "assistant", "content": _sentence(r, 8)}],
                "rejected": [prompt, {"role": "assistant", "content": _sentence(r, 5)}]}

    _dataset(root / "ultrafeedback_binarized", {"train_prefs": [pref(i) for i in range(24)],
                                                "test_prefs": [pref(i) for i in range(8)]})

    # a tiny random Mistral with a Llama (SentencePiece) fast tokenizer, laid out as a hub download
    from _recipe import train_sentencepiece

    text = synthetic_text(3000) + "<|user|>\n<|assistant|>\n<|system|>\n" * 20
    spm = train_sentencepiece(text, root / "spm" / "tok", vocab_size=96)
    slow = transformers.LlamaTokenizer(vocab_file=str(spm), legacy=True)
    slow.save_pretrained(root / "spm" / "slow")
    tokenizer = transformers.LlamaTokenizerFast.from_pretrained(root / "spm" / "slow")
    tokenizer.save_pretrained(root / "Mistral-7B-v0.1")
    config = transformers.MistralConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1,
        eos_token_id=2, sliding_window=None)
    transformers.set_seed(0)
    transformers.MistralForCausalLM(config).save_pretrained(root / "Mistral-7B-v0.1")

    # the repository's zephyr recipe configs, scaled down: sizes, steps, output dirs, no hub push or wandb, local
    # data; attn_implementation, bf16, torch_dtype and gradient checkpointing as written
    def mixture(cfg, dataset):
        for entry in cfg["dataset_mixture"]["datasets"]:
            entry["id"] = f"{G}/{dataset}"
        cfg["dataset_mixture"]["test_split_size"] = 4
        cfg["dataset_num_proc"] = 1

    sft = yaml.safe_load((tree / "recipes/zephyr-7b-beta/sft/config_full.yaml").read_text())
    sft["model_name_or_path"] = BASE
    mixture(sft, "ultrachat_200k")
    sft.update(per_device_train_batch_size=2, per_device_eval_batch_size=2, max_seq_length=128, max_steps=2,
               save_steps=2, logging_steps=1, output_dir=SFT_OUT, push_to_hub=False, report_to="none",
               dataloader_num_workers=0)
    (root / "sft_config_full.yaml").write_text(yaml.safe_dump(sft, sort_keys=False))

    dpo = yaml.safe_load((tree / "recipes/zephyr-7b-beta/dpo/config_full.yaml").read_text())
    dpo["model_name_or_path"] = SFT_OUT
    mixture(dpo, "ultrafeedback_binarized")
    dpo.update(per_device_train_batch_size=2, per_device_eval_batch_size=2, max_length=128, max_prompt_length=64,
               max_steps=2, save_steps=2, logging_steps=1, output_dir=DPO_OUT, push_to_hub=False, report_to="none")
    (root / "dpo_config_full.yaml").write_text(yaml.safe_dump(dpo, sort_keys=False))

    # the resume reads a checkpoint as a CUDA machine leaves it: optimizer state on cuda:0, and a CUDA RNG state
    # (a list of host ByteTensors, as torch.cuda.get_rng_state_all() returns) in rng_state_N.pth
    (root / "as_cuda.py").write_text(
        "import sys\nfrom pathlib import Path\nfrom typing import Any\nimport torch\n\n"
        + inspect.getsource(save_cuda_checkpoint) + "\n\n"
        "ckpt = Path(sys.argv[1])\n"
        "optimizer = torch.load(ckpt / 'optimizer.pt', map_location='cpu', weights_only=False)\n"
        "save_cuda_checkpoint(optimizer, ckpt / 'optimizer.pt')\n"
        "for rng in ckpt.glob('rng_state*.pth'):\n"
        "    state = torch.load(rng, weights_only=False)\n"
        "    state['cuda'] = [torch.random.get_rng_state()[:16].clone()]\n"
        "    torch.save(state, rng)\n"
        "print('optimizer.pt and', len(list(ckpt.glob('rng_state*.pth'))), 'rng states rewritten as on CUDA')\n")


def accelerate(script: str, config: str, processes: int, extra: str = "") -> str:
    # README: ACCELERATE_LOG_LEVEL=info accelerate launch --config_file recipes/accelerate_configs/... scripts/X.py
    # --config recipes/...; ddp.yaml (the README's single-node config; zero3.yaml needs DeepSpeed) with the process
    # count and a random port given on the command line, as the README does (--num_processes=1)
    return (PRE + "accelerate launch --config_file recipes/accelerate_configs/ddp.yaml"
            f" --num_processes={processes} --main_process_port=$((20000 + RANDOM % 20000))"
            f" scripts/{script} --config {G}/{config}{extra}")


STEPS = [
    Step("sft", accelerate("sft.py", "sft_config_full.yaml", 2),
         outputs=[f"{SFT_OUT}/model.safetensors", f"{SFT_OUT}/checkpoint-2/trainer_state.json",
                  f"{SFT_OUT}/train_results.json", f"{SFT_OUT}/eval_results.json"], timeout=300, env=ENV),
    Step("checkpoint-as-cuda", f"python {G}/as_cuda.py {SFT_OUT}/checkpoint-2", timeout=120, env=ENV),
    # sft.py resumes by itself from the last checkpoint in output_dir; the README's way to change a config value
    # is a flag after --config
    Step("sft-resume", accelerate("sft.py", "sft_config_full.yaml", 2, " --max_steps=4"),
         outputs=[f"{SFT_OUT}/checkpoint-4/trainer_state.json"], timeout=300, env=ENV),
    Step("dpo", accelerate("dpo.py", "dpo_config_full.yaml", 1),
         outputs=[f"{DPO_OUT}/model.safetensors", f"{DPO_OUT}/checkpoint-2/trainer_state.json"], timeout=300,
         env=ENV),
    # orpo.py's own "LoRA:" usage line, sizes shrunk
    Step("orpo-lora",
         PRE + f"python scripts/orpo.py --dataset_name {G}/ultrafeedback_binarized"
         " --dataset_train_split train_prefs --dataset_test_split test_prefs"
         f" --model_name_or_path {SFT_OUT} --learning_rate 5.0e-6 --max_length 128 --max_steps 2"
         " --per_device_train_batch_size 2 --per_device_eval_batch_size 2 --gradient_accumulation_steps 2"
         " --gradient_checkpointing --logging_steps 1 --eval_strategy steps --eval_steps 50"
         f" --output_dir {ORPO_OUT} --no_remove_unused_columns --use_peft --lora_r 8 --lora_alpha 16"
         " --report_to none",
         outputs=[f"{ORPO_OUT}/adapter_model.safetensors"], timeout=300, env=ENV),
]
