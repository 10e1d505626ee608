"""lit-llama's README and howto commands, tiny: ``scripts/prepare_alpaca.py`` (on a synthetic Alpaca json that
prepare() puts where its download would land), ``finetune/lora.py`` and ``finetune/adapter.py`` (the README's two
finetuning commands, Fabric ``accelerator="cuda"``, ``bf16-true``, as written), ``generate.py`` (the README's first
command), ``generate/lora.py`` and ``generate/adapter.py`` on finetuned weights written as on a GPU box (as a user
who finetuned on CUDA would bring them), ``generate/lora.py`` on the LoRA weights the finetune step itself wrote,
then howto/train_redpajama.md: ``scripts/prepare_redpajama.py --sample True`` on synthetic RedPajama-sample jsonl
files and ``pretrain/redpajama.py --devices 2`` (its own flag: Fabric FSDP over two processes, ``bf16-mixed``).

The repository has no model-size flag: every script builds the 7B model (``LLaMAConfig.from_name("7B")``,
``llama_model_lookup`` by width, or ``LLaMAConfig(block_size=...)`` with the 7B defaults), and the training scripts
keep their hyperparameters as module constants that their docstrings tell the user to edit. So ``_gauntlet/tiny.py``
shrinks the repository's own model table (the ``"7B"`` entry of ``llama_configs``, its width in
``llama_model_sizes``, and the ``LLaMAConfig`` defaults) to 3 layers, 4 heads, width 64, a 128-token vocabulary,
sets the module constants named in ``GAUNTLET_SET`` (max_iters, intervals, batch sizes), and runs the script named
by ``GAUNTLET_SCRIPT`` as ``__main__`` with its own command line (compiled from the tree's file, so tracebacks name
the tree's lines). ``sys.argv[0]`` stays tiny.py, so Fabric's launcher restarts the same wrapper for its second
process. It also gives lit_llama/utils.py the ``RequirementCache`` its ``_check_python_packages`` calls without
importing, and the standard ``logging`` module the ``get_logger`` that finetune/length_grouped_sampler.py calls
(transformers' name): two failures at HEAD on every device, not CUDA. Nothing picks a device: the ``accelerator="cuda"`` and precision settings stay as written.
"""

import json
from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
TOK = "checkpoints/lit-llama/tokenizer.model"
BASE = "checkpoints/lit-llama/7B/lit-llama.pth"
VOCAB = 128  # a multiple of 64: padded_vocab_size == vocab_size, so sampling never leaves the tokenizer's range
TINY_MODEL = dict(block_size=256, vocab_size=VOCAB, n_layer=3, n_head=4, n_embd=64)  # adapter_start_layer=2 < 3

TINY = r'''
"""gauntlet: lit-llama at toy size (see bench/gauntlet_repos/litllama.py)."""
import ast
import dataclasses
import inspect
import json
import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL = %(tiny)s


def shrink():
    sys.path.insert(0, str(ROOT))
    import lit_llama.model as model
    import lit_llama.utils as utils
    import lit_llama.adapter as adapter

    # Not CUDA, the same on every device: HEAD's _check_python_packages (finetune/*.py, generate/{lora,adapter}.py)
    # calls RequirementCache, which lit_llama/utils.py never imports (NameError). Lightning's own class, provided.
    if not hasattr(utils, "RequirementCache"):
        from lightning_utilities.core.imports import RequirementCache
        utils.RequirementCache = RequirementCache

    # Not CUDA either: finetune/length_grouped_sampler.py (imported by finetune/lora.py's get_dataloader) calls
    # transformers' `logging.get_logger` on the standard library's logging module (AttributeError everywhere).
    import logging
    if not hasattr(logging, "get_logger"):
        logging.get_logger = logging.getLogger

    model.llama_configs["7B"] = dict(TINY_MODEL)
    utils.llama_model_sizes[TINY_MODEL["n_embd"]] = "7B"
    for cls in (model.LLaMAConfig, adapter.LLaMAConfig):
        names = list(inspect.signature(cls.__init__).parameters)[1:]
        defaults = list(cls.__init__.__defaults__)
        for key, value in TINY_MODEL.items():
            defaults[names.index(key)] = value
            setattr(cls, key, value)
        cls.__init__.__defaults__ = tuple(defaults)
    sys.path.remove(str(ROOT))


def run(script, overrides):
    path = (ROOT / script).resolve()
    tree = ast.parse(path.read_text(), filename=str(path))
    seen = set()
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in overrides):
            node.value = ast.copy_location(ast.Constant(overrides[node.targets[0].id]), node.value)
            seen.add(node.targets[0].id)
    missing = set(overrides) - seen
    if missing:
        raise SystemExit(f"gauntlet: {script} has no module constant {sorted(missing)}")
    code = compile(tree, str(path), "exec")
    sys.path.insert(0, str(path.parent))  # as `python SCRIPT` puts the script's folder first
    main = types.ModuleType("__main__")
    main.__file__ = str(path)
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


shrink()
run(os.environ["GAUNTLET_SCRIPT"], json.loads(os.environ.get("GAUNTLET_SET", "{}")))
'''

# finetune/*.py: 4 micro-batches of 2, accumulated 2 at a time (2 optimizer steps), an eval (2 batches and the
# script's own sample generation) and a save after every optimizer step.
FINETUNE = dict(batch_size=4, micro_batch_size=2, max_iters=4, eval_interval=1, save_interval=1, eval_iters=2,
                warmup_iters=1)
# pretrain/redpajama.py: per process 10 // 2 = 5 samples a step, micro-batches of 5: 3 iterations, one optimizer
# step each, and a save at step 2. No validation set (the howto passes none).
PRETRAIN = dict(out_dir=f"{G}/out/training", batch_size=10, micro_batch_size=5, max_iters=2, save_interval=2, eval_interval=2, eval_iters=2,
                warmup_iters=1)


def _env(script: str, overrides: dict = None) -> dict:
    return {"GAUNTLET_SCRIPT": script, "GAUNTLET_SET": json.dumps(overrides or {}), "OMP_NUM_THREADS": "1"}


def _records(count: int, seed: int) -> list:
    """Alpaca-shaped records (instruction, input, output) over the synthetic vocabulary."""
    r = rng(seed)
    words = synthetic_text(words=3000, seed=seed).split()
    records = []
    for i in range(count):
        def phrase(n):
            return " ".join(r.choice(words) for _ in range(n))
        records.append({"instruction": phrase(r.randint(4, 9)).capitalize() + "?",
                        "input": phrase(r.randint(3, 8)) if i % 3 == 0 else "",
                        "output": phrase(r.randint(6, 20)).capitalize() + "."})
    return records


def _tokenizer(tree: Path) -> None:
    """A 128-piece SentencePiece BPE model (bos 1, eos 2, as LLaMA's) trained on the synthetic text and the
    Alpaca prompt template, where the README's download puts LLaMA's tokenizer."""
    import sentencepiece as spm

    import sys

    sys.path.insert(0, str(tree))
    try:
        from scripts.prepare_alpaca import generate_prompt
    finally:
        sys.path.remove(str(tree))
    lines = synthetic_text(words=6000).splitlines()
    for record in _records(40, 7):
        lines.extend(generate_prompt(record).splitlines())
    lines.append("Hello, my name is. What food do lamas eat? Recommend a movie for me to watch during the weekend "
                 "and explain the reason.")
    target = tree / TOK
    target.parent.mkdir(parents=True, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([line for line in lines if line.strip()]), model_prefix=str(target.with_suffix("")),
        vocab_size=VOCAB, model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        minloglevel=2)


def _checkpoints(tree: Path) -> None:
    """The base checkpoint as scripts/convert_hf_checkpoint.py writes it (a plain CPU state dict, bfloat16), and
    finetuned weights as a CUDA run of finetune/lora.py (``lora_state_dict``, via ``fabric.save``) and
    finetune/adapter.py (the full state dict, via ``save_model_checkpoint``) write them: storages tagged cuda:0.
    Built with the tree's own lit_llama at the tiny size."""
    import sys

    import torch

    sys.path.insert(0, str(tree))
    try:
        import lit_llama.adapter as adapter
        import lit_llama.lora as lora
        import lit_llama.model as model

        config = dict(TINY_MODEL)
        torch.manual_seed(0)
        base = model.LLaMA(model.LLaMAConfig(**config))
        base.apply(base._init_weights)
        state = {k: v.to(torch.bfloat16) for k, v in base.state_dict().items()}
        (tree / BASE).parent.mkdir(parents=True, exist_ok=True)
        torch.save(state, tree / BASE)

        with lora.lora(r=8, alpha=16, dropout=0.05, enabled=True):
            tuned = model.LLaMA(model.LLaMAConfig(**config))
        tuned.load_state_dict(state, strict=False)
        for name, param in tuned.named_parameters():
            if "lora_" in name:
                torch.nn.init.normal_(param, std=0.02)
        save_cuda_checkpoint({k: v.to(torch.bfloat16) for k, v in lora.lora_state_dict(tuned).items()},
                             tree / G / "cuda" / "lit-llama-lora-finetuned.pth")

        tuned = adapter.LLaMA(adapter.LLaMAConfig(**config))
        tuned.load_state_dict(state, strict=False)
        save_cuda_checkpoint({k: v.to(torch.bfloat16) for k, v in tuned.state_dict().items()},
                             tree / G / "cuda" / "lit-llama-adapter-finetuned.pth")
    finally:
        sys.path.remove(str(tree))
        for name in [n for n in sys.modules if n == "lit_llama" or n.startswith("lit_llama.")]:
            del sys.modules[name]


def _redpajama(tree: Path) -> None:
    """data/RedPajama-Data-1T-Sample/*.jsonl, the sample's eleven files, {"text": ...} a line."""
    text = (tree / "scripts" / "prepare_redpajama.py").read_text()
    start = text.index("filenames_sample = [")
    names = eval(text[start + len("filenames_sample = "):text.index("]", start) + 1])  # a literal list of names
    folder = tree / "data" / "RedPajama-Data-1T-Sample"
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        lines = synthetic_text(words=5000, seed=100 + i).splitlines()
        with (folder / name).open("w") as out:
            for j in range(0, len(lines), 5):
                out.write(json.dumps({"text": " ".join(lines[j:j + 5]), "meta": {}}) + "\n")


def prepare(tree: Path) -> None:
    tree = Path(tree)
    runner = tree / G / "tiny.py"
    runner.parent.mkdir(parents=True, exist_ok=True)
    runner.write_text(TINY % {"tiny": repr(TINY_MODEL)})
    alpaca = tree / "data" / "alpaca"
    alpaca.mkdir(parents=True, exist_ok=True)
    (alpaca / "alpaca_data_cleaned_archive.json").write_text(json.dumps(_records(40, 1), indent=1))
    _tokenizer(tree)
    _checkpoints(tree)
    _redpajama(tree)


RUN = f"python {G}/tiny.py"
STEPS = [
    Step("prepare-alpaca", f"python scripts/prepare_alpaca.py --tokenizer_path {TOK} --test_split_size 8",
         outputs=["data/alpaca/train.pt", "data/alpaca/test.pt"], timeout=120),
    Step("finetune-lora", f"{RUN} --data_dir data/alpaca --pretrained_path {BASE} --tokenizer_path {TOK} "
                          f"--out_dir {G}/out/lora",
         outputs=[f"{G}/out/lora/lit-llama-lora-finetuned.pth", f"{G}/out/lora/iter-000003-ckpt.pth"],
         env=_env("finetune/lora.py", FINETUNE), timeout=300),
    Step("finetune-adapter", f"{RUN} --data_dir data/alpaca --pretrained_path {BASE} --out_dir {G}/out/adapter",
         outputs=[f"{G}/out/adapter/lit-llama-adapter-finetuned.pth"],
         env=_env("finetune/adapter.py", FINETUNE), timeout=300),
    Step("generate", f'{RUN} --prompt "Hello, my name is" --checkpoint_path {BASE} --tokenizer_path {TOK} '
                     f"--max_new_tokens 8",
         env=_env("generate.py"), timeout=120),
    Step("generate-lora-cuda", f'{RUN} --prompt "What food do lamas eat?" '
                               f"--lora_path {G}/cuda/lit-llama-lora-finetuned.pth --pretrained_path {BASE} "
                               f"--tokenizer_path {TOK} --max_new_tokens 8",
         env=_env("generate/lora.py"), timeout=120),
    Step("generate-adapter-cuda", f'{RUN} --prompt "What food do lamas eat?" '
                                  f"--adapter_path {G}/cuda/lit-llama-adapter-finetuned.pth "
                                  f"--pretrained_path {BASE} --tokenizer_path {TOK} --max_new_tokens 8",
         env=_env("generate/adapter.py"), timeout=120),
    Step("generate-lora", f'{RUN} --prompt "What food do lamas eat?" '
                          f"--lora_path {G}/out/lora/lit-llama-lora-finetuned.pth --pretrained_path {BASE} "
                          f"--tokenizer_path {TOK} --max_new_tokens 8",
         env=_env("generate/lora.py"), timeout=120),
    Step("prepare-redpajama", f"python scripts/prepare_redpajama.py --source_path data/RedPajama-Data-1T-Sample "
                              f"--tokenizer_path {TOK} --destination_path data/lit-redpajama-sample --sample True "
                              f"--chunk_size {257 * 2}",
         outputs=["data/lit-redpajama-sample/arxiv_sample_0000000000.bin"], timeout=180),
    Step("pretrain-redpajama", f"{RUN} --devices 2 --train_data_dir data/lit-redpajama-sample",
         outputs=[f"{G}/out/training/iter-000001-ckpt.pth"],
         env=_env("pretrain/redpajama.py", PRETRAIN), timeout=300),
]
