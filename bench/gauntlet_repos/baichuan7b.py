"""baichuan-inc/Baichuan-7B: the README's commands, tiny, with the repository's own flags.

- ``eval-ceval``: the README's C-Eval command, ``cd evaluation; python evaluate_zh.py --model_name_or_path
  'your/model/path'`` on a tiny random Baichuan checkpoint (``--output_dir`` into ``_gauntlet``). The script reads
  C-Eval from the relative path ``ceval/ceval-exam`` with ``load_dataset(DATA_PATH, task_name)`` for each of its 52
  tasks: ``prepare`` writes a local dataset folder there (evaluation/ceval/ceval-exam: one CSV config per task, 5 dev
  and 1 val rows, the Hub dataset's columns), the default ``--shot 5`` and ``--split val``.
- ``eval-mmlu``: the README's MMLU recipe, ``git clone hendrycks/test; cd test; tar xf data.tar; mkdir results; cp
  ../evaluate_mmlu.py .; python evaluate_mmlu.py -m /path/to/Baichuan-7B``: ``prepare`` lays out the hendrycks folder
  (``_gauntlet/mmlu``: ``categories.py`` with four of its subjects, one per category, and data/dev, data/test CSVs
  for them), the step copies evaluate_mmlu.py there and runs it with ``-m`` (default ``--ntrain 5``).
- ``train``: the README's ``scripts/train.sh`` (``deepspeed --hostfile config/hostfile --force_multi train.py
  --deepspeed --deepspeed_config config/deepspeed.json``; the repository's bf16 AdamW config with ZeRO stage 3 for its
  stage 2, see below) on one
  node of two processes: ``deepspeed --num_gpus 2`` in place of the cluster hostfile and ``--force_multi`` (pdsh over
  ssh; DeepSpeed checks every hostfile host over ssh, localhost too), a port of its own, and train.py's flags
  ``--data_dir --tokenizer_path --max_length 32 --steps_per_epoch 1 --checkpoint_saving_path``. Two ranks, one corpus file each
  with two samples. train.py's loop is ``while True`` (save a checkpoint every --steps_per_epoch steps) and ends when
  DataEngine.get_data pops an empty list: the step passes when both checkpoints (Epoch-1, Epoch-2) are written and
  the only exception is that ``IndexError: pop from empty list`` (``_gauntlet/until_data_runs_out.py``).

The model: the repository's models/ (BaiChuanConfig, BaiChuanForCausalLM) is the only model code it has, and the
evaluation scripts load a checkpoint's own code (``trust_remote_code=True``): ``prepare`` writes a Hugging Face
folder (config.json with ``auto_map``, the tree's models/configuration_baichuan.py and modeling_baichuan.py copied
beside it, so the port's copy runs on the port) with tiny random weights (vocabulary 96, hidden 64, 2 layers, 4
heads), written as on a GPU box (``pytorch_model.bin``, storages tagged cuda:0), and a tiny SentencePiece tokenizer
as LlamaTokenizer / LlamaTokenizerFast files (the Hub's BaiChuanTokenizer is remote code not in the repository; it
is a SentencePiece wrapper too). The weights are written with plain torch (the modeling module imports xformers).
train.py builds ``BaiChuanForCausalLM(BaiChuanConfig())``, the full 7B, with no flag for its size: a sitecustomize
on the step's PYTHONPATH gives BaiChuanConfig the tiny sizes as defaults when models.configuration_baichuan is
imported (nothing else changes). The corpus is synthetic text, the tokenizer the same SentencePiece model.
ZeRO stage 3 in place of config/deepspeed.json's 2 (not a CUDA matter): train.py builds the model under
``deepspeed.zero.Init(config_dict_or_path=..., enabled=True)``, which partitions every parameter whatever the
configured stage, and the stage-2 engine never gathers them: the first forward fails ("'weight' must be 2-D") on the
CPU copy of the original with its .cuda()/xformers made CPU, and on GPUs too (the repository's issues #71, #109).
"""

import json
import os
import shutil
from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint, synthetic_text, train_sentencepiece

G = "_gauntlet"
MODEL = f"{G}/baichuan-7b"

TINY = {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4}

ENV = {
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# DeepSpeed's CPU accelerator JIT-builds deepspeed_shm_comm and fused_adam (minutes each on a loaded 2-core machine):
# one folder for this recipe's environment, shared by the original, the port and the emulated run, so they build once
# (the default ~/.cache/torch_extensions is shared with other recipes' environments, whose source paths differ).
EXTENSIONS = os.path.expanduser("~/.cache/porter-gauntlet/torch_extensions-baichuan7b")

SITECUSTOMIZE = '''\
"""Gauntlet: train.py builds BaiChuanForCausalLM(BaiChuanConfig()) (7B) with no size flag; give BaiChuanConfig
tiny default sizes when models.configuration_baichuan is imported. Nothing else is touched."""
import importlib.abc
import importlib.machinery
import sys

TINY = %r


class _TinyBaichuan(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "models.configuration_baichuan":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            cls = module.BaiChuanConfig
            init = cls.__init__

            def __init__(self, *args, **kwargs):
                if not args:
                    for key, value in TINY.items():
                        kwargs.setdefault(key, value)
                init(self, *args, **kwargs)

            cls.__init__ = __init__

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _TinyBaichuan())
''' % (TINY,)

UNTIL_DATA_RUNS_OUT = '''\
"""Gauntlet: run train.py's launcher; train.py loops `while True` and ends when DataEngine.get_data pops an
empty list. Exit 0 when the command did, or when every exception it printed is that IndexError; else its code."""
import re
import subprocess
import sys

proc = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
sys.stdout.write(proc.stdout)
if proc.returncode == 0:
    sys.exit(0)
lines = [re.sub(r"^\\[rank\\d+\\]:\\s?", "", line) for line in proc.stdout.splitlines()]
exceptions = []
for i, line in enumerate(lines):
    if line.startswith("Traceback (most recent call last)"):
        for later in lines[i + 1:]:
            if re.match(r"^[A-Za-z_][\\w.]*(Error|Exception|Interrupt|Exit)\\b", later):
                exceptions.append(later.strip())
                break
ended = exceptions and all(e == "IndexError: pop from empty list" for e in exceptions)
print(f"gauntlet: exit {proc.returncode}, exceptions {exceptions}: "
      + ("the data ran out (train.py's only end)" if ended else "failed"))
sys.exit(0 if ended else proc.returncode or 1)
'''

CEVAL_TASKS = [
    "high_school_physics", "fire_engineer", "computer_network", "advanced_mathematics", "logic",
    "middle_school_physics", "clinical_medicine", "probability_and_statistics", "ideological_and_moral_cultivation",
    "operating_system", "middle_school_mathematics", "chinese_language_and_literature", "electrical_engineer",
    "business_administration", "high_school_geography", "modern_chinese_history", "legal_professional",
    "middle_school_geography", "middle_school_chemistry", "high_school_biology", "high_school_chemistry", "physician",
    "high_school_chinese", "tax_accountant", "high_school_history", "mao_zedong_thought", "high_school_mathematics",
    "professional_tour_guide", "veterinary_medicine", "environmental_impact_assessment_engineer", "basic_medicine",
    "education_science", "urban_and_rural_planner", "middle_school_biology", "plant_protection",
    "middle_school_history", "high_school_politics", "metrology_engineer", "art_studies", "college_economics",
    "college_chemistry", "law", "sports_science", "civil_servant", "college_programming", "middle_school_politics",
    "teacher_qualification", "computer_architecture", "college_physics", "discrete_mathematics", "marxism",
    "accountant",
]

# hendrycks/test's categories.py, reduced to four subjects (one per category): evaluate_mmlu.py averages every
# subcategory and category listed, so each listed one must have a subject.
CATEGORIES = '''\
subcategories = {
    "abstract_algebra": ["math"],
    "anatomy": ["health"],
    "econometrics": ["economics"],
    "philosophy": ["philosophy"],
}

categories = {
    "STEM": ["physics", "chemistry", "biology", "computer science", "math", "engineering"],
    "humanities": ["history", "philosophy", "law"],
    "social sciences": ["politics", "culture", "economics", "geography", "psychology"],
    "other (business, health, misc.)": ["other", "business", "health"],
}
'''


def _state_dict(config: dict, seed: int = 0) -> dict:
    """BaiChuanForCausalLM's state dict (names and shapes of models/modeling_baichuan.py), random, in plain torch."""
    import torch

    g = torch.Generator().manual_seed(seed)
    v, h, i, n = config["vocab_size"], config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    head = h // config["num_attention_heads"]

    def rand(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    sd = {"model.embed_tokens.weight": rand(v, h)}
    for k in range(n):
        p = f"model.layers.{k}."
        sd[p + "self_attn.W_pack.weight"] = rand(3 * h, h)
        sd[p + "self_attn.o_proj.weight"] = rand(h, h)
        sd[p + "self_attn.rotary_emb.inv_freq"] = 1.0 / (10000 ** (torch.arange(0, head, 2).float() / head))
        sd[p + "mlp.gate_proj.weight"] = rand(i, h)
        sd[p + "mlp.down_proj.weight"] = rand(h, i)
        sd[p + "mlp.up_proj.weight"] = rand(i, h)
        sd[p + "input_layernorm.weight"] = torch.ones(h)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(h)
    sd["model.norm.weight"] = torch.ones(h)
    sd["lm_head.weight"] = rand(v, h)
    return sd


def _csv(rows) -> str:
    import csv
    import io

    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()


def prepare(tree: Path) -> None:
    import os

    os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"  # transformers 4.29's old sentencepiece_model_pb2
    import transformers

    tree = Path(tree)
    work = tree / G
    work.mkdir(parents=True, exist_ok=True)
    (work / "out").mkdir(exist_ok=True)
    r = rng(0)

    # tokenizer: a tiny SentencePiece BPE (unk 0, bos 1, eos 2, as Baichuan's), for train.py and the checkpoint
    text = synthetic_text(words=4000, seed=0)
    spm = train_sentencepiece(text, work / "spm" / "tokenizer", vocab_size=TINY["vocab_size"])
    shutil.copyfile(spm, work / "tokenizer.model")

    # the checkpoint: config with auto_map, the tree's model code, weights as on a GPU box, tokenizer files
    model = tree / MODEL
    model.mkdir(parents=True, exist_ok=True)
    for name in ("configuration_baichuan.py", "modeling_baichuan.py"):
        shutil.copyfile(tree / "models" / name, model / name)
    config = {
        "architectures": ["BaiChuanForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_baichuan.BaiChuanConfig",
                     "AutoModelForCausalLM": "modeling_baichuan.BaiChuanForCausalLM"},
        "model_type": "baichuan", **TINY, "hidden_act": "silu", "max_position_embeddings": 4096,
        "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "pad_token_id": 0, "bos_token_id": 1,
        "eos_token_id": 2, "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.29.1",
    }
    (model / "config.json").write_text(json.dumps(config, indent=2))
    save_cuda_checkpoint(_state_dict(config), model / "pytorch_model.bin")
    slow = transformers.LlamaTokenizer(vocab_file=str(spm))
    slow.save_pretrained(model)
    fast = transformers.LlamaTokenizerFast.from_pretrained(str(model))
    fast.save_pretrained(model)

    # C-Eval, in the layout load_dataset("ceval/ceval-exam", task) reads from evaluation/ (its cwd)
    ceval = tree / "evaluation" / "ceval" / "ceval-exam"
    header = ["id", "question", "A", "B", "C", "D", "answer", "explanation"]
    configs = []
    for task in CEVAL_TASKS:
        for split, count in (("dev", 5), ("val", 1)):
            rows = [header] + [[j, f"{task} 问题 {j}: the model learns a small function?", "甲 the", "乙 model",
                                "丙 weights", "丁 data", r.choice("ABCD"), ""] for j in range(count)]
            (ceval / task).mkdir(parents=True, exist_ok=True)
            (ceval / task / f"{split}.csv").write_text(_csv(rows))
        configs.append(f"- config_name: {task}\n  data_files:\n"
                       f"  - split: dev\n    path: {task}/dev.csv\n  - split: val\n    path: {task}/val.csv\n")
    (ceval / "README.md").write_text("---\nconfigs:\n" + "".join(configs) + "---\n# synthetic C-Eval (gauntlet)\n")

    # MMLU: hendrycks/test's folder with data/{dev,test}/SUBJECT_{dev,test}.csv (no header) and categories.py
    mmlu = work / "mmlu"
    for split, count in (("dev", 5), ("test", 2)):
        (mmlu / "data" / split).mkdir(parents=True, exist_ok=True)
        for subject in ("abstract_algebra", "anatomy", "econometrics", "philosophy"):
            rows = [[f"Which of these is {subject} item {j}?", "the model", "a function", "its inputs", "the log",
                     r.choice("ABCD")] for j in range(count)]
            (mmlu / "data" / split / f"{subject}_{split}.csv").write_text(_csv(rows))
    (mmlu / "categories.py").write_text(CATEGORIES)
    (mmlu / "results").mkdir(exist_ok=True)

    # train.py: a corpus file per rank, two samples each (every line is longer than --max_length 32 + 1 tokens)
    data = work / "data_dir"
    data.mkdir(exist_ok=True)
    for k in range(2):
        lines = [synthetic_text(words=48, seed=10 * k + j).replace("\n", " ").strip() for j in range(2)]
        (data / f"part-{k:02d}.txt").write_text("\n".join(lines) + "\n")
    # config/deepspeed.json with ZeRO stage 3 (nothing else changed): train.py builds the model under
    # deepspeed.zero.Init, which partitions every parameter whatever the stage; the stage-2 engine never gathers them,
    # so the first forward fails ("'weight' must be 2-D"), on CUDA too (issues #71, #109), not a CUDA matter
    ds = json.loads((tree / "config" / "deepspeed.json").read_text())
    ds["zero_optimization"]["stage"] = 3
    (work / "deepspeed.json").write_text(json.dumps(ds, indent=2))
    (work / "site").mkdir(exist_ok=True)
    (work / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (work / "until_data_runs_out.py").write_text(UNTIL_DATA_RUNS_OUT)


TRAIN = (f"python {G}/until_data_runs_out.py deepspeed --num_gpus 2 --master_port 29643 train.py "
         f"--deepspeed --deepspeed_config {G}/deepspeed.json --data_dir {G}/data_dir "
         f"--tokenizer_path {G}/tokenizer.model --max_length 32 --steps_per_epoch 1 "
         f"--checkpoint_saving_path {G}/checkpoints")

STEPS = [
    Step("eval-ceval", f"cd evaluation && python evaluate_zh.py --model_name_or_path ../{MODEL} "
                       f"--output_dir ../{G}/out/ceval",
         outputs=[f"{G}/out/ceval/acc.json", f"{G}/out/ceval/accountant.json"], timeout=600, env=ENV),
    Step("eval-mmlu", f"cp evaluation/evaluate_mmlu.py {G}/mmlu/ && cd {G}/mmlu && "
                      "python evaluate_mmlu.py -m ../baichuan-7b",
         outputs=[f"{G}/mmlu/results/results_../baichuan-7b/philosophy.csv"], timeout=300, env=ENV),
    Step("train", TRAIN,
         outputs=[f"{G}/checkpoints/Epoch-1/zero_pp_rank_1_mp_rank_00_model_states.pt",
                  f"{G}/checkpoints/Epoch-2/zero_pp_rank_1_mp_rank_00_model_states.pt"],
         timeout=900, env={**ENV, "PYTHONPATH": "{tree}/_gauntlet/site", "TORCH_EXTENSIONS_DIR": EXTENSIONS}),
]
