"""xLSTM as its README runs it: the NeurIPS architecture's usage snippets (xLSTMBlockStack from dataclass configs
with an sLSTM block on the README's backend="cuda"; xLSTMLMModel from the README's yaml string through OmegaConf and
dacite), sizes shrunk, with a loss and a backward; the xLSTM Large snippet (TFLA Triton kernels, inference mode) with
the demo notebook's single-step call on the returned state and a generate call; the load_from_pretrained notebook on
a tiny random checkpoint (model.safetensors + config.yaml, the kernels left at the config's defaults); the README's
three synthetic experiments (`PYTHONPATH=. python experiments/main.py --config ...` for xLSTM[0:1], [1:0], [1:1])
on configs the recipe writes from the tree's own experiments/parity_*.yaml with only their sizes changed (2 steps,
validation after step 2, batch 8, short sequences, tiny online splits): `training.device` and the sLSTM backend stay
as the tree says; and one parametrization each of the test suite's tests, with a check that nothing was skipped
(tests/conftest.py skips the whole suite where CUDA is not available).

The snippets are the recipe's files, not the tree's, so porter does not see them: the README's `.to("cuda")` lines
are left out (the snippets run where their tensors are), its backend / kernel choices are kept. The tree runs from
the tree (PYTHONPATH=.), as the README's experiment commands do.
"""

from pathlib import Path

from _recipe import Step

G = "_gauntlet"
ENV = {"PYTHONPATH": ".", "TOKENIZERS_PARALLELISM": "false"}

USAGE_BLOCK_STACK = '''\
# README "xLSTM Block Stack" (context_length 256 -> 32, num_blocks 7 -> 3, batch 4 -> 2), then a backward.
import torch

from xlstm import (
    xLSTMBlockStack,
    xLSTMBlockStackConfig,
    mLSTMBlockConfig,
    mLSTMLayerConfig,
    sLSTMBlockConfig,
    sLSTMLayerConfig,
    FeedForwardConfig,
)

torch.manual_seed(0)
cfg = xLSTMBlockStackConfig(
    mlstm_block=mLSTMBlockConfig(
        mlstm=mLSTMLayerConfig(
            conv1d_kernel_size=4, qkv_proj_blocksize=4, num_heads=4
        )
    ),
    slstm_block=sLSTMBlockConfig(
        slstm=sLSTMLayerConfig(
            backend="cuda",
            num_heads=4,
            conv1d_kernel_size=4,
            bias_init="powerlaw_blockdependent",
        ),
        feedforward=FeedForwardConfig(proj_factor=1.3, act_fn="gelu"),
    ),
    context_length=32,
    num_blocks=3,
    embedding_dim=128,
    slstm_at=[1],

)

xlstm_stack = xLSTMBlockStack(cfg)

x = torch.randn(2, 32, 128).requires_grad_(True)
y = xlstm_stack(x)
assert y.shape == x.shape, y.shape
y.float().square().mean().backward()
assert x.grad is not None and torch.isfinite(x.grad).all()
print("xLSTMBlockStack ok", y.float().abs().mean().item())
'''

USAGE_LM_MODEL = '''\
# README "xLSTM Language Model": the yaml string through OmegaConf + dacite (vocab 50304 -> 512, context 256 -> 32,
# num_blocks 7 -> 3, batch 4 -> 2), then a next-token loss and a backward.
import torch
from omegaconf import OmegaConf
from dacite import from_dict
from dacite import Config as DaciteConfig
from xlstm import xLSTMLMModel, xLSTMLMModelConfig

torch.manual_seed(0)
xlstm_cfg = """
vocab_size: 512
mlstm_block:
  mlstm:
    conv1d_kernel_size: 4
    qkv_proj_blocksize: 4
    num_heads: 4
slstm_block:
  slstm:
    backend: cuda
    num_heads: 4
    conv1d_kernel_size: 4
    bias_init: powerlaw_blockdependent
  feedforward:
    proj_factor: 1.3
    act_fn: gelu
context_length: 32
num_blocks: 3
embedding_dim: 128
slstm_at: [1]
"""
cfg = OmegaConf.create(xlstm_cfg)
cfg = from_dict(data_class=xLSTMLMModelConfig, data=OmegaConf.to_container(cfg), config=DaciteConfig(strict=True))
xlstm_stack = xLSTMLMModel(cfg)

x = torch.randint(0, 512, size=(2, 32))
y = xlstm_stack(x)
assert y.shape[1:] == (32, 512), y.shape
loss = torch.nn.functional.cross_entropy(y[:, :-1].reshape(-1, 512).float(), x[:, 1:].reshape(-1))
loss.backward()
assert torch.isfinite(loss)
print("xLSTMLMModel ok", loss.item())
'''

USAGE_LARGE = '''\
# README "How to use the xLSTM Large 7B": the TFLA Triton kernel config (embedding 512 -> 128, blocks 6 -> 2,
# vocab 2048 -> 512, input (3, 256) -> (2, 64)); then, as notebooks/xlstm_large/demo.ipynb, a single step on the
# returned state, and xLSTMLarge.generate.
import torch
from xlstm.xlstm_large.model import xLSTMLargeConfig, xLSTMLarge

torch.manual_seed(0)
# configure the model with TFLA Triton kernels
xlstm_config = xLSTMLargeConfig(
    embedding_dim=128,
    num_heads=4,
    num_blocks=2,
    vocab_size=512,
    return_last_states=True,
    mode="inference",
    chunkwise_kernel="chunkwise--triton_xl_chunk", # xl_chunk == TFLA kernels
    sequence_kernel="native_sequence__triton",
    step_kernel="triton",
)
# instantiate the model
xlstm = xLSTMLarge(xlstm_config)
# create inputs
input = torch.randint(0, 512, (2, 64))
# run a forward pass
out = xlstm(input)
if len(out) == 2:
    out, state = out
assert out.shape[1:] == (64, 512), out.shape
assert len(state) == 2 and len(state[0]) == 3
step_out, step_state = xlstm(input[:, 0:1], state)
assert step_out.shape == (2, 1, 512), step_out.shape
tokens, _ = xlstm.generate(prefill_tokens=input[:, :8], max_length=8)
assert tokens.shape == (2, 8), tokens.shape
print("xLSTMLarge ok", out.float().abs().mean().item(), tokens[0].tolist())
'''

LOAD_PRETRAINED = '''\
# notebooks/xlstm_large/load_from_pretrained.ipynb on the recipe's tiny checkpoint (its `.to("cuda")` left out).
import torch
from xlstm.xlstm_large.model import xLSTMLargeConfig, xLSTMLarge
from xlstm.xlstm_large.from_pretrained import load_from_pretrained

CHECKPOINT_PATH = "_gauntlet/xlstm_large_checkpoint"
model = load_from_pretrained(checkpoint_path=CHECKPOINT_PATH)
model.config.return_last_states = True
input = torch.randint(0, 512, (2, 64))
out = model(input)
h, state = out
print(h.shape, len(state), type(state), len(state[0]), state[0][0].shape)
assert h.shape == (2, 64, 512)
print("load_from_pretrained ok", h.float().abs().mean().item())
'''

NO_SKIPS = '''\
# Fails unless the junit report ran at least one test and skipped, failed and errored none.
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
count = lambda key: sum(int(s.get(key, 0)) for s in suites)
tests, skipped, failures, errors = count("tests"), count("skipped"), count("failures"), count("errors")
print(f"junit: {tests} tests, {skipped} skipped, {failures} failed, {errors} errors")
sys.exit(0 if tests > 0 and not (skipped or failures or errors) else 1)
'''

# Tiny xLSTM Large checkpoint: the sizes of USAGE_LARGE; the kernels not named, so the config's defaults apply.
LARGE = {"embedding_dim": 128, "num_heads": 4, "num_blocks": 2, "vocab_size": 512}


def _large_state_dict(seed: int = 0) -> dict:
    """xLSTMLarge's state dict (weight_mode "single", no biases but the gates') for LARGE, by hand: prepare() does
    not import the tree."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def rand(*shape, std=0.02):
        return torch.randn(*shape, generator=g) * std

    d, heads, vocab = LARGE["embedding_dim"], LARGE["num_heads"], LARGE["vocab_size"]
    qk, v = int(d * 0.5), d
    up = int((((d * 2.6667) + 64 - 1) // 64) * 64)  # round_up_to_next_multiple_of(d * ffn_proj_factor, 64)
    sd = {"embedding.weight": rand(vocab, d)}
    for i in range(LARGE["num_blocks"]):
        p = f"backbone.blocks.{i}."
        sd[p + "norm_mlstm.weight"] = torch.ones(d)
        m = p + "mlstm_layer."
        sd[m + "q.weight"] = rand(qk, d)
        sd[m + "k.weight"] = rand(qk, d)
        sd[m + "v.weight"] = rand(v, d)
        sd[m + "ogate_preact.weight"] = rand(v, d)
        sd[m + "igate_preact.weight"] = rand(heads, d)
        sd[m + "igate_preact.bias"] = torch.full((heads,), -10.0)
        sd[m + "fgate_preact.weight"] = rand(heads, d)
        sd[m + "fgate_preact.bias"] = torch.linspace(3.0, 6.0, heads)
        sd[m + "multihead_norm.weight"] = torch.ones(v)
        sd[m + "out_proj.weight"] = rand(d, v)
        sd[p + "norm_ffn.weight"] = torch.ones(d)
        sd[p + "ffn.proj_up_gate.weight"] = rand(up, d)
        sd[p + "ffn.proj_up.weight"] = rand(up, d)
        sd[p + "ffn.proj_down.weight"] = rand(d, up)
    sd["backbone.out_norm.weight"] = torch.ones(d)
    sd["lm_head.weight"] = rand(vocab, d)
    return sd


def _parity_config(tree: Path, name: str) -> str:
    """The tree's experiments/NAME.yaml with its sizes shrunk; every other key (device, precision, model) kept."""
    import yaml

    cfg = yaml.safe_load((tree / "experiments" / f"{name}.yaml").read_text())
    training = cfg["training"]
    training.update({"batch_size": 8, "val_every_step": 2, "lr_warmup_steps": 1, "num_steps": 2})
    kwargs = cfg["dataset"]["kwargs"]
    kwargs.update({"context_length": 32, "max_sequence_length": 12})
    kwargs["count"] = {"train": 64, "validation": 8, "test": 8}
    for part in kwargs.get("subpar", {}).values():
        part.update({"min_sequence_length": 12, "max_sequence_length": 32})
    return f"# gauntlet: experiments/{name}.yaml, sizes shrunk\n" + yaml.safe_dump(cfg, sort_keys=False)


def prepare(tree: Path) -> None:
    import json

    from safetensors.torch import save_file

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    for name, text in (("usage_block_stack.py", USAGE_BLOCK_STACK), ("usage_lm_model.py", USAGE_LM_MODEL),
                       ("usage_large.py", USAGE_LARGE), ("load_pretrained.py", LOAD_PRETRAINED),
                       ("no_skips.py", NO_SKIPS)):
        (root / name).write_text(text)
    for name in ("parity_xlstm01", "parity_xlstm10", "parity_xlstm11"):
        (root / f"{name}.yaml").write_text(_parity_config(tree, name))
    checkpoint = root / "xlstm_large_checkpoint"
    checkpoint.mkdir(exist_ok=True)
    save_file(_large_state_dict(), str(checkpoint / "model.safetensors"))
    (checkpoint / "config.yaml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in LARGE.items()))


PYTEST = "python -m pytest -q -p no:cacheprovider -rs"
TESTS = [
    "tests/test_chunkwise_vs_recurrent.py::test_recurrent_vs_chunkwise_native",
    "tests/test_chunkwise_vs_recurrent.py::test_recurrent_vs_chunkwise_triton[native_sequence__triton-triton-chunkwise--triton_xl_chunk]",
    "tests/test_generation.py::test_generate_prefill[chunkwise--triton_xl_chunk-native_sequence__triton-triton-2-128-128]",
    "tests/test_generation.py::test_model_generate[2-128-128]",
    "tests/test_weight_conversion.py::test_single_weights_to_fused_weights[False]",
    "tests/test_slstm_cell_vanilla_vs_cuda.py::test_slstm_vanilla_vs_cuda[True]",
]

STEPS = [
    Step("usage-block-stack", f"python {G}/usage_block_stack.py", env=ENV, timeout=240),
    Step("usage-lm-model", f"python {G}/usage_lm_model.py", env=ENV, timeout=240),
    Step("usage-xlstm-large", f"python {G}/usage_large.py", env=ENV, timeout=240),
    Step("load-pretrained", f"python {G}/load_pretrained.py", env=ENV, timeout=240),
    # README "Experiments": the three parity runs (sLSTM only, mLSTM only, both), 2 steps each + one validation.
    Step("train-parity-xlstm01", f"python experiments/main.py --config {G}/parity_xlstm01.yaml", env=ENV, timeout=300),
    Step("train-parity-xlstm10", f"python experiments/main.py --config {G}/parity_xlstm10.yaml", env=ENV, timeout=300),
    Step("train-parity-xlstm11", f"python experiments/main.py --config {G}/parity_xlstm11.yaml", env=ENV, timeout=300),
    Step("tests", f"{PYTEST} --junitxml={G}/junit.xml " + " ".join(f"'{t}'" for t in TESTS)
                  + f"; python {G}/no_skips.py {G}/junit.xml", env=ENV, timeout=300),
]
