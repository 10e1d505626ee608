"""open-r1's README SFT commands: the OpenR1-Distill-7B recipe (``accelerate launch ... src/open_r1/sft.py --config
recipes/OpenR1-Distill-7B/sft/config_distill.yaml``) with 2 processes through the repository's DDP accelerate config,
its resume from a checkpoint whose optimizer state was written as on CUDA, and the README's "Train via command line"
form (``src/open_r1/sft.py --model_name_or_path ... --bf16 --use_liger_kernel ...``, one process), on a tiny random
Qwen2 and a synthetic Mixture-of-Thoughts-shaped dataset. GRPO and the evaluations (vLLM) are out of scope."""

from pathlib import Path

from _recipe import Step, cuda_tags, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
# Everything is local: fail fast instead of retrying the hub. The README installs the tree (`uv pip install -e .`,
# package open_r1 under src/); the Makefile exports PYTHONPATH=src, the same for `src/open_r1/sft.py`.
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true",
       "WANDB_MODE": "disabled", "PYTHONPATH": "src", "ACCELERATE_LOG_LEVEL": "info",
       "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
BASE = f"{G}/Qwen2.5-Math-7B-RoPE-300k"
DATA = f"{G}/Mixture-of-Thoughts"
DISTILL_OUT = f"{G}/OpenR1-Distill-7B"
CLI_OUT = f"{G}/OpenR1-Distill-7B-cli"
# a dataset cache inside the tree (the original and the port do not share one)
PRE = f"export HF_HOME=$PWD/{G}/hf; "

WORDS = ("the model learns a small function of its inputs and writes loss to the log "
         "while data flows through layers of attention and weights").split()


def _sentence(r, n):
    return " ".join(r.choice(WORDS) for _ in range(n)).capitalize() + "."


def prepare(tree: Path) -> None:
    import inspect
    import json
    import random

    import transformers
    import yaml

    from _recipe import train_sentencepiece

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    r = random.Random(0)

    # synthetic open-r1/Mixture-of-Thoughts, config "all": a "messages" column with reasoning traces
    data = root / "Mixture-of-Thoughts"
    (data / "all").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(24):
        rows.append({"messages": [
            {"role": "user", "content": _sentence(r, 6)},
            {"role": "assistant", "content": "<think>\n" + _sentence(r, 8) + "\n</think>\n" + _sentence(r, 5)}],
            "num_tokens": 40, "source": "math"})
    (data / "all" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (data / "README.md").write_text("\n".join([
        "---", "configs:", "- config_name: all", "  data_files:", "  - split: train", "    path: all/train.jsonl",
        "---", ""]))

    # a tiny random Qwen2 (the base open-r1/Qwen2.5-Math-7B-RoPE-300k is a Qwen2) with a fast tokenizer that knows
    # ChatML's special tokens and has no chat template of its own, as the base model's
    text = synthetic_text(3000) + "<think>\n</think>\nuser\nassistant\nsystem\n" * 20
    spm = train_sentencepiece(text, root / "spm" / "tok", vocab_size=96)
    slow = transformers.LlamaTokenizer(vocab_file=str(spm), legacy=True)
    slow.save_pretrained(root / "spm" / "slow")
    tokenizer = transformers.LlamaTokenizerFast.from_pretrained(root / "spm" / "slow")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = None
    tokenizer.save_pretrained(root / "Qwen2.5-Math-7B-RoPE-300k")
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False)
    transformers.set_seed(0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(root / "Qwen2.5-Math-7B-RoPE-300k")

    # the repository's OpenR1-Distill-7B recipe config, scaled down: sizes, steps, output dir, no hub push or wandb,
    # local data; torch_dtype, attn_implementation, bf16, gradient checkpointing, use_liger_kernel, chat template
    # and eos token as written
    cfg = yaml.safe_load((tree / "recipes/OpenR1-Distill-7B/sft/config_distill.yaml").read_text())
    cfg.update(model_name_or_path=BASE, dataset_name=DATA, dataset_num_proc=1, gradient_accumulation_steps=1,
               hub_model_id="OpenR1-Distill-tiny", max_length=128, max_steps=2, num_train_epochs=1,
               save_strategy="steps", save_steps=2, output_dir=DISTILL_OUT, push_to_hub=False, report_to="none",
               per_device_train_batch_size=2, dataloader_num_workers=0)
    (root / "config_distill.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    # the resume reads a checkpoint as a CUDA machine leaves it: optimizer state on cuda:0, and a CUDA RNG state
    # (a list of host ByteTensors, as torch.cuda.get_rng_state_all() returns) in rng_state_N.pth
    (root / "as_cuda.py").write_text(
        "import contextlib\nimport sys\nfrom pathlib import Path\nfrom typing import Any\nimport torch\n\n"
        + inspect.getsource(cuda_tags) + "\n\n" + inspect.getsource(save_cuda_checkpoint) + "\n\n"
        "ckpt = Path(sys.argv[1])\n"
        "optimizer = torch.load(ckpt / 'optimizer.pt', map_location='cpu', weights_only=False)\n"
        "save_cuda_checkpoint(optimizer, ckpt / 'optimizer.pt')\n"
        "for rng in ckpt.glob('rng_state*.pth'):\n"
        "    state = torch.load(rng, weights_only=False)\n"
        "    state['cuda'] = [torch.random.get_rng_state()[:16].clone()]\n"
        "    torch.save(state, rng)\n"
        "print('optimizer.pt and', len(list(ckpt.glob('rng_state*.pth'))), 'rng states rewritten as on CUDA')\n")


def distill(processes: int, extra: str = "") -> str:
    # README: ACCELERATE_LOG_LEVEL=info accelerate launch --config_file recipes/accelerate_configs/zero3.yaml
    # src/open_r1/sft.py --config recipes/OpenR1-Distill-7B/sft/config_distill.yaml; the README's other
    # accelerate config, ddp.yaml ("We support training models with either DDP or DeepSpeed"; zero3 needs DeepSpeed),
    # with the process count and a random port on the command line, as the README does (--num_processes=7)
    return (PRE + "accelerate launch --config_file recipes/accelerate_configs/ddp.yaml"
            f" --num_processes={processes} --main_process_port=$((20000 + RANDOM % 20000))"
            f" src/open_r1/sft.py --config {G}/config_distill.yaml{extra}")


# README "Train via command line", sizes scaled by its own flags; one process through accelerate's default launcher
# (the README's zero3.yaml needs DeepSpeed)
CLI = (PRE + "accelerate launch --num_processes=1 src/open_r1/sft.py"
       f" --model_name_or_path {BASE} --dataset_name {DATA} --dataset_config all --eos_token '<|im_end|>'"
       " --learning_rate 4.0e-5 --num_train_epochs 1 --max_steps 2 --max_seq_length 128"
       " --per_device_train_batch_size 2 --gradient_checkpointing --bf16 --use_liger_kernel"
       f" --report_to none --save_strategy no --output_dir {CLI_OUT}")

STEPS = [
    Step("sft-distill", distill(2),
         outputs=[f"{DISTILL_OUT}/model.safetensors", f"{DISTILL_OUT}/checkpoint-2/trainer_state.json",
                  f"{DISTILL_OUT}/train_results.json"], timeout=400, env=ENV),
    Step("checkpoint-as-cuda", f"python {G}/as_cuda.py {DISTILL_OUT}/checkpoint-2", timeout=120, env=ENV),
    # sft.py resumes by itself from the last checkpoint in output_dir; the README's way to change a config value is
    # a flag after --config
    Step("sft-resume", distill(2, " --max_steps=4"),
         outputs=[f"{DISTILL_OUT}/checkpoint-4/trainer_state.json"], timeout=400, env=ENV),
    Step("sft-cli", CLI, outputs=[f"{CLI_OUT}/model.safetensors"], timeout=400, env=ENV),
]
