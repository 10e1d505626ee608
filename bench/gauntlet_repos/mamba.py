"""Mamba as its README runs it: benchmarks/benchmark_generation_mamba_simple.py (the README's
Inference examples: a prompt with top-p / min-p sampling and repetition penalty, and the random-prompt
throughput run) on tiny random Mamba-1 and Mamba-2 language models laid out in an offline Hugging Face
cache as `state-spaces/mamba-130m` / `state-spaces/mamba2-130m` (config.json + pytorch_model.bin
written as on a GPU box, the pretrained configs' rms_norm / fused_add_norm / residual_in_fp32 kept),
with a tiny byte-level BPE tokenizer as `EleutherAI/gpt-neox-20b`; the README's Mamba / Mamba-2 block
usage snippets (CPU tensors, plus a backward pass); and the test suite's reference-vs-kernel tests,
a few parametrizations each (selective scan and mamba_inner_fn forward+backward, selective_state_update,
gated RMSNorm as Mamba-2 uses it, Mamba-2 LM generation with cg=True; tests/ops/triton/test_ssd.py is left
out: it checks Triton internals against each other, on 300 sequences of width 4096). The tree runs from the tree
(PYTHONPATH=.): setup.py's CUDA extension (selective_scan_cuda) is not built, as the README's default
install leaves it out."""

from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint, synthetic_text

G = "_gauntlet"
ENV = {"PYTHONPATH": ".", "HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false"}
VOCAB = 1024  # >= 1000: the script's random prompts are torch.randint(1, 1000, ...)

# The pretrained configs (state-spaces/mamba-130m, state-spaces/mamba2-130m), sizes shrunk.
MAMBA1 = {"d_model": 32, "d_intermediate": 0, "n_layer": 2, "vocab_size": VOCAB, "ssm_cfg": {},
          "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True, "residual_in_fp32": True,
          "fused_add_norm": True, "pad_vocab_size_multiple": 8, "tie_embeddings": True}
MAMBA2 = {"d_model": 64, "d_intermediate": 0, "n_layer": 2, "vocab_size": VOCAB, "ssm_cfg": {"layer": "Mamba2"},
          "attn_layer_idx": [], "attn_cfg": {}, "rms_norm": True, "residual_in_fp32": True,
          "fused_add_norm": True, "pad_vocab_size_multiple": 16, "tie_embeddings": True}

USAGE = '''\
# The README's "Mamba Block" and "Mamba-2" usage snippets (README sizes; Mamba-2 at d_model=64, the
# smallest its default headdim=64 allows), on CPU tensors, with a backward pass.
import torch
from mamba_ssm import Mamba, Mamba2

torch.manual_seed(0)
batch, length, dim = 2, 64, 16
x = torch.randn(batch, length, dim, requires_grad=True)
model = Mamba(
    d_model=dim,  # Model dimension d_model
    d_state=16,   # SSM state expansion factor
    d_conv=4,     # Local convolution width
    expand=2,     # Block expansion factor
)
y = model(x)
assert y.shape == x.shape
y.float().square().mean().backward()
assert x.grad is not None and model.A_log.grad is not None
print("Mamba ok", y.abs().mean().item())

dim = 64
x = torch.randn(batch, length, dim, requires_grad=True)
model = Mamba2(
    d_model=dim,  # Model dimension d_model
    d_state=64,   # SSM state expansion factor, typically 64 or 128
    d_conv=4,     # Local convolution width
    expand=2,     # Block expansion factor
)
y = model(x)
assert y.shape == x.shape
y.float().square().mean().backward()
assert x.grad is not None and model.A_log.grad is not None
print("Mamba2 ok", y.abs().mean().item())
'''


def _padded(config: dict) -> int:
    vocab, multiple = config["vocab_size"], config["pad_vocab_size_multiple"]
    return vocab + (-vocab) % multiple


def _dt_bias(n: int, generator):
    """inverse-softplus of dt ~ logUniform(1e-3, 1e-1), as the modules initialise dt_proj.bias / dt_bias."""
    import math

    import torch

    dt = torch.exp(torch.rand(n, generator=generator) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
    dt = dt.clamp(min=1e-4)
    return dt + torch.log(-torch.expm1(-dt))


def _state_dict(config: dict, seed: int) -> dict:
    """A MambaLMHeadModel state dict for ``config`` (Mamba1 or Mamba2 mixers, no MLP, RMSNorm), by
    hand: prepare() runs before the tree's code can be imported off CUDA."""
    import math

    import torch

    g = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    d, vocab = config["d_model"], _padded(config)
    embedding = rand(vocab, d)
    sd = {"backbone.embedding.weight": embedding}
    layer = config["ssm_cfg"].get("layer", "Mamba1")
    for i in range(config["n_layer"]):
        p = f"backbone.layers.{i}."
        sd[p + "norm.weight"] = torch.ones(d)
        m = p + "mixer."
        if layer == "Mamba1":
            d_state, d_conv, d_inner = 16, 4, 2 * d
            dt_rank = math.ceil(d / 16)
            sd[m + "in_proj.weight"] = rand(2 * d_inner, d)
            sd[m + "conv1d.weight"] = rand(d_inner, 1, d_conv, std=0.2)
            sd[m + "conv1d.bias"] = torch.zeros(d_inner)
            sd[m + "x_proj.weight"] = rand(dt_rank + 2 * d_state, d_inner)
            sd[m + "dt_proj.weight"] = rand(d_inner, dt_rank, std=dt_rank ** -0.5)
            sd[m + "dt_proj.bias"] = _dt_bias(d_inner, g)
            sd[m + "A_log"] = torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(d_inner, 1)
            sd[m + "D"] = torch.ones(d_inner)
            sd[m + "out_proj.weight"] = rand(d, d_inner)
        else:  # Mamba2 defaults: d_state=128, d_conv=4, expand=2, headdim=64, ngroups=1, rmsnorm
            d_state, d_conv, d_inner, headdim, ngroups = 128, 4, 2 * d, 64, 1
            nheads = d_inner // headdim
            conv_dim = d_inner + 2 * ngroups * d_state
            sd[m + "dt_bias"] = _dt_bias(nheads, g)
            sd[m + "A_log"] = torch.log(torch.empty(nheads).uniform_(1, 16, generator=g))
            sd[m + "D"] = torch.ones(nheads)
            sd[m + "in_proj.weight"] = rand(2 * d_inner + 2 * ngroups * d_state + nheads, d)
            sd[m + "conv1d.weight"] = rand(conv_dim, 1, d_conv, std=0.2)
            sd[m + "conv1d.bias"] = torch.zeros(conv_dim)
            sd[m + "norm.weight"] = torch.ones(d_inner)
            sd[m + "out_proj.weight"] = rand(d, d_inner)
    sd["backbone.norm_f.weight"] = torch.ones(d)
    sd["lm_head.weight"] = embedding  # tie_embeddings
    return sd


def _tokenizer(folder: Path) -> None:
    """A tiny byte-level BPE tokenizer (GPT-NeoX's kind), saved as transformers does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|padding|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    text = synthetic_text(3000) + "My cat wrote all this CUDA code for a new language model and\n"
    tok.train_from_iterator(text.splitlines(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>", pad_token="<|padding|>")
    assert len(fast) <= VOCAB
    fast.save_pretrained(folder)


def prepare(tree: Path) -> None:
    import json

    root = Path(tree) / G
    root.mkdir(parents=True, exist_ok=True)
    hf = root / "hf"
    fake_hub_model(hf, "EleutherAI/gpt-neox-20b", _tokenizer)
    for repo_id, config, seed in (("state-spaces/mamba-130m", MAMBA1, 0), ("state-spaces/mamba2-130m", MAMBA2, 1)):
        def save(folder, config=config, seed=seed):
            (folder / "config.json").write_text(json.dumps(config, indent=2))
            save_cuda_checkpoint(_state_dict(config, seed), folder / "pytorch_model.bin")
        fake_hub_model(hf, repo_id, save)
    (root / "usage.py").write_text(USAGE)


BENCH = "python benchmarks/benchmark_generation_mamba_simple.py"
PROMPT = "--prompt 'My cat wrote all this CUDA code for a new language model and'"
# --import-mode=importlib: the default "prepend" mode puts tests/ops on sys.path, where tests/ops/triton
# (no __init__.py) then imports as an empty namespace package `triton` wherever Triton is not installed
PYTEST = "python -m pytest -x -q -p no:cacheprovider --import-mode=importlib"

STEPS = [
    # README, Inference: latency with a prompt, top-p sampling (Mamba-1), sizes via --genlen.
    Step("generate-mamba", f"{BENCH} --model-name state-spaces/mamba-130m {PROMPT} --topp 0.9 --temperature 0.7"
                           " --repetition-penalty 1.2 --genlen 8", env=ENV, timeout=240),
    # README: the min-p variant, with the Mamba-2 model.
    Step("generate-mamba2", f"{BENCH} --model-name state-spaces/mamba2-130m {PROMPT} --minp 0.05 --topk 0"
                            " --temperature 0.7 --repetition-penalty 1.2 --genlen 8", env=ENV, timeout=240),
    # README: throughput with random prompts (--batch 64), shrunk.
    Step("generate-throughput", f"{BENCH} --model-name state-spaces/mamba-130m --batch 2 --promptlen 8 --genlen 8",
         env=ENV, timeout=240),
    Step("usage-blocks", f"python {G}/usage.py", env=ENV, timeout=240),
    # The test suite's reference-vs-kernel tests, a few parametrizations each (the sizes are the tests' own).
    Step("test-selective-scan",
         f"{PYTEST} 'tests/ops/test_selective_scan.py::test_selective_scan[True-True-1-True-True-True-True-True-128-itype0-wtype0]'"
         " 'tests/ops/test_selective_scan.py::test_selective_scan[True-True-2-True-True-True-True-True-128-itype0-wtype0]'"
         " 'tests/ops/test_selective_scan.py::test_mamba_inner_fn[True-True-128-itype0-wtype0]'", env=ENV, timeout=300),
    Step("test-state-update-norm",
         f"{PYTEST} 'tests/ops/triton/test_selective_state_update.py::test_selective_state_update[2048-16-True-itype0]'"
         " 'tests/ops/triton/test_selective_state_update.py::test_selective_state_update[2048-16-False-itype1]'"
         " 'tests/ops/triton/test_layernorm_gated.py::test_layer_norm_gated[2048-wtype0-dtype0-False-True-True-True-False]'",
         env=ENV, timeout=300),
    Step("test-generation", f"{PYTEST} tests/test_generation.py::test_generation", env=ENV, timeout=300),
]
