"""streaming-llm's two commands, tiny, with its own flags:

- ``chat``: the README's ``python examples/run_streaming_llama.py --enable_streaming`` (start_size 4 and recent_size
  2000 at their defaults) on the first six questions of the repository's own data/mt_bench.jsonl, copied under
  ``--data_root _gauntlet/data/`` (12 prompts of one streaming conversation; all 160 take about five minutes on a
  loaded CPU). The script generates up to 1000 tokens a prompt (no flag), too long on a CPU, so the tiny model is
  built to answer EOS at once (a constant residual channel that only EOS's output row reads): each prompt is a
  prefill and two decoding steps, and from the 8th prompt on ``evict_for_space`` (room for the prompt plus 1000
  tokens) drops the middle of the cache.
  A control step: the script loads with ``device_map="auto"`` and moves inputs to ``model.device``.
- ``ppl-streaming``: ``examples/eval_long_ppl.py --enable_start_recent_kv_cache --enable_pos_shift`` (the paper's
  StreamingLLM perplexity: 4 sink tokens plus a recent window of 32, the Llama pos-shift attention patch) for 96
  tokens of one synthetic "wikitext" document, read by ``load_dataset`` from a local folder whose README declares
  the ``wikitext-2-raw-v1`` config and its test split (the Hub's own layout). eval_long_ppl.py hard-codes
  ``device = "cuda"``.
- ``ppl-dense``: the same evaluation without the cache or the patch (the dense baseline), 48 tokens.

The model folder is what ``save_pretrained`` writes for a tiny fp16 Llama (vocabulary 96 from a SentencePiece
tokenizer trained on synthetic text), with its ``pytorch_model.bin`` written as on a GPU box
(``save_cuda_checkpoint``: every storage tagged cuda:0). ``python setup.py develop`` is replaced by
``PYTHONPATH={tree}``; the Hub and the datasets cache are kept under ``_gauntlet/hf`` and offline.
"""

import json
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text, tiny_llama

G = "_gauntlet"
MODEL = f"{G}/llama"

ENV = {
    "PYTHONPATH": "{tree}",
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}

WIKITEXT_README = """---
configs:
- config_name: wikitext-2-raw-v1
  data_files:
  - split: test
    path: wikitext-2-raw-v1/test.jsonl
  - split: validation
    path: wikitext-2-raw-v1/validation.jsonl
---
# synthetic wikitext (gauntlet)
"""


def prepare(tree: Path) -> None:
    import torch
    import transformers

    root = Path(tree) / G
    text = synthetic_text(words=3000, seed=0)
    tokenizer, config = tiny_llama(root / "llama", text)
    config.max_position_embeddings = 4096
    config.torch_dtype = "float16"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():  # greedy decoding answers EOS at once, so each of the 160 prompts ends after two tokens
        model.model.embed_tokens.weight[:, 0] = 1.0  # residual channel 0 is 1.0 at every position ...
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0] = 0.0  # ... since no block writes to it
            layer.mlp.down_proj.weight[0] = 0.0
        model.lm_head.weight[:, 0] = 0.0
        model.lm_head.weight[config.eos_token_id, 0] = 1.5  # EOS's logit about 8, the rest below 1
    model = model.to(torch.float16).eval()
    model.save_pretrained(root / "llama", safe_serialization=False)
    for stale in (root / "llama").glob("*.safetensors"):
        stale.unlink()
    save_cuda_checkpoint(model.state_dict(), root / "llama" / "pytorch_model.bin")

    data = root / "data"  # the repository's first six MT-Bench questions: 12 prompts, evictions from the 8th on
    data.mkdir(parents=True, exist_ok=True)
    questions = (Path(tree) / "data" / "mt_bench.jsonl").read_text().splitlines(keepends=True)
    (data / "mt_bench.jsonl").write_text("".join(questions[:6]))

    wiki = root / "wikitext"
    (wiki / "wikitext-2-raw-v1").mkdir(parents=True, exist_ok=True)
    (wiki / "README.md").write_text(WIKITEXT_README)
    for split, seed in (("test", 1), ("validation", 2)):
        rows = [{"text": synthetic_text(words=400, seed=seed).replace("\n", " ")},
                {"text": synthetic_text(words=50, seed=seed + 10)}]
        (wiki / "wikitext-2-raw-v1" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "out").mkdir(exist_ok=True)


PPL = (f"python examples/eval_long_ppl.py --model_name_or_path {MODEL} --dataset_name {G}/wikitext "
       "--task wikitext-2-raw-v1 --split test --num_samples 1")

STEPS = [
    Step("chat",
         f"python examples/run_streaming_llama.py --model_name_or_path {MODEL} --data_root {G}/data/ "
         "--enable_streaming",
         timeout=300, env=ENV),
    Step("ppl-streaming",
         f"{PPL} --output_dir {G}/out/ppl-streaming --enable_start_recent_kv_cache --start_size 4 "
         "--recent_size 32 --enable_pos_shift --num_eval_tokens 96",
         outputs=[f"{G}/out/ppl-streaming/ppl.txt", f"{G}/out/ppl-streaming/log.txt"], timeout=240, env=ENV),
    Step("ppl-dense",
         f"{PPL} --output_dir {G}/out/ppl-dense --num_eval_tokens 48",
         outputs=[f"{G}/out/ppl-dense/ppl.txt"], timeout=240, env=ENV),
]
