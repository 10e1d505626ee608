"""huggingface/nanotron's tiny Llama, tinier: the README's own commands on configs the recipe writes into
_gauntlet/ from the repo's examples/config_tiny_llama.yaml, scaled down by the repo's own config keys (the
examples/config_tiny_llama.py model: hidden 16, 4 heads, 2 layers, vocab 256; sequence length 64, micro batch 2,
2 steps, a checkpoint every 2 steps), on the config's own data source (``dataset: null``: nanotron's dummy data
generator, random token ids) and a tiny word-level tokenizer made by prepare() (the config's
``robot-test/dummy-tokenizer-wordlevel`` is a hub download):

- train: ``torchrun --nproc_per_node=1 run_train.py --config-file ...`` (dp 1, tp 1, pp 1);
- resume: the train step's checkpoint, its optimizer and lr-scheduler ``torch.save`` files re-written as on a CUDA
  machine (every storage tagged cuda:0; safetensors weights are device-neutral), loaded (weights and optimizer
  state) with examples/config_resume_training.yaml's keys: ``resume_checkpoint_path``, ``load_optimizer: true``,
  ``load_lr_scheduler: false`` (the example's), 4 steps into _gauntlet/checkpoints-resume. Not CUDA: with
  ``load_lr_scheduler: true`` the training metadata is reloaded too, and TrainingMetadata asserts that the
  per-folder token counts add up to the total, which only the tokenized-bytes (Nanoset) loader records: a
  checkpoint written on dummy (or HF ``datasets``) data cannot be resumed that way on any device;
- tp2: the README config's tensor parallelism (``tp_mode: REDUCE_SCATTER``, ``tp_linear_async_communication:
  true``) on 2 processes, ``torchrun --nproc_per_node=2`` with tp 2;
- dp2: the same command with dp 2 (DDP over the data-parallel group), tp 1.

No generate step. Not CUDA: the README's ``run_generate.py --ckpt-path CKPT/ --tp 1 --pp 1`` on a Llama checkpoint
fails on every device at HEAD (generation/decode.py:309 calls the model with ``position_ids=``, which
LlamaModel.forward(input_ids, input_mask) does not take; only Qwen2 takes it). prepare() still writes the tokenizer
the generate command reads (config.tokenizer.tokenizer_name_or_path).

Nothing here picks a device: the configs keep every device-related key of the example as it is
(``torch_adam_is_fused: true``, bf16, flash-attention as the default attention); the profiler section stays, its
schedule (wait/warmup/active/skip_first) fitted into 2 steps, as the config requires.
"""

from pathlib import Path

from _recipe import Step, synthetic_text

G = "_gauntlet"
SHIM = f"{G}/shim"
ENV = {"PYTHONPATH": "{tree}/src:{tree}/" + SHIM, "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
       "HF_HOME": "{tree}/_gauntlet/hf", "TOKENIZERS_PARALLELISM": "false", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
       "OMP_NUM_THREADS": "1"}

# Not CUDA: at HEAD LlamaForTraining.init_model_randomly passes `config.model` (ModelArgs) to
# StandardParametrizator, which reads `config.model.init_method` and `config.parallelism.tp` off a full Config
# (Qwen2's passes `config`), so a fresh Llama run fails on every device with AttributeError: 'ModelArgs' object has
# no attribute 'model'. The shim, on the original and the port alike, hands the parametrizator the full Config.
SITECUSTOMIZE = '''"""gauntlet: nanotron HEAD's Llama init passes config.model where the parametrizer wants the Config."""
import importlib.abc
import importlib.machinery
import sys


def _patch(llama):
    original_init = llama.LlamaForTraining.init_model_randomly

    def init_model_randomly(self, config):
        classes = {name: getattr(llama, name) for name in ("StandardParametrizator", "SpectralMupParametrizator")}

        def bind(cls):
            return lambda config=None: cls(config=full)

        full = config
        try:
            for name, cls in classes.items():
                setattr(llama, name, bind(cls))
            return original_init(self, config)
        finally:
            for name, cls in classes.items():
                setattr(llama, name, cls)

    llama.LlamaForTraining.init_model_randomly = init_model_randomly


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "nanotron.models.llama":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def patched(module):
            exec_module(module)
            _patch(module)

        loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _Finder())
'''

AS_CUDA = '''"""gauntlet: re-save a nanotron checkpoint's torch.save files as a CUDA machine writes them (storages cuda:0)."""
import sys
from pathlib import Path

import torch
from torch import serialization

original = serialization.location_tag


def cuda_tag(storage):
    tag = original(storage)
    return "cuda:0" if tag == "cpu" else tag


root = Path(sys.argv[1])
files = sorted(list((root / "optimizer").glob("*.pt")) + list((root / "lr_scheduler").glob("*.pt")))
assert files, f"no optimizer / lr_scheduler files under {root}"
for path in files:
    obj = torch.load(path, map_location="cpu", weights_only=False)
    serialization.location_tag = cuda_tag
    try:
        torch.save(obj, path)
    finally:
        serialization.location_tag = original
    print("re-saved as on CUDA:", path)
'''


def _config(base: dict, *, steps: int, ckpt: str, resume: str | None = None, dp: int = 1, tp: int = 1,
            load_lr_scheduler: bool = True) -> dict:
    import copy

    cfg = copy.deepcopy(base)
    cfg["checkpoints"].update({"checkpoint_interval": 2, "checkpoints_path": ckpt, "resume_checkpoint_path": resume,
                               "load_optimizer": True, "load_lr_scheduler": load_lr_scheduler})
    cfg["general"].update({"benchmark_csv_path": f"{G}/benchmark_llama.csv", "project": "gauntlet",
                           "run": "tiny_llama_%date_%jobid"})
    cfg["model"]["model_config"].update({
        # examples/config_tiny_llama.py's model
        "hidden_size": 16, "intermediate_size": 64, "max_position_embeddings": 256, "num_attention_heads": 4,
        "num_hidden_layers": 2, "num_key_value_heads": 4, "vocab_size": 256})
    cfg["optimizer"]["learning_rate_scheduler"].update({"lr_warmup_steps": 1, "lr_decay_steps": 3})
    cfg["parallelism"].update({"dp": dp, "tp": tp, "pp": 1})
    # the example's profiler, its schedule fitted into 2 steps (the config asserts it fits the train steps)
    cfg["profiler"] = {"profiler_export_path": f"{G}/tb_logs", "wait": 0, "warmup": 1, "active": 1, "repeat": 1,
                       "skip_first": 0}
    cfg["tokenizer"]["tokenizer_name_or_path"] = f"{G}/tokenizer"
    cfg["tokens"].update({"micro_batch_size": 2, "sequence_length": 64, "train_steps": steps,
                          "batch_accumulation_per_replica": 1})
    return cfg


def _tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = sorted({w.strip(".").lower() for w in synthetic_text(words=600).split()})
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for word in words:
        vocab.setdefault(word, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(folder))


def prepare(tree: Path) -> None:
    import yaml

    g = tree / G
    g.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load((tree / "examples" / "config_tiny_llama.yaml").read_text())
    configs = {
        "train.yaml": _config(base, steps=2, ckpt=f"{G}/checkpoints"),
        "resume.yaml": _config(base, steps=4, ckpt=f"{G}/checkpoints-resume", resume=f"{G}/checkpoints/2",
                               load_lr_scheduler=False),
        "tp2.yaml": _config(base, steps=2, ckpt=f"{G}/checkpoints-tp2", tp=2),
        "dp2.yaml": _config(base, steps=2, ckpt=f"{G}/checkpoints-dp2", dp=2),
    }
    for name, cfg in configs.items():
        (g / name).write_text("# gauntlet: examples/config_tiny_llama.yaml, scaled down\n"
                              + yaml.safe_dump(cfg, sort_keys=False))
    (g / "as_cuda.py").write_text(AS_CUDA)
    (tree / SHIM).mkdir(parents=True, exist_ok=True)
    (tree / SHIM / "sitecustomize.py").write_text(SITECUSTOMIZE)
    _tokenizer(g / "tokenizer")


RUN = "torchrun --standalone --nproc_per_node"
STEPS = [
    Step("train", f"{RUN}=1 run_train.py --config-file {G}/train.yaml",
         outputs=[f"{G}/checkpoints/2/checkpoint_metadata.json", f"{G}/checkpoints/2/config.yaml"],
         env=ENV, timeout=300),
    Step("as-cuda", f"python {G}/as_cuda.py {G}/checkpoints/2", env=ENV, timeout=120),
    Step("resume", f"{RUN}=1 run_train.py --config-file {G}/resume.yaml",
         outputs=[f"{G}/checkpoints-resume/4/checkpoint_metadata.json"], env=ENV, timeout=300),
    Step("tp2", f"{RUN}=2 run_train.py --config-file {G}/tp2.yaml",
         outputs=[f"{G}/checkpoints-tp2/2/checkpoint_metadata.json"], env=ENV, timeout=300),
    Step("dp2", f"{RUN}=2 run_train.py --config-file {G}/dp2.yaml",
         outputs=[f"{G}/checkpoints-dp2/2/checkpoint_metadata.json"], env=ENV, timeout=300),
]
