"""OLMo-core's example LM trainer (src/examples/llm/train.py, launched with torchrun as the tutorial in
docs/source/guides/all_in_one_for_researchers.md does), scaled down by its own flags and config overrides:
--model-factory olmo2_30M (4 layers, d_model 256) with the vocabulary cut to 1024 by config overrides (the
model's vocab_size and the tokenizer configs'), --sequence-length 64, batches of 128 tokens, no data-loader
workers, the downstream evaluator off (as in the tutorial), the in-loop LM evaluator every 2 steps, a checkpoint
every 2 steps and a hard stop. Data: synthetic GPT-2 token ids written as the raw uint16 arrays OLMo-core memory-maps
(the example's c4-train/c4-validation file names, found through OLMO_DATA_ROOT).

Steps: train 2 steps (1 process); give the step-2 trainer state the CUDA RNG entry a CUDA machine writes
(DCP model/optimizer shards are saved from CPU copies, so they are device-neutral on disk); resume to step 4; a
2-process FSDP2 run (the example's default data-parallel config)."""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}/src", "OLMO_DATA_ROOT": "{tree}/" + G + "/data", "WANDB_MODE": "disabled",
       "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
EXAMPLE = "src/examples/llm/train.py"
VOCAB = 1000  # a GPT-2-shaped tokenizer config cut to 1000 ids (EOS/BOS/pad the last), padded to 1024 in the model
TOK = "".join(f"--{where}.tokenizer.{key}={value} " for where in ("dataset", "trainer.callbacks.lm_evaluator.eval_dataset")
              for key, value in (("vocab_size", VOCAB), ("eos_token_id", VOCAB - 1), ("bos_token_id", VOCAB - 1),
                                 ("pad_token_id", VOCAB - 1)))
OVERRIDES = ("--model-factory olmo2_30M --sequence-length 64 --work-dir " + G + "/cache --model.vocab_size=1024 " + TOK +
             "--data_loader.global_batch_size=128 --data_loader.num_workers=0 "
             "--train_module.rank_microbatch_size=64 --train_module.compile_model=false "
             "--trainer.callbacks.downstream_evaluator.enabled=false "
             "--trainer.callbacks.lm_evaluator.eval_interval=2 "
             "--trainer.callbacks.lm_evaluator.eval_duration='{value: 2, unit: steps}' "
             "--trainer.callbacks.checkpointer.save_interval=2 --trainer.callbacks.checkpointer.ephemeral_save_interval=null "
             "--trainer.metrics_collect_interval=1")


def prepare(tree: Path) -> None:
    import numpy as np

    data = tree / G / "data"
    data.mkdir(parents=True, exist_ok=True)
    generator = np.random.default_rng(0)
    eos = VOCAB - 1
    for name, tokens in (("c4-train.00000-00099.npy", 16 * 1024), ("c4-validation.00000-00008.npy", 2 * 1024)):
        ids = generator.integers(0, eos, size=tokens, dtype=np.uint16)
        ids[generator.integers(0, tokens, size=tokens // 200)] = eos
        ids.tofile(data / name)  # raw memmap, as OLMo-core's numpy datasets read them
    (tree / G / "as_cuda.py").write_text(
        "# The trainer state as a CUDA machine writes it: EnvRngStates.current_state() adds the CUDA generator's\n"
        "# state (a CPU ByteTensor from torch.cuda.get_rng_state()) with the CUDA version.\n"
        "import sys, torch\n"
        "path = sys.argv[1]\n"
        "state = torch.load(path, weights_only=False)\n"
        "state['rng']['cuda'] = {'version': (12, 8), 'state': torch.zeros(16, dtype=torch.uint8)}\n"
        "torch.save(state, path)\n"
        "print('cuda rng entry added to', path)\n")


def _run(procs: int, folder: str, steps: int) -> str:
    return (f"torchrun --standalone --nproc-per-node={procs} {EXAMPLE} gauntlet-{folder} --save-folder {G}/{folder} "
            f"{OVERRIDES} --trainer.hard_stop='{{value: {steps}, unit: steps}}'")


STEPS = [
    Step("train", _run(1, "run", 2), outputs=[f"{G}/run/step2/model_and_optim/.metadata", f"{G}/run/step2/train/rank0.pt"],
         env=ENV, timeout=300),
    Step("as-cuda", f"python {G}/as_cuda.py {G}/run/step2/train/rank0.pt", env=ENV, timeout=60),
    Step("resume", _run(1, "run", 4), outputs=[f"{G}/run/step4/model_and_optim/.metadata"], env=ENV, timeout=300),
    Step("fsdp2", _run(2, "run-fsdp", 2), outputs=[f"{G}/run-fsdp/step2/model_and_optim/.metadata"], env=ENV,
         timeout=300),
]
