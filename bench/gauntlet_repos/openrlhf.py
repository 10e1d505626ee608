"""OpenRLHF's README commands for its non-RL trainers: examples/scripts/train_sft.sh (``openrlhf.cli.train_sft``, ZeRO-2,
bf16, flash_attention_2, sample packing, gradient checkpointing, ``--ckpt.load_enable``) with 2 processes, its resume
from a DeepSpeed checkpoint written as on CUDA, and examples/scripts/train_rm.sh (``openrlhf.cli.train_rm``, ZeRO-3,
chat template, chosen / rejected pairs), on a tiny random Llama and synthetic OpenOrca / preference data.

The scripts start the module with ``deepspeed --module``; the recipe starts the same module and flags with
``torchrun --nproc_per_node 2``, the launcher of the repository's own examples/scripts/train_nonrl_slurm.sh
(``torchrun ... -m ${training_commands}``), which sets the same RANK / LOCAL_RANK / WORLD_SIZE / MASTER_* variables.
"""

from pathlib import Path

from _recipe import Step, cuda_tags, save_cuda_checkpoint

G = "_gauntlet"
# README installs the package (pip install openrlhf / pip install -e .): the root on PYTHONPATH is the same.
ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled",
       "PYTHONPATH": "{tree}", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
BASE = f"{G}/Meta-Llama-3-8B"
SFT_OUT = f"{G}/checkpoint/llama3-8b-sft"
SFT_CKPT = f"{G}/checkpoint/llama3-8b-sft-ds"
RM_OUT = f"{G}/checkpoint/llama3-8b-rm"
RM_CKPT = f"{G}/checkpoint/llama3-8b-rm-ds"
PRE = f"export HF_HOME=$PWD/{G}/hf; "

WORDS = ("the model learns a small function of its inputs and writes loss to the log "
         "while data flows through layers of attention and weights").split()
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' </s> ' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}")


def _sentence(r, n):
    return " ".join(r.choice(WORDS) for _ in range(n)) + " ."


def prepare(tree: Path) -> None:
    import json
    import random

    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    r = random.Random(0)

    # a word-level fast tokenizer with a chat template (train_rm.sh passes --data.apply_chat_template)
    vocab = {tok: i for i, tok in enumerate(SPECIALS + sorted(set(WORDS)) + ["User", "Assistant", ":", "."])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                     pre_tokenizers.Punctuation()])
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(root / "Meta-Llama-3-8B")

    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=3)
    transformers.set_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(root / "Meta-Llama-3-8B")

    # OpenOrca-shaped SFT data (train_sft.sh: --data.input_key question --data.output_key response)
    with open(root / "openorca.jsonl", "w") as f:
        for _ in range(16):
            f.write(json.dumps({"question": _sentence(r, 8), "response": _sentence(r, 10)}) + "\n")

    # preference data (train_rm.sh: --data.chosen_key chosen --data.rejected_key rejected, chat messages)
    # and a held-out file for --eval.dataset (without it train_rm.py evaluates on 1% of the training rows: none here)
    for name, rows in (("preference.jsonl", 16), ("preference_eval.jsonl", 4)):
        with open(root / name, "w") as f:
            for _ in range(rows):
                prompt = {"role": "user", "content": _sentence(r, 6)}
                f.write(json.dumps({"chosen": [prompt, {"role": "assistant", "content": _sentence(r, 8)}],
                                    "rejected": [prompt, {"role": "assistant", "content": _sentence(r, 4)}]}) + "\n")

    # the resume reads a DeepSpeed checkpoint as a CUDA machine leaves it: every storage tagged cuda:0
    import inspect

    (root / "as_cuda.py").write_text(
        "import contextlib\nimport sys\nfrom pathlib import Path\nfrom typing import Any\nimport torch\n\n"
        + inspect.getsource(save_cuda_checkpoint) + "\n\n" + inspect.getsource(cuda_tags) + "\n\n"
        "ckpt = Path(sys.argv[1])\n"
        "tag = (ckpt / 'latest').read_text().strip()\n"
        "files = sorted((ckpt / tag).glob('*.pt'))\n"
        "for path in files:\n"
        "    state = torch.load(path, map_location='cpu', weights_only=False)\n"
        "    save_cuda_checkpoint(state, path)\n"
        "print(tag, ':', len(files), 'files rewritten as on CUDA')\n")


def torchrun(module: str, flags: str) -> str:
    return (PRE + "torchrun --nproc_per_node 2 --master_port $((20000 + RANDOM % 20000))"
            f" -m {module} {flags}")


# examples/scripts/train_sft.sh, sizes scaled down by its own flags
SFT = (f"--data.max_len 64 --data.dataset {G}/openorca.jsonl --data.input_key question --data.output_key response"
       " --train.batch_size 4 --train.micro_batch_size 2 --data.max_samples 8"
       f" --model.model_name_or_path {BASE} --ckpt.output_dir {SFT_OUT} --ckpt.path {SFT_CKPT}"
       " --ckpt.save_steps 1 --logger.logging_steps 1 --eval.steps -1 --ds.zero_stage 2 --ds.param_dtype bf16"
       " --ds.attn_implementation flash_attention_2 --adam.lr 5e-6 --ckpt.load_enable --ds.packing_samples"
       " --model.gradient_checkpointing_enable")

# examples/scripts/train_rm.sh, sizes scaled down by its own flags
RM = (f"--ckpt.output_dir {RM_OUT} --ckpt.path {RM_CKPT} --ckpt.save_steps -1 --logger.logging_steps 1"
      f" --eval.steps -1 --train.batch_size 4 --train.micro_batch_size 1 --model.model_name_or_path {BASE}"
      " --ds.param_dtype bf16 --train.max_epochs 1 --data.max_len 64 --ds.zero_stage 3 --adam.lr 9e-6"
      f" --data.dataset {G}/preference.jsonl --data.apply_chat_template --data.chosen_key chosen"
      " --data.rejected_key rejected --ds.attn_implementation flash_attention_2 --ckpt.load_enable"
      f" --eval.dataset {G}/preference_eval.jsonl"
      " --ds.packing_samples --model.gradient_checkpointing_enable --data.max_samples 8")

STEPS = [
    Step("sft", torchrun("openrlhf.cli.train_sft", SFT + " --train.max_epochs 1"),
         outputs=[f"{SFT_OUT}/config.json", f"{SFT_OUT}/model*.safetensors", f"{SFT_CKPT}/global_step2/*"],
         timeout=300, env=ENV),
    Step("checkpoint-as-cuda", f"python {G}/as_cuda.py {SFT_CKPT}", timeout=120, env=ENV),
    # --ckpt.load_enable resumes from the latest DeepSpeed checkpoint under --ckpt.path; a second epoch to train
    Step("sft-resume", torchrun("openrlhf.cli.train_sft", SFT + " --train.max_epochs 2"),
         outputs=[f"{SFT_CKPT}/global_step4/*"], timeout=300, env=ENV),
    Step("rm", torchrun("openrlhf.cli.train_rm", RM),
         outputs=[f"{RM_OUT}/config.json", f"{RM_OUT}/model*.safetensors"], timeout=300, env=ENV),
]
