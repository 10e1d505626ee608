"""FastChat's README commands: the Vicuna fine-tune (``torchrun fastchat/train/train_mem.py`` with FSDP full_shard
auto_wrap on LlamaDecoderLayer, bf16, tf32, gradient checkpointing, lazy preprocessing) on the repository's own
data/dummy_conversation.json and a tiny random Llama, its resume from checkpoint-2, and the chat CLI
(``python3 -m fastchat.serve.cli --model-path ...``, default device) on the base and the fine-tuned model."""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, tiny_llama

G = "_gauntlet"
# Everything is local: fail fast instead of retrying the hub. The README pip-installs the tree (-e); the root on
# PYTHONPATH is the same for `torchrun fastchat/train/train_mem.py` (sys.path[0] is fastchat/train).
ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true", "PYTHONPATH": "."}
BASE = f"{G}/vicuna-7b-v1.5"
OUT = f"{G}/output_vicuna"


def prepare(tree: Path) -> None:
    import transformers

    root = Path(tree) / G
    root.mkdir(parents=True, exist_ok=True)
    # a tiny random Llama with a slow (sentencepiece) LlamaTokenizer; long enough a context for Vicuna's
    # system prompt and a turn of dummy_conversation.json in a 96-token vocabulary.
    # the tokenizer is trained on the conversations it will read (their 56 ASCII characters fit the vocabulary):
    # with unknown characters tokenized as <unk>, which train.py also pads with, every target would be masked.
    import json

    data = json.loads((Path(tree) / "data" / "dummy_conversation.json").read_text())
    text = "\n".join(turn["value"] for record in data for turn in record["conversations"])
    _, config = tiny_llama(root / "vicuna-7b-v1.5", text)
    config.max_position_embeddings = 1024
    model = transformers.LlamaForCausalLM(config)
    config.save_pretrained(root / "vicuna-7b-v1.5")
    # weights as they come from a GPU box: pytorch_model.bin with every storage tagged cuda:0
    save_cuda_checkpoint(model.state_dict(), root / "vicuna-7b-v1.5" / "pytorch_model.bin")


def train(max_steps: int) -> str:
    # README "Fine-tuning Vicuna-7B with Local GPUs", sizes shrunk (2 processes, batch 1, a few steps,
    # model_max_length 512) and a random --master_port.
    return (
        "torchrun --nproc_per_node=2 --master_port=$((20000 + RANDOM % 20000)) fastchat/train/train_mem.py"
        f" --model_name_or_path {BASE}"
        " --data_path data/dummy_conversation.json"
        " --bf16 True"
        f" --output_dir {OUT}"
        " --num_train_epochs 3"
        f" --max_steps {max_steps}"
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
        " --model_max_length 512"
        " --gradient_checkpointing True"
        " --lazy_preprocess True"
    )


def cli(model_path: str, log: str) -> str:
    # README "Single GPU": python3 -m fastchat.serve.cli --model-path lmsys/vicuna-7b-v1.5 (no --device: its
    # default); one turn on stdin, then EOF ends the chat loop. --max-new-tokens is the CLI's own flag.
    return (f"set -o pipefail; printf 'Who are you?\\n' | python3 -m fastchat.serve.cli --model-path {model_path}"
            f" --max-new-tokens 16 | tee {G}/{log}")


STEPS = [
    Step("train-fsdp", train(2), outputs=[f"{OUT}/config.json", f"{OUT}/trainer_state.json",
                                          f"{OUT}/checkpoint-2/trainer_state.json"], timeout=300, env=ENV),
    # train.py resumes by itself (resume_from_checkpoint=True) when output_dir holds checkpoint-*. transformers 4.45
    # torch.load()s rng_state_N.pth (numpy arrays) with torch's weights_only default, which torch >= 2.6 refuses on
    # every device (not a CUDA matter): the older default for this step.
    Step("resume", train(4), outputs=[f"{OUT}/checkpoint-4/trainer_state.json"], timeout=300,
         env={**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}),
    Step("cli-base", cli(BASE, "cli-base.txt"), outputs=[f"{G}/cli-base.txt"], timeout=180, env=ENV),
    Step("cli-finetuned", cli(OUT, "cli-finetuned.txt"), outputs=[f"{G}/cli-finetuned.txt"], timeout=180,
         env=ENV),
]
