"""H2O's own commands, tiny, with their own flags:

- ``textgen-opt``: h2o_hf/scripts/generation/opt_h2o.sh, ``run_text_generation.py --model_arch opt
  --recent_ratio 0.1 --heavy_ratio 0.1`` (the README's text generation: full cache, then utils_hh's
  OPTAttention_Mask swapped in), ``--length 8`` on a tiny random OPT.
- ``lmeval-llama-h2o``: the README's lm-eval-harness step 2 (H2O) for LLaMA, ``run_lm_eval_harness.py
  --model-type llama --enable_small_cache --heavy_ratio 0.1 --recent_ratio 0.1`` (utils_lm_eval's
  LlamaAttention_heavy_hitter) on three requests written in the format generate_task_data.py writes.
  generate_task_data.py and evaluate_task_result.py are left out: they only call lm-eval 0.3's task
  machinery, which downloads the task's data set (and evaluate_task_result.py the real model's tokenizer by
  name); no CUDA there.
- ``summarization-h2o``: scripts/summarization/eval.sh xsum 0 h2o, ``run_summarization.py --enable_h2o_cache
  --hh_size 4 --recent_size 4 --sample_num 2`` (utils_real_drop's H2OLlamaForCausalLM, real KV dropping) on two
  synthetic requests in the format of the repository's data/summarization_data/xsum_0shot.jsonl (16 new
  tokens instead of 64).
- ``streaming-h2o``: scripts/streaming/eval.sh h2o, ``run_streaming.py --enable_streaming_with_H2O
  --heavy_hitter_size 8 --recent_size 16`` (H2OLlamaForCausalLM_streaming) over a synthetic mt_bench.jsonl under
  ``--data_root`` (3 questions, 6 turns). The script generates up to 1000 tokens a turn (no flag), so that model
  is built to answer EOS at once (streaming-llm's recipe's trick: a constant residual channel only EOS reads).
- ``flexgen-h2o``: h2o_flexgen's README example ``cd flexgen; python flex_opt.py --gpu-batch-size 1 --overlap
  false --hh-ratio 0.1 --hh-all --model facebook/opt-6.7b`` with opt-125m and FlexGen's own dummy weights
  (``--path _DUMMY_``), ``--prompt-len 32 --gen-len 4``, offload dir and log file under _gauntlet.

Models are what ``save_pretrained`` writes for a tiny fp16 OPT (byte-level BPE tokenizer trained here) and a
tiny fp16 Llama (SentencePiece; its config.json with the keys a Llama-2 checkpoint's has: num_key_value_heads,
pretraining_tp, rope_scaling, rope_theta, which utils_real_drop reads), their ``pytorch_model.bin`` written as on a GPU box. The OPT tokenizer also
sits in a Hugging Face cache as ``facebook/opt-30b`` (flex_opt.py loads that tokenizer by name). Not CUDA:
``lost_in_the_middle`` (imported, unused, by run_summarization.py; not on PyPI) is a stub under
_gauntlet/site, and ``streaming_llm.utils`` (run_streaming.py's import; mit-han-lab/streaming-llm, not on PyPI,
whose ``load`` takes one argument where run_streaming.py passes three) re-exports the repository's own
h2o_hf/utils_real_drop/stream.py, which has the three-argument ``load`` and the same helpers.
"""

import json
import re
from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint, synthetic_text, tiny_llama

G = "_gauntlet"

ENV = {
    "PYTHONPATH": "{tree}/h2o_hf:{tree}/_gauntlet/site",
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
FLEXGEN_ENV = dict(ENV, PYTHONPATH="{tree}/h2o_flexgen")

LOST_IN_THE_MIDDLE = '''\
"""Stub of nelson-liu/lost-in-the-middle's prompting module (not on PyPI): run_summarization.py imports these
names and uses none of them."""
import dataclasses


@dataclasses.dataclass
class Document:
    title: str = ""
    text: str = ""


def get_closedbook_qa_prompt(*args, **kwargs):
    raise NotImplementedError


def get_qa_prompt(*args, **kwargs):
    raise NotImplementedError


def get_qa_prompt_index(*args, **kwargs):
    raise NotImplementedError
'''

STREAMING_LLM_UTILS = '''\
"""run_streaming.py imports ``load, download_url, load_jsonl`` from ``streaming_llm.utils`` and calls
``load(name, enable_streaming_with_H2O, args)``: the repository's own utils_real_drop/stream.py has exactly these
(streaming-llm's own ``load`` takes one argument)."""
from utils_real_drop.stream import download_url, load, load_jsonl  # noqa: F401
'''


def _prompts(tree: Path) -> str:
    """The repository's own fixed prompts, so the tiny BPE splits them into words rather than bytes."""
    found = []
    for rel, pattern in (("h2o_hf/run_text_generation.py", r"\n    prompt_text = '([^'\n]+)'"),
                         ("h2o_flexgen/flexgen/flex_opt.py", r'\n    prompts = \["(As I sit[^"\n]+)"\]')):
        text = (tree / rel).read_text()
        match = re.search(pattern, text)
        if match:
            found.append(match.group(1))
    return "\n".join(found)


def _bpe_tokenizer(folder: Path, text: str):
    """A byte-level BPE tokenizer laid out as OPT's (GPT2Tokenizer, </s> as BOS/EOS, <pad> = 1)."""
    import tokenizers
    import transformers

    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train_from_iterator(text.splitlines(), vocab_size=600, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"], show_progress=False)
    tokenizer = transformers.GPT2TokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="</s>",
                                               eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
    tokenizer.save_pretrained(folder)
    return tokenizer


def _save(model, folder: Path) -> None:
    model.save_pretrained(folder, safe_serialization=False)
    for stale in folder.glob("*.safetensors"):
        stale.unlink()
    save_cuda_checkpoint(model.state_dict(), folder / "pytorch_model.bin")


def prepare(tree: Path) -> None:
    import torch
    import transformers

    tree = Path(tree)
    root = tree / G
    text = synthetic_text(words=3000, seed=0) + _prompts(tree) + "\n"

    # tiny OPT (utils_hh's OPTAttention_Mask)
    opt = root / "opt"
    tokenizer = _bpe_tokenizer(opt, text)
    config = transformers.OPTConfig(
        vocab_size=len(tokenizer), hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=2048, word_embed_proj_dim=32, pad_token_id=1, bos_token_id=2, eos_token_id=2,
        enable_bias=True, torch_dtype="float16")
    torch.manual_seed(0)
    _save(transformers.OPTForCausalLM(config).to(torch.float16).eval(), opt)
    fake_hub_model(root / "hf", "facebook/opt-30b", tokenizer.save_pretrained)  # flex_opt.py's tokenizer

    # tiny Llama (utils_lm_eval, utils_real_drop)
    llama = root / "llama"
    tokenizer, config = tiny_llama(llama, text)
    config.max_position_embeddings = 2048
    config.torch_dtype = "float16"
    # the keys a Llama-2 checkpoint's config.json carries (utils_real_drop reads them; transformers 4.30's
    # LlamaConfig keeps them as plain attributes)
    config.num_key_value_heads, config.pretraining_tp, config.rope_scaling, config.rope_theta = 4, 1, None, 10000.0
    torch.manual_seed(0)
    _save(transformers.LlamaForCausalLM(config).to(torch.float16).eval(), llama)

    # the same, answering EOS at once (run_streaming.py generates up to 1000 tokens a turn)
    eos = root / "llama-eos"
    tokenizer.save_pretrained(eos)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0] = 0.0
            layer.mlp.down_proj.weight[0] = 0.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[config.eos_token_id, 0] = 1.5
    _save(model.to(torch.float16).eval(), eos)

    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    # generate_task_data.py's request format (lm-eval-harness openbookqa, 5-shot)
    with open(data / "openbookqa-5.jsonl", "w") as f:
        for seed in range(3):
            prompt = synthetic_text(words=36, seed=10 + seed).replace("\n", " ").strip()
            f.write(json.dumps({"best_of": 1, "echo": True, "logprobs": 1, "max_tokens": 0, "model": "x", "n": 1,
                                "prompt": prompt, "request_type": "language-model-inference", "stop": None,
                                "temperature": 0, "top_p": 1}) + "\n")
    # data/summarization_data/xsum_0shot.jsonl's format
    with open(data / "xsum_0shot.jsonl", "w") as f:
        for seed in range(2):
            article = synthetic_text(words=48, seed=20 + seed).replace("\n", " ")
            summary = synthetic_text(words=12, seed=30 + seed).strip()
            f.write(json.dumps({"article": "###\nArticle: " + article + "\n\nSummarize the above article in 1 "
                                "sentence.\n", "summary_gt": summary, "logprobs": 1, "max_tokens": 16, "n": 1,
                                "stop": ["###"], "temperature": 0.3, "top_p": 1}) + "\n")
    # FastChat's MT-Bench question.jsonl format (run_streaming.py would download it)
    with open(data / "mt_bench.jsonl", "w") as f:
        for i in range(3):
            turns = [synthetic_text(words=12, seed=40 + 2 * i + j).strip() for j in range(2)]
            f.write(json.dumps({"question_id": 81 + i, "category": "writing", "turns": turns}) + "\n")

    site = root / "site"
    (site / "lost_in_the_middle").mkdir(parents=True, exist_ok=True)
    (site / "lost_in_the_middle" / "__init__.py").write_text("")
    (site / "lost_in_the_middle" / "prompting.py").write_text(LOST_IN_THE_MIDDLE)
    (site / "streaming_llm").mkdir(parents=True, exist_ok=True)
    (site / "streaming_llm" / "__init__.py").write_text("")
    (site / "streaming_llm" / "utils.py").write_text(STREAMING_LLM_UTILS)
    (root / "out").mkdir(exist_ok=True)
    (root / "offload").mkdir(exist_ok=True)


OUT = f"../{G}/out"

STEPS = [
    Step("textgen-opt",
         f"set -o pipefail; cd h2o_hf && python -u run_text_generation.py --model_arch opt --model_name ../{G}/opt "
         f"--cache_dir ../{G}/cache --recent_ratio 0.1 --heavy_ratio 0.1 --length 8 | tee {OUT}/textgen-opt.log "
         f"&& grep -q 'Generated Context with Heavy Hitter Oracle' {OUT}/textgen-opt.log",
         outputs=[f"{G}/out/textgen-opt.log"], timeout=300, env=ENV),
    Step("lmeval-llama-h2o",
         f"cd h2o_hf && python -u run_lm_eval_harness.py --input-path ../{G}/data/openbookqa-5.jsonl "
         f"--output-path {OUT}/openbookqa-5-llama-h2o.jsonl --model-name ../{G}/llama --model-type llama "
         f"--cache-dir ../{G}/cache --enable_small_cache --heavy_ratio 0.1 --recent_ratio 0.1",
         outputs=[f"{G}/out/openbookqa-5-llama-h2o.jsonl"], timeout=300, env=ENV),
    Step("summarization-h2o",
         f"cd h2o_hf && python -u run_summarization.py --input_path ../{G}/data/xsum_0shot.jsonl "
         f"--output_path {OUT}/xsum_0shot_h2o_hh4_local4.jsonl --model_name ../{G}/llama --hh_size 4 "
         "--recent_size 4 --enable_h2o_cache --sample_num 2",
         outputs=[f"{G}/out/xsum_0shot_h2o_hh4_local4.jsonl"], timeout=300, env=ENV),
    Step("streaming-h2o",
         f"set -o pipefail; cd h2o_hf && python run_streaming.py --model_name_or_path ../{G}/llama-eos "
         f"--data_root ../{G}/data/ --enable_streaming_with_H2O --heavy_hitter_size 8 --recent_size 16 "
         f"| tee {OUT}/streaming-h2o.log",
         outputs=[f"{G}/out/streaming-h2o.log"], timeout=300, env=ENV),
    Step("flexgen-h2o",
         f"cd h2o_flexgen/flexgen && python flex_opt.py --gpu-batch-size 1 --overlap false --hh-ratio 0.1 --hh-all "
         f"--model facebook/opt-125m --path _DUMMY_ --prompt-len 32 --gen-len 4 --offload-dir ../../{G}/offload "
         f"--log-file ../../{G}/out/flexgen-h2o.log",
         outputs=[f"{G}/out/flexgen-h2o.log"], timeout=300, env=FLEXGEN_ENV),
]
