"""MoBA's commands, tiny, with its own flags:

- ``generate-moba``: the README's Quick Start,
  ``python3 examples/llama.py --model meta-llama/Llama-3.1-8B --attn moba``, on a tiny random fp16 Llama that
  prepare() writes (``--model`` a local folder), with ``--moba-chunk-size 4 --moba-topk 2`` (the script's own flags)
  so that the prompt ("how are you?", 13 tokens with the tiny SentencePiece tokenizer) spans four MoBA blocks and
  the prefill takes the gated path of moba_efficient.moba_attn_varlen (flash-attn's _flash_attn_varlen_forward
  twice, then the online-softmax merge); each of the decoding steps up to max_length 32 goes through
  flash_attn_func (wrapper.py's decode branch).
- ``generate-moba-naive``: the same with ``--attn moba_naive`` (the mask-based reference for the prefill; the decode
  steps still call flash_attn_func).
- ``pytest``: the README's ``pytest tests/test_moba_attn.py`` (the efficient kernel against the naive reference,
  output and q/k/v gradients, bf16), scaled down with pytest's own ``-k`` to three of its 324 cases at its smallest
  sequence length (512) and head counts 1, 2 and 4.
- ``speedup``: tests/test_moba_speedup.py's own benchmark function (its ``__main__`` calls it at seqlen 32768) called
  at seqlen 1024, chunk 256, top-k 3: flash_attn_varlen_func and moba_attn_varlen forward and backward,
  ``torch.cuda.synchronize()`` around the timers.

The model folder is what ``save_pretrained`` writes for a tiny Llama (hidden 32, 4 heads, 2 layers, vocabulary 96
from a SentencePiece tokenizer trained on synthetic text), its ``pytorch_model.bin`` written as on a GPU box
(``save_cuda_checkpoint``). ``pip install .`` is replaced by ``PYTHONPATH={tree}``.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text, tiny_llama

G = "_gauntlet"
MODEL = f"{G}/llama"

ENV = {
    "PYTHONPATH": "{tree}",
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def prepare(tree: Path) -> None:
    import torch
    import transformers

    root = Path(tree) / G
    text = synthetic_text(words=3000, seed=0)
    _tokenizer, config = tiny_llama(root / "llama", text)
    config.torch_dtype = "float16"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.float16).eval()
    model.save_pretrained(root / "llama", safe_serialization=False)
    for stale in (root / "llama").glob("*.safetensors"):
        stale.unlink()
    save_cuda_checkpoint(model.state_dict(), root / "llama" / "pytorch_model.bin")


GENERATE = f"python examples/llama.py --model {MODEL} --moba-chunk-size 4 --moba-topk 2"
# pytest ids are batch-head-seqlen-head_dim-moba_chunk_size-moba_topk, read from the parametrize lists
PYTEST_CASES = " or ".join(f"[{case}]" for case in ("2-128-128-512-1-1", "3-256-128-512-2-4", "4-128-128-512-4-7"))

STEPS = [
    Step("generate-moba", f"{GENERATE} --attn moba", timeout=300, env=ENV),
    Step("generate-moba-naive", f"{GENERATE} --attn moba_naive", timeout=300, env=ENV),
    Step("pytest", f'python -m pytest -x -q tests/test_moba_attn.py -k "{PYTEST_CASES}"', timeout=600, env=ENV),
    Step("speedup",
         "python -c 'import sys; sys.path.insert(0, \"tests\"); import test_moba_speedup as t; "
         "t.test_attn_varlen_moba_speed(batch=1, head=1, seqlen=1024, head_dim=128, moba_chunk_size=256, "
         "moba_topk=3)'",
         timeout=300, env=ENV),
]
