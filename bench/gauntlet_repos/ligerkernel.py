"""Liger-Kernel's own commands: the README's "Compose Your Own Model" snippet (LigerFusedLinearCrossEntropyLoss on a
``nn.Linear(128, 256).cuda()`` and ``device="cuda"`` tensors, as written); examples/huggingface/run_llama.sh
(``torchrun --nproc-per-node=4 training.py --bf16 ... --fsdp "full_shard auto_wrap" --fsdp_config
config/fsdp_config.json --use_liger True``) with 2 processes, shrunk by the script's own flags (--max_steps 3, batch 2,
--max_seq_length 64, --model_name / --dataset pointing at a tiny random Llama and a synthetic alpaca-shaped dataset).
examples/alignment/run_orpo.py is left out: its 100 steps of batch 32 are written in the script (no flag), and took
9 minutes on a CPU copy of the original edited to run. The tree's package is src/liger_kernel (README:
``pip install -e .``): the steps put the tree's src on PYTHONPATH. Nothing picks a device: the snippet says "cuda", the examples leave it to Trainer /
accelerate, and every Liger op is a Triton kernel.
"""

from pathlib import Path

from _recipe import Step, synthetic_text

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}/src", "HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "WANDB_DISABLED": "true", "OMP_NUM_THREADS": "1"}
# examples/huggingface/training.py passes SFTTrainer(max_seq_length=...), which TRL dropped in 0.13, while the tree's
# liger_kernel refuses transformers < 4.52 and TRL <= 0.12 requires transformers < 4.47: no released stack runs the
# example as written. Not a CUDA matter: the step's sitecustomize moves the keyword into SFTConfig, as TRL 0.12 did.
TRL_SHIM_ENV = {**ENV, "PYTHONPATH": "{tree}/_gauntlet/site:{tree}/src"}

TRL_SHIM = '''\
# gauntlet: TRL >= 0.13 no longer takes SFTTrainer(max_seq_length=...); move it into the SFTConfig, as TRL 0.12 did.
import importlib.abc
import sys


def _patch(module):
    cls = module.SFTTrainer
    original = cls.__init__

    def __init__(self, *args, max_seq_length=None, **kwargs):
        if max_seq_length is not None:
            from trl import SFTConfig

            config = kwargs.get("args")
            if config is not None and not isinstance(config, SFTConfig):
                values = config.to_dict()
                values.update({k: getattr(config, k) for k in values if k.endswith("_token")})
                config = SFTConfig(**values)
            config.max_seq_length = max_seq_length
            kwargs["args"] = config
        original(self, *args, **kwargs)

    cls.__init__ = __init__


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "trl.trainer.sft_trainer":
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util

            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Finder())
'''

README_COMPOSE = '''\
# README "3. Compose Your Own Model", as written.
from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss
import torch.nn as nn
import torch

model = nn.Linear(128, 256).cuda()

# fuses linear + cross entropy layers together and performs chunk-by-chunk computation to reduce memory
loss_fn = LigerFusedLinearCrossEntropyLoss()

input = torch.randn(4, 128, requires_grad=True, device="cuda")
target = torch.randint(256, (4, ), device="cuda")

loss = loss_fn(model.weight, input, target)
loss.backward()
print("loss", loss.item(), "grad", input.grad.abs().sum().item())
assert torch.isfinite(loss)
'''

ALPACA = ("Below is an instruction that describes a task. Write a response that appropriately completes the request."
          "\n\n### Instruction:\n{instruction}\n\n### Response:\n{output}")


def _rows(count: int, seed: int):
    import random

    words = synthetic_text(400, seed=seed).split()
    r = random.Random(seed)
    for _ in range(count):
        instruction = " ".join(r.choice(words) for _ in range(r.randint(4, 9)))
        output = " ".join(r.choice(words) for _ in range(r.randint(3, 8)))
        yield instruction, output


def _tiny_llama(folder: Path, text: str) -> None:
    """A tiny random Llama (the examples' meta-llama models) with a tiny byte-level BPE tokenizer (as Llama 3's: no
    SentencePiece prefix space, so the HF example's "### Response:\n" template encodes alike alone and in context)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(text.splitlines(), trainer=trainer)
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                                     unk_token="<unk>")
    tokenizer.save_pretrained(folder)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
    transformers.set_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)


def prepare(tree: Path) -> None:
    import json

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    (root / "site").mkdir(exist_ok=True)
    (root / "site" / "sitecustomize.py").write_text(TRL_SHIM)
    (root / "readme_compose.py").write_text(README_COMPOSE)

    # examples/huggingface: an alpaca-shaped dataset (one "text" column), given by training.py's --dataset flag
    alpaca = [{"text": ALPACA.format(instruction=i, output=o)} for i, o in _rows(48, 0)]
    (root / "alpaca").mkdir(exist_ok=True)
    (root / "alpaca" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in alpaca))
    text = synthetic_text(3000) + "\n".join(row["text"] for row in alpaca) + "\n"
    _tiny_llama(root / "tiny-llama", text)


HF = "examples/huggingface"
# run_llama.sh's flags, shrunk: 2 processes instead of 4, batch 2, 3 steps (callback.py's EfficiencyCallback skips 2
# warm-up steps, then reads the device's peak memory), the tiny model and the local dataset.
TRAIN = (f"cd {HF} && torchrun --nnodes=1 --nproc-per-node=2 --master-port=$((20000 + RANDOM % 20000)) training.py"
         " --bf16 --max_steps 3 --num_train_epochs 1 --per_device_train_batch_size 2 --per_device_eval_batch_size 2"
         " --eval_strategy no --save_strategy no --learning_rate 6e-6 --weight_decay 0.05 --warmup_ratio 0.1"
         " --lr_scheduler_type cosine --logging_steps 1 --include_num_input_tokens_seen --report_to none"
         " --fsdp 'full_shard auto_wrap' --fsdp_config config/fsdp_config.json --seed 42 --use_liger True"
         " --dataloader_num_workers 0 --output_dir ../../_gauntlet/alpaca_finetuning"
         " --model_name ../../_gauntlet/tiny-llama --dataset ../../_gauntlet/alpaca --max_seq_length 64")

STEPS = [
    Step("hf-train-fsdp", TRAIN, env=TRL_SHIM_ENV, timeout=600),
    Step("readme-compose", f"python {G}/readme_compose.py", env=ENV, timeout=240),
]
