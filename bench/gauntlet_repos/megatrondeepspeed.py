"""Megatron-DeepSpeed's own commands, tiny: the README's tools/preprocess_data.py on a synthetic jsonl with a
GPT-2 BPE vocabulary/merges pair trained by prepare() on the same text (GPT2BPETokenizer, as the examples use),
then examples_deepspeed/run_deepspeed_example.sh's `deepspeed pretrain_gpt.py` (the DeepSpeed launcher, ZeRO stage
2, --no-pipeline-parallel, --fp16 with its static --loss-scale 12 and the config's initial_scale_power 12,
--checkpoint-activations and --deepspeed-activation-checkpointing, the script's own ds_config.json written the way
the script writes it) scaled down by its own flags: 2 layers, hidden 64, 4 heads, sequence 64, micro-batch 1,
global batch 4, 4 iterations, a checkpoint every 2 (--lr-decay-iters 8 and --use-checkpoint-opt_param-scheduler so the
resume's scheduler matches the checkpoint's); a resume to 6 iterations after the checkpoint's .pt files are
re-saved as on a GPU box (storages tagged cuda:0); and a 2-process run (`deepspeed --num_gpus 2`, the same script
on two data-parallel ranks under ZeRO-2).

Left out of the script's flags: --tensorboard-dir (a log folder; tensorboard is not a requirement) and the `| tee`.
--num-workers 0 (the dataloader's workers; the default is 2). Micro-batch 1, not the script's 4: at this commit
CoreAttention's query_layer.view() (megatron/model/transformer.py:301) fails for any micro-batch > 1 on every device
("view size is not compatible with input tensor's size and stride"; upstream PR #469, merged 2025), a repository bug.
Text generation (tools/generate_samples_gpt.py, examples_deepspeed/generate_text.sh) is not run: it loads a Megatron
checkpoint (iter_*/mp_rank_00/model_optim_rng.pt) and the DeepSpeed training writes global_step*/ (engine format;
tools/convert_checkpoint needs the pipeline engine's layer files, which --no-pipeline-parallel does not write).
"""

import json
import shlex
from pathlib import Path

from _recipe import Step

HERE = Path(__file__).resolve().parent

G = "_gauntlet"
DATA = f"{G}/data/synth"
EXTENSIONS = str(Path("~/.cache/porter-gauntlet/torch_extensions-megatrondeepspeed").expanduser())
ENV = {"OMP_NUM_THREADS": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "TORCH_EXTENSIONS_DIR": EXTENSIONS}

TINY = ("--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 --num-layers 2 --hidden-size 64 "
        "--num-attention-heads 4 --seq-length 64 --loss-scale 12 --max-position-embeddings 64 "
        "--micro-batch-size 1 --global-batch-size 4 --lr 6.0e-5 --min-lr 6.0e-6 --lr-decay-style cosine --lr-decay-iters 8 --use-checkpoint-opt_param-scheduler "
        "--log-interval 1 --eval-iters 1 --eval-interval 2 "
        f"--data-path {DATA}_text_document --vocab-file {G}/gpt2-vocab.json --merge-file {G}/gpt2-merges.txt "
        "--save-interval 2 --split 98,2,0 --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 "
        "--init-method-std 0.006 --fp16 --checkpoint-activations --num-workers 0 "
        "--deepspeed-activation-checkpointing --zero-stage=2 --no-pipeline-parallel --deepspeed ")


def _ds_config(global_batch: int, micro_batch: int) -> dict:
    # run_deepspeed_example.sh's ds_config.json, with its batch sizes
    return {"train_batch_size": global_batch, "train_micro_batch_size_per_gpu": micro_batch, "steps_per_print": 1,
            "zero_optimization": {"stage": 2}, "fp16": {"enabled": True, "initial_scale_power": 12},
            "wall_clock_breakdown": True}


def prepare(tree: Path) -> None:
    import subprocess
    import sysconfig

    from tokenizers import ByteLevelBPETokenizer

    from _recipe import synthetic_text

    g = tree / G
    (g / "data").mkdir(parents=True, exist_ok=True)
    text = synthetic_text(words=3000).splitlines()
    with open(g / "data" / "synth.jsonl", "w") as f:
        for i in range(0, len(text), 5):
            f.write(json.dumps({"text": "\n".join(text[i:i + 5])}) + "\n")
    # a tiny GPT-2 byte-level BPE (vocab.json + merges.txt, the files GPT2BPETokenizer reads), with GPT-2's EOD
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(text, vocab_size=400, min_frequency=1, special_tokens=["<|endoftext|>"])
    tok.save_model(str(g), "gpt2")  # gpt2-vocab.json, gpt2-merges.txt
    (g / "ds_config.json").write_text(json.dumps(_ds_config(4, 1), indent=2))
    (g / "ds_config_2.json").write_text(json.dumps(_ds_config(4, 1), indent=2))
    # the dataset index builder (megatron/data/helpers.cpp), which every command's start-up compiles with the same make
    # when it is missing (_compile_dependencies); built once here, so the steps find it made
    subprocess.run(["make", "-C", str(tree / "megatron" / "data"), "LIBEXT=" + sysconfig.get_config_var("EXT_SUFFIX")],
                   check=True)


def cuda_checkpoint(folder: str) -> None:
    """Every .pt under ``folder`` rewritten as a CUDA machine writes it (storages tagged cuda:0)."""
    import torch

    from _recipe import save_cuda_checkpoint

    found = sorted(Path(folder).rglob("*.pt"))
    assert found, f"no checkpoint under {folder}"
    for path in found:
        save_cuda_checkpoint(torch.load(path, map_location="cpu", weights_only=False), path)


_RETAG = "python -c " + shlex.quote(f"import sys; sys.path.insert(0, {str(HERE)!r}); import megatrondeepspeed; "
                                    f"megatrondeepspeed.cuda_checkpoint('{G}/checkpoints')")


def _train(launcher: str, iters: int, folder: str, config: str) -> str:
    return (f"{launcher} pretrain_gpt.py {TINY} --train-iters {iters} --exit-interval 5000 "
            f"--deepspeed_config={G}/{config} --save {G}/{folder} --load {G}/{folder}")


STEPS = [
    Step("preprocess", f"python tools/preprocess_data.py --input {G}/data/synth.jsonl --output-prefix {DATA} "
         f"--vocab-file {G}/gpt2-vocab.json --merge-file {G}/gpt2-merges.txt --tokenizer-type GPT2BPETokenizer "
         "--append-eod --workers 1",
         outputs=[f"{DATA}_text_document.bin", f"{DATA}_text_document.idx"], env=ENV, timeout=300),
    Step("train", _train("deepspeed --num_gpus 1", 4, "checkpoints", "ds_config.json"),
         outputs=[f"{G}/checkpoints/global_step4/mp_rank_00_model_states.pt",
                  f"{G}/checkpoints/latest_checkpointed_iteration.txt"], env=ENV, timeout=900),
    Step("resume-cuda-checkpoint", f"{_RETAG} && " + _train("deepspeed --num_gpus 1", 6, "checkpoints",
                                                             "ds_config.json"),
         outputs=[f"{G}/checkpoints/global_step6/mp_rank_00_model_states.pt"], env=ENV, timeout=900),
    Step("two-processes", _train("deepspeed --num_gpus 2", 2, "checkpoints-2", "ds_config_2.json"),
         outputs=[f"{G}/checkpoints-2/global_step2/mp_rank_00_model_states.pt"], env=ENV, timeout=900),
]
