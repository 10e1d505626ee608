"""mistral-inference's README commands, tiny, on model folders that prepare() writes as the README's downloads lay
them out (params.json, the weights, the tokenizer):

- ``demo``: ``mistral-demo $12B_DIR`` (the README's first command) on a tiny "Nemo": a dense GQA Transformer
  (2 layers, dim 64, 4 heads / 2 KV heads of 16) in bf16 ``consolidated.safetensors`` with a ``tekken.json`` (v3,
  byte-level vocabulary plus Tekken's special tokens), ``--max_tokens 8`` (the script's own flag; greedy by its
  default temperature 0), three batched prompts.
- ``chat``: ``mistral-chat $12B_DIR --instruct --max_tokens 1024 --temperature 0.35`` with ``--max_tokens 8``, two
  turns typed on stdin. The command only ends when ``input()`` meets the end of its input (EOFError), on CUDA too:
  the step checks that both answers were printed and that it ended there, and nowhere else.
- ``chat-multimodal``: ``mistral-chat $MISTRAL_SMALL_3_1_INSTRUCT --instruct --max_tokens 256`` (the README's image
  chat) on a tiny Pixtral-style model (vision encoder of 2 layers, patch 16, on a 32x32 PNG given as a local path,
  which the script accepts as well as a URL; tekken.json with a multimodal section), ``--max_tokens 8``; an empty
  prompt and no image ends the conversation (the script's own exit).
- ``demo-2proc``: ``torchrun --nproc-per-node 2 --no-python mistral-demo $M8x7B_DIR`` on a tiny "Mixtral 8x7B
  v0.1 Instruct" as its tar has it: a MoE (4 experts, 2 a token) with ``consolidated.00.pth`` written as on a GPU
  box (every storage tagged cuda:0) and a SentencePiece
  ``tokenizer.model.v1`` (mistral-common 1.5.4 parses a bare ``tokenizer.model`` as version "" and refuses it); two
  pipeline ranks of one layer each.

``mistral-demo`` and ``mistral-chat`` are the console scripts pip writes from pyproject.toml's
[tool.poetry.scripts]; prepare() writes the same two scripts under _gauntlet/bin (the tree's src/ is on PYTHONPATH
in place of ``poetry install``).
"""

import json
from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text, train_sentencepiece, write_images

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}/src"}

SCRIPT = """#!/usr/bin/env python
import re
import sys

from mistral_inference.main import {fn}

if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit({fn}())
"""

PATTERN = r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
NUM_SPECIAL = 100
VOCAB = 256 + NUM_SPECIAL


def _tekken(path: Path, multimodal: bool) -> None:
    """A tekken.json as Mistral ships it (v3), with the 256 byte tokens as the whole BPE vocabulary."""
    import base64

    data = {
        "config": {"pattern": PATTERN, "num_vocab_tokens": 256, "default_vocab_size": VOCAB,
                   "default_num_special_tokens": NUM_SPECIAL, "version": "v3"},
        "vocab": [{"rank": i, "token_bytes": base64.b64encode(bytes([i])).decode(), "token_str": None}
                  for i in range(256)],
        "version": 1,
        "type": "Tekken",
    }
    if multimodal:
        data["multimodal"] = {"image_patch_size": 16, "max_image_size": 32, "spatial_merge_size": 1}
    path.write_text(json.dumps(data))


def _xformers_names_for_import() -> None:
    """Where xformers does not import (a Mac; porter verify hides it), prepare() still builds the weights from the
    tree's own classes: the names its modules import from xformers, as placeholders (no attention runs here)."""
    import sys
    import types

    try:
        import xformers.ops.fmha.attn_bias  # noqa: F401
        return
    except ImportError:
        pass
    names = ("AttentionBias", "BlockDiagonalCausalMask", "BlockDiagonalCausalWithOffsetPaddedKeysMask",
             "BlockDiagonalMask")
    for module in ("xformers", "xformers.ops", "xformers.ops.fmha", "xformers.ops.fmha.attn_bias"):
        stub = types.ModuleType(module)
        stub.__dict__.update({n: type(n, (), {}) for n in names}, memory_efficient_attention=None)
        sys.modules[module] = stub


def _weights(params: dict, seed: int):
    """Random weights with the layout the Transformer loads (built on the CPU from the tree's own class)."""
    import torch

    _xformers_names_for_import()
    from mistral_inference.args import TransformerArgs
    from mistral_inference.transformer import Transformer

    torch.manual_seed(seed)
    model = Transformer(TransformerArgs.from_dict(dict(params)))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
    return {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}


def prepare(tree: Path) -> None:
    import sys

    import safetensors.torch

    sys.path.insert(0, str(Path(tree) / "src"))
    root = Path(tree) / G
    (root / "bin").mkdir(parents=True, exist_ok=True)
    for name, fn in (("mistral-demo", "mistral_demo"), ("mistral-chat", "mistral_chat")):
        script = root / "bin" / name
        script.write_text(SCRIPT.format(fn=fn))
        script.chmod(0o755)

    dense = {"dim": 64, "n_layers": 2, "head_dim": 16, "hidden_dim": 128, "n_heads": 4, "n_kv_heads": 2,
             "norm_eps": 1e-5, "vocab_size": VOCAB, "rope_theta": 1000000.0}

    nemo = root / "nemo"  # Mistral Nemo's layout: params.json, consolidated.safetensors, tekken.json
    nemo.mkdir(parents=True, exist_ok=True)
    (nemo / "params.json").write_text(json.dumps(dense, indent=2))
    _tekken(nemo / "tekken.json", multimodal=False)
    safetensors.torch.save_file(_weights(dense, 0), str(nemo / "consolidated.safetensors"))

    pixtral = root / "pixtral"  # Pixtral / Mistral Small 3.1: the same plus a vision encoder
    pixtral.mkdir(parents=True, exist_ok=True)
    vision = {"hidden_size": 32, "num_channels": 3, "image_size": 32, "patch_size": 16, "intermediate_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 2, "rope_theta": 10000.0, "image_token_id": 10}
    params = {**dense, "vision_encoder": vision}
    (pixtral / "params.json").write_text(json.dumps(params, indent=2))
    _tekken(pixtral / "tekken.json", multimodal=True)
    safetensors.torch.save_file(_weights(params, 1), str(pixtral / "consolidated.safetensors"))
    write_images(root / "images", 1, size=32, classes=("",), class_folders=False)

    mixtral = root / "mixtral"  # Mixtral-8x7B-v0.1-Instruct.tar: params.json, consolidated.00.pth, tokenizer.model.v1
    mixtral.mkdir(parents=True, exist_ok=True)
    spm = train_sentencepiece(synthetic_text(words=3000), root / "spm" / "tok", vocab_size=96)
    (mixtral / "tokenizer.model.v1").write_bytes(spm.read_bytes())
    moe = {**dense, "vocab_size": 96, "moe": {"num_experts": 4, "num_experts_per_tok": 2}}
    (mixtral / "params.json").write_text(json.dumps(moe, indent=2))
    save_cuda_checkpoint(_weights(moe, 2), mixtral / "consolidated.00.pth")
    (root / "out").mkdir(exist_ok=True)


DEMO = f"{G}/bin/mistral-demo"
CHAT = f"{G}/bin/mistral-chat"


def _chat_check(log: str, answers: int) -> str:
    """The chat ran ``answers`` turns and then stopped where input() met the end of its input (its only exit)."""
    return (f'cat {log}; test "$(grep -c "^=====================$" {log})" = {answers} '
            f'&& tail -n 1 {log} | grep -q "^EOFError"')


STEPS = [
    Step("demo", f"{DEMO} {G}/nemo --max_tokens 8", timeout=240, env=ENV),
    Step("chat",
         f"printf 'Hello there\\nTell me more\\n' | {CHAT} {G}/nemo --instruct --max_tokens 8 --temperature 0.35 "
         f"> {G}/out/chat.log 2>&1; " + _chat_check(f"{G}/out/chat.log", 2),
         outputs=[f"{G}/out/chat.log"], timeout=240, env=ENV),
    Step("chat-multimodal",
         f"printf 'Which park is this?\\n{G}/images/img_0000.png\\n\\n\\n\\n' | "
         f"{CHAT} {G}/pixtral --instruct --max_tokens 8 > {G}/out/chat-mm.log 2>&1; rc=$?; cat {G}/out/chat-mm.log; "
         f'test $rc = 0 && test "$(grep -c "^=====================$" {G}/out/chat-mm.log)" = 1',
         outputs=[f"{G}/out/chat-mm.log"], timeout=240, env=ENV),
    Step("demo-2proc", f"torchrun --nproc-per-node 2 --no-python {DEMO} {G}/mixtral --max_tokens 8",
         timeout=300, env=ENV),
]
