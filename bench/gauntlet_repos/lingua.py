"""Meta Lingua's main app (apps/main: a Llama-style LMTransformer, FSDP2 over a device mesh), tiny: the repo's
own entry points as its README gives them, each on a config the recipe writes into _gauntlet/ from the repo's
apps/main/configs/debug.yaml and eval.yaml, scaled down by the repo's own config keys (dim 32, 2 layers,
multiple_of 16, seq_len 64, batch 2, 2 steps, a DCP checkpoint every 2 steps), with the built-in byte tokenizer
(`data.tokenizer.name: bytes`, no file) and synthetic data in the repo's layout (data/SOURCE/SOURCE.chunk.00.jsonl
with "text" lines, plus a SOURCE.val.jsonl for the validation pass):

- train: ``python -m apps.main.train config=...`` (single process: the repo still inits a process group and a
  device mesh), 2 steps and a DCP checkpoint at step 2;
- resume: the same command with steps=4 (CheckpointManager.load picks up the step-2 checkpoint and train state);
- generate: ``python -m apps.main.generate ckpt=...`` on a consolidated checkpoint (params.json +
  consolidated.pth, the format generate.py and eval.py load) written as on a CUDA machine (every storage tagged
  cuda:0), prompts on stdin;
- fsdp2: the README's ``torchrun --nproc-per-node N -m apps.main.train`` with N=2 (fsdp_type full_shard: the
  model is sharded over the 2-rank dp mesh).

``distributed.compile`` is set false (debug.yaml compiles the model; inductor on 2 shared CPU cores would take
minutes) and ``data.load_async`` false (the async loader forks a process per rank); neither picks a device.

No eval step: apps/main/eval.py always calls lm-eval's simple_evaluate on harness tasks, whose data sets are
downloads, and lm-eval 0.4.9.1 (the newest whose LM base lets EvalHarnessLM set ``self.device``) fails on an inline
task config in its result printing (alias None). prepare() still writes _gauntlet/eval.yaml (one inline task) and the
val jsonl for a later try.
"""

import json
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
ENV = {"WANDB_MODE": "disabled", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": "{tree}/_gauntlet/hf",
       "TOKENIZERS_PARALLELISM": "false"}
DIM, LAYERS, HEADS, MULTIPLE_OF, VOCAB = 32, 2, 4, 16, 258  # the byte tokenizer's n_words


def _train_config(dump_dir: str) -> str:
    return f"""# gauntlet: apps/main/configs/debug.yaml, scaled down
dump_dir: {dump_dir}
name: "debug"
steps: 2
probe_freq: null
seed: 777
optim:
    lr: 3e-4
    warmup: 1
    lr_min_ratio: 0.000001
    clip: 10.0

distributed:
    fsdp_type: full_shard
    compile: false
    model_dtype: bf16
    matmul_allow_tf32: false
    selective_activation_checkpointing: false
    tp_size: 1

model:
    dim: {DIM}
    n_layers: {LAYERS}
    n_heads: {HEADS}
    multiple_of: {MULTIPLE_OF}

data:
    root_dir: {G}/data
    sources:
        synth: 1.0
    batch_size: 2
    prefetch_size: 2
    seq_len: 64
    n_views: 2
    load_async: false
    tokenizer:
        name: bytes

profiling:
    run: true

checkpoint:
    dump:
        every: 2
        keep: 1
    eval:
        every: 1000
        keep: 1

logging:
    freq: 1
"""


def prepare(tree: Path) -> None:
    import torch

    g = tree / G
    data = g / "data" / "synth"
    data.mkdir(parents=True, exist_ok=True)
    lines = synthetic_text(words=6000).splitlines()
    with (data / "synth.chunk.00.jsonl").open("w") as out:
        for i in range(0, len(lines), 3):
            out.write(json.dumps({"text": " ".join(lines[i:i + 3])}) + "\n")
    with (data / "synth.val.jsonl").open("w") as out:
        for i in range(0, 24, 3):
            out.write(json.dumps({"text": " ".join(lines[i:i + 3])}) + "\n")
    (g / "train.yaml").write_text(_train_config(f"{G}/dump"))
    (g / "train_fsdp.yaml").write_text(_train_config(f"{G}/dump-fsdp"))

    # A consolidated checkpoint as eval.py/generate.py load it, written on a CUDA machine.
    hidden = MULTIPLE_OF * ((int(2 * 4 * DIM / 3) + MULTIPLE_OF - 1) // MULTIPLE_OF)
    gen = torch.Generator().manual_seed(0)

    def w(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    model = {"tok_embeddings.weight": w(VOCAB, DIM), "norm.weight": torch.ones(DIM), "output.weight": w(VOCAB, DIM)}
    for i in range(LAYERS):
        p = f"layers.{i}."
        for name in ("wq", "wk", "wv", "wo"):
            model[p + f"attention.{name}.weight"] = w(DIM, DIM)
        model[p + "feed_forward.w1.weight"] = w(hidden, DIM)
        model[p + "feed_forward.w3.weight"] = w(hidden, DIM)
        model[p + "feed_forward.w2.weight"] = w(DIM, hidden)
        model[p + "attention_norm.weight"] = torch.ones(DIM)
        model[p + "ffn_norm.weight"] = torch.ones(DIM)
    ckpt = g / "ckpt" / "consolidated"
    save_cuda_checkpoint({"model": model}, ckpt / "consolidated.pth")
    params = {"name": "debug", "dump_dir": f"{G}/dump", "seed": 777, "steps": 2,
              "distributed": {"model_dtype": "bf16", "fsdp_type": "full_shard"},
              "model": {"dim": DIM, "n_layers": LAYERS, "n_heads": HEADS, "multiple_of": MULTIPLE_OF,
                        "vocab_size": VOCAB, "max_seqlen": 64, "seed": 42},
              "data": {"root_dir": f"{G}/data", "sources": {"synth": 1.0}, "seq_len": 64,
                       "tokenizer": {"name": "bytes", "path": None}}}
    (ckpt / "params.json").write_text(json.dumps(params))

    # One lm-eval task, inline (lm-eval's registered tasks download their data sets), over a local JSON file.
    docs = [{"context": "The model learns a small", "target": " function"},
            {"context": "Data flows through layers of", "target": " attention"},
            {"context": "The model writes loss to the", "target": " log"},
            {"context": "Weights and inputs of the", "target": " model"}]
    task_data = g / "task" / "synth_lm.jsonl"
    task_data.parent.mkdir(parents=True, exist_ok=True)
    task_data.write_text("".join(json.dumps(d) + "\n" for d in docs))
    task = {"task": "gauntlet_synth_lm", "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": str(task_data.resolve())}},
            "test_split": "test", "output_type": "loglikelihood",
            "doc_to_text": "{{context}}", "doc_to_target": "{{target}}",
            "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}
    eval_cfg = {"name": "debug_evals", "ckpt_dir": f"{G}/ckpt/consolidated", "dump_dir": f"{G}/evals",
                "generator": {"max_tokens": 512, "dtype": "bf16", "temperature": 1.0, "top_p": 0.95},
                "harness": {"tasks": [task], "bootstrap_iters": 0},
                "validation": {"max_steps": 8}}
    # JSON is YAML: OmegaConf.load reads it.
    (g / "eval.yaml").write_text(json.dumps(eval_cfg, indent=2) + "\n")


STEPS = [
    Step("train", f"python -m apps.main.train config={G}/train.yaml",
         outputs=[f"{G}/dump/checkpoints/0000000002/.metadata", f"{G}/dump/metrics.jsonl"], env=ENV, timeout=300),
    Step("resume", f"python -m apps.main.train config={G}/train.yaml steps=4",
         outputs=[f"{G}/dump/checkpoints/0000000004/.metadata"], env=ENV, timeout=300),
    Step("generate", f"printf 'The model learns\\nData flows\\n\\n' | python -m apps.main.generate "
                     f"ckpt={G}/ckpt/consolidated max_gen_len=8",
         env=ENV, timeout=300),
    Step("fsdp2", f"torchrun --standalone --nproc-per-node 2 -m apps.main.train config={G}/train_fsdp.yaml",
         outputs=[f"{G}/dump-fsdp/checkpoints/0000000002/.metadata",
                  f"{G}/dump-fsdp/checkpoints/0000000002/train_state_00001.json"], env=ENV, timeout=300),
]
