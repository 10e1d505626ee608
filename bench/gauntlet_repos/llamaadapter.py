"""OpenGVLab/LLaMA-Adapter: the README's V1 commands and the V2 multimodal ones, tiny.

- ``v1-inference``: ``torchrun --nproc_per_node 1 example.py --ckpt_dir $TARGET_FOLDER/model_size --tokenizer_path
  $TARGET_FOLDER/tokenizer.model --adapter_path $ADAPTER_PATH`` (README "Inference", generate.sh) on a tiny LLaMA in
  Meta's layout (consolidated.00.pth + params.json, 2 layers of dim 64) and a released-style adapter file
  ({adapter_query.weight, layers.N.attention.gate}), both written as on a GPU box, --max_seq_len 128 (the longest of
  example.py's 9 prompts, 89 pieces, fits; max_gen_len is fixed at 512 inside). fairscale model-parallel layers, nccl.
- ``v1-finetune``: ``cd alpaca_finetuning_v1; torchrun --nproc_per_node 8 finetuning.py --model Llama7B_adapter
  ...`` (README "Training") with 1 process (torchrun still sets RANK/WORLD_SIZE: init_distributed_mode, nccl, DDP),
  1 epoch on 1 Alpaca-style record, batch 1, --max_seq_len 48 (the prompt is 36 pieces, 48 with the answer), --adapter_layer 1
  --adapter_len 2. Its model hard-codes the 7B width (``reshape(-1, adapter_len, 4096)`` in
  alpaca_finetuning_v1/llama/model.py), so this LLaMA has dim 4096 and a single layer (~200M fp16 parameters); one
  process only because the model is fp16 (cuda.HalfTensor default, explicit .half() in forward) and fp16 matmul
  backward on a CPU is ~100x slower than forward (one iteration ~170 s on the loaded 2-core box).
- ``v2-pretrain``: llama_adapter_v2_multimodal7b/exps/pretrain.sh's command (``python -u -m torch.distributed.launch
  --nproc_per_node=8 --use_env main_pretrain.py ...``) with 1 process, 1 epoch, --split_epoch 1, batch 2, on a csv
  of 2 synthetic image-caption pairs.
- ``v2-finetune-2proc``: exps/finetune.sh's command with 2 processes (DDP), 1 epoch, batch 1, on one LLaVA-style
  (image) and one Alpaca-style (text only) record, from a pre-trained checkpoint written as on CUDA (save_model's
  layout). --max_words 96 (64 in the first-contact run of round 18): data/dataset.py builds the text record's prompt
  with the input template (``format_instruction = data_item['instruction'],`` is a tuple; input "" is not None),
  65 pieces; at 64 that rank's labels were all masked, its loss became ``output.mean() * 0`` in autocast's dtype
  while the other rank's cross-entropy is fp32, and util/misc.py's all_reduce_mean then reduced 2 bytes against
  4 (a Gloo abort here; on CUDA the same mismatch under NCCL). Not a device matter: the recipe's data.
- ``v2-inference``: the multimodal README's "Inference" snippet (``llama.load(name, llama_dir, llama_type="7B",
  device=device)``, ``model.generate(img, [prompt])``) on a local BIAS-7B-style adapter file written as on CUDA
  (load() takes a file path for its name), ``max_gen_len=8``.

The V2 multimodal model asserts a 32000-piece vocabulary in training, so its tokenizer is a SentencePiece model
trained on synthetic text with filler user-defined pieces up to 32000; its LLaMA is dim 64, 2 layers.

Not CUDA matters, handled the same on the original and the port (``_gauntlet/site/sitecustomize.py``):
- clip.load("ViT-L/14") downloads OpenAI's weights: the stand-in maps the name to a tiny random CLIP (ViT, 224 px,
  patch 32, width 64, one layer) that prepare() writes as a traced archive (clip.load takes a path).
- llama_adapter_v2_multimodal7b/util/misc.py does ``from torch._six import inf`` (removed in torch 2.0): a
  torch._six module with ``inf``.
- example.py passes ``quantizer=`` to ModelArgs, which has no such field at this commit (TypeError on every
  machine): for that step only (GAUNTLET_QUANTIZER_ARG=1) llama.model.ModelArgs accepts and keeps it.
- TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1: save_model's checkpoints hold the argparse Namespace.
"""

from pathlib import Path

from _recipe import Step, save_cuda_checkpoint, synthetic_text, train_sentencepiece

G = "_gauntlet"
SITE = f"{G}/site"
ENV = {"PYTHONPATH": "{tree}/" + SITE, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "OMP_NUM_THREADS": "1",
       "GAUNTLET_CLIP": "{tree}/" + G + "/clip/ViT-tiny.pt"}

SITECUSTOMIZE = r'''
"""Not CUDA (see bench/gauntlet_repos/llamaadapter.py): a tiny CLIP for clip.load's download, torch._six,
and example.py's quantizer argument."""
import importlib.abc
import importlib.util
import math
import os
import sys
import types

_six = types.ModuleType("torch._six")
_six.inf = math.inf
_six.string_classes = (str, bytes)
sys.modules.setdefault("torch._six", _six)


def _patch_clip(module):
    original = module.load

    def load(name, *args, **kwargs):
        if name in module.available_models() and os.environ.get("GAUNTLET_CLIP"):
            name = os.environ["GAUNTLET_CLIP"]
        return original(name, *args, **kwargs)

    module.load = load


def _patch_modelargs(module):
    cls = getattr(module, "ModelArgs", None)
    if cls is None or not os.environ.get("GAUNTLET_QUANTIZER_ARG"):
        return
    original = cls.__init__

    def __init__(self, *args, quantizer=False, **kwargs):
        original(self, *args, **kwargs)
        self.quantizer = quantizer

    cls.__init__ = __init__


_PATCHES = {"clip": _patch_clip, "llama.model": _patch_modelargs}


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _Finder())
'''

# V1 (example.py, alpaca_finetuning_v1): a small-vocabulary tokenizer
V1_VOCAB = 800
V2_VOCAB = 32000  # llama_adapter.py: assert self.llama.vocab_size == 32000


def _ffn_hidden(dim: int, multiple_of: int) -> int:
    hidden = int(2 * (4 * dim) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _llama(params: dict, vocab: int, generator, dtype, bias: bool = False) -> dict:
    """A Meta-layout LLaMA state dict (consolidated.00.pth), random, in ``dtype``."""
    import torch

    dim, n_layers, n_heads = params["dim"], params["n_layers"], params["n_heads"]
    hidden = _ffn_hidden(dim, params["multiple_of"])

    def rand(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(dtype)

    sd = {"tok_embeddings.weight": rand(vocab, dim), "norm.weight": torch.ones(dim, dtype=dtype),
          "output.weight": rand(vocab, dim), "rope.freqs": torch.ones(dim // n_heads // 2, dtype=dtype)}
    for i in range(n_layers):
        p = f"layers.{i}."
        for w in ("wq", "wk", "wv", "wo"):
            sd[p + f"attention.{w}.weight"] = rand(dim, dim)
        sd[p + "feed_forward.w1.weight"] = rand(hidden, dim)
        sd[p + "feed_forward.w3.weight"] = rand(hidden, dim)
        sd[p + "feed_forward.w2.weight"] = rand(dim, hidden)
        sd[p + "attention_norm.weight"] = torch.ones(dim, dtype=dtype)
        sd[p + "ffn_norm.weight"] = torch.ones(dim, dtype=dtype)
    return sd


def _tokenizer_32000(text: str, prefix: Path) -> None:
    """A 32000-piece SentencePiece model: BPE pieces from ``text`` plus filler user-defined pieces."""
    import sentencepiece as spm

    prefix.parent.mkdir(parents=True, exist_ok=True)
    filler = [f"<x{i}>" for i in range(V2_VOCAB - 600)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text.splitlines()), model_prefix=str(prefix), vocab_size=V2_VOCAB,
        model_type="bpe", character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        user_defined_symbols=filler, hard_vocab_limit=False, minloglevel=2,
    )
    processor = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
    assert processor.vocab_size() == V2_VOCAB, processor.vocab_size()


def _tiny_clip(path: Path) -> None:
    """A random CLIP, traced, that clip's build_model reads as a ViT (224 px, patch 32, width 64)."""
    import torch
    from clip.model import CLIP

    torch.manual_seed(0)
    model = CLIP(embed_dim=32, image_resolution=224, vision_layers=1, vision_width=64, vision_patch_size=32,
                 context_length=77, vocab_size=49408, transformer_width=64, transformer_heads=1, transformer_layers=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a traced archive, as OpenAI's files are (clip.load reads a plain state dict from the handle its
    # torch.jit.load attempt already consumed, and fails)
    model.eval()
    traced = torch.jit.trace(model, (torch.zeros(1, 3, 224, 224), torch.zeros(1, 77, dtype=torch.long)),
                             check_trace=False)
    torch.jit.save(traced, str(path))


def _v2_adapter_weights(params: dict, generator, names: str) -> dict:
    """The LLaMA_adapter parameters outside the LLaMA (as the repo builds them: timm Blocks of width 768,
    CLIP projection from the stand-in's 32, query_len 10, query_layer 31) plus, for the BIAS release, the
    LLaMA's bias/norm/gate entries."""
    import torch
    from timm.models.vision_transformer import Block

    dim, n_layers, n_heads = params["dim"], params["n_layers"], params["n_heads"]
    hidden = _ffn_hidden(dim, params["multiple_of"])
    torch.manual_seed(0)
    sd = {}
    for i in range(8):
        block = Block(768, 16, 4.0, qkv_bias=True)
        sd.update({f"visual_blocks.{i}.{k}": v for k, v in block.state_dict().items()})
    linear = torch.nn.Linear(32, 768)
    sd["clip_proj.weight"], sd["clip_proj.bias"] = linear.weight.data, linear.bias.data
    linear = torch.nn.Linear(768, dim)
    sd["visual_proj.weight"], sd["visual_proj.bias"] = linear.weight.data, linear.bias.data
    for name, width in (("clip_proj_norm", 768), ("visual_proj_norm", dim)):
        sd[f"{name}.weight"], sd[f"{name}.bias"] = torch.ones(width), torch.zeros(width)
    sd["visual_query.weight"] = torch.randn(10, 768, generator=generator) * 0.02
    sd["adapter_query.weight"] = torch.randn(10 * 31, dim, generator=generator) * 0.02
    for i in range(n_layers):
        p = f"llama.layers.{i}."
        sd[p + "attention.gate"] = torch.full((1, n_heads, 1, 1), 0.1)
        if names == "BIAS":
            for key, width in (("attention.wq.bias", dim), ("attention.wo.bias", dim), ("feed_forward.w1.bias", hidden),
                               ("feed_forward.w2.bias", dim), ("feed_forward.w3.bias", hidden)):
                sd[p + key] = torch.zeros(width)
            sd[p + "attention_norm.weight"] = torch.ones(dim)
            sd[p + "ffn_norm.weight"] = torch.ones(dim)
    if names == "BIAS":
        sd["llama.norm.weight"] = torch.ones(dim)
    return {k: v.clone().contiguous() for k, v in sd.items()}


def prepare(tree: Path) -> None:
    import argparse
    import json

    import numpy as np
    import torch
    from PIL import Image

    tree = Path(tree).resolve()
    g = tree / G
    (g / "site").mkdir(parents=True, exist_ok=True)
    (g / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)

    # text: English-like filler plus the repo's own prompt templates (read as text), so prompts are few pieces
    # (ten times over: the Alpaca template then takes ~36 pieces, and fp16 backward on a CPU is slow per token)
    text = synthetic_text(words=6000)
    text += (tree / "example.py").read_text(encoding="utf-8") * 10
    text += (tree / "llama_adapter_v2_multimodal7b" / "llama" / "utils.py").read_text(encoding="utf-8") * 10

    generator = torch.Generator().manual_seed(0)

    # ---- V1: example.py (fairscale LLaMA, any width) -------------------------------------------------------
    v1 = g / "llama-v1"
    train_sentencepiece(text, v1 / "tokenizer", vocab_size=V1_VOCAB)
    small = {"dim": 64, "n_layers": 2, "n_heads": 4, "multiple_of": 32, "norm_eps": 1e-6, "vocab_size": -1}
    (v1 / "tiny").mkdir(parents=True, exist_ok=True)
    (v1 / "tiny" / "params.json").write_text(json.dumps(small))
    save_cuda_checkpoint(_llama(small, V1_VOCAB, generator, torch.float16), v1 / "tiny" / "consolidated.00.pth")
    # a released-style adapter (llama_adapter_len10_layer30_release.pth): adapter_len 10 (ModelArgs' default), 1 layer
    adapter = {"adapter_query.weight": (torch.randn(10 * 1, 64, generator=generator) * 0.02).half(),
               "layers.1.attention.gate": torch.full((1, 4, 1, 1), 0.1).half()}
    save_cuda_checkpoint(adapter, g / "adapter" / "llama_adapter_len10_layer1_release.pth")

    # ---- V1: alpaca_finetuning_v1 (the 7B width is hard-coded: dim 4096, one layer) ----------------------------
    wide = {"dim": 4096, "n_layers": 1, "n_heads": 32, "multiple_of": 256, "norm_eps": 1e-6, "vocab_size": -1}
    (v1 / "7B").mkdir(parents=True, exist_ok=True)
    (v1 / "7B" / "params.json").write_text(json.dumps(wide))
    save_cuda_checkpoint(_llama(wide, V1_VOCAB, generator, torch.float16), v1 / "7B" / "consolidated.00.pth")
    alpaca = [
        {"instruction": "Tell me about the model.", "input": "",
         "output": "The model learns a small function of its inputs."},
    ]  # one record: one fp16 training iteration on a CPU takes ~2.5 minutes here
    (g / "data").mkdir(parents=True, exist_ok=True)
    (g / "data" / "alpaca_data.json").write_text(json.dumps(alpaca))

    # ---- V2 multimodal: LLaMA dir (7B/ + tokenizer.model), CLIP stand-in, data, checkpoints -------------------
    v2 = g / "llama-v2"
    _tokenizer_32000(text, v2 / "tokenizer")
    mm = {"dim": 64, "n_layers": 2, "n_heads": 4, "multiple_of": 32, "norm_eps": 1e-6, "vocab_size": -1}
    (v2 / "7B").mkdir(parents=True, exist_ok=True)
    (v2 / "7B" / "params.json").write_text(json.dumps(mm))
    save_cuda_checkpoint(_llama(mm, V2_VOCAB, generator, torch.float16), v2 / "7B" / "consolidated.00.pth")
    _tiny_clip(g / "clip" / "ViT-tiny.pt")

    images = g / "data" / "images"
    images.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(3):
        path = images / f"img_{i}.png"
        Image.fromarray(rng.integers(0, 256, size=(96, 128, 3), dtype=np.uint8)).save(path)
        paths.append(str(path))
    (g / "data" / "pretrain.csv").write_text(
        "url\tcaption\n" + f"{paths[0]}\tthe model learns a small function\n"
        + f"{paths[1]}\tdata flows through layers of attention\n")
    (g / "data" / "pretrain.yaml").write_text(f"META:\n  - '{g / 'data' / 'pretrain.csv'}'\n")
    finetune = [
        {"image": paths[2], "conversations": [{"from": "human", "value": "What is in the image?"},
                                              {"from": "gpt", "value": "Layers of attention and weights."}]},
        {"instruction": "Tell me about the model.", "input": "",
         "output": "The model learns a small function of its inputs."},
    ]
    (g / "data" / "finetune.json").write_text(json.dumps(finetune))
    (g / "data" / "finetune.yaml").write_text(f"META:\n  - '{g / 'data' / 'finetune.json'}'\n")

    # a pre-trained checkpoint as main_pretrain.py's misc.save_model writes it on a GPU box
    pretrained = {"model": _v2_adapter_weights(mm, generator, "PRETRAIN"), "epoch": 0,
                  "args": argparse.Namespace(llama_type="7B", max_words=96, batch_size=4)}
    save_cuda_checkpoint(pretrained, g / "ckpts" / "pretrain-checkpoint-0.pth")
    # a released BIAS-7B adapter (util/extract_adapter_from_checkpoint.py's layout)
    bias = {"model": _v2_adapter_weights(mm, generator, "BIAS"),
            "config": {"w_bias": True, "w_lora": False, "lora_rank": 16}}
    save_cuda_checkpoint(bias, g / "ckpts" / "BIAS-7B.pth")


V2_INFERENCE = f"""
import cv2
import llama
import torch
from PIL import Image

device = "cuda" if torch.cuda.is_available() else "cpu"

llama_dir = "../{G}/llama-v2/"

model, preprocess = llama.load("../{G}/ckpts/BIAS-7B.pth", llama_dir, llama_type="7B", device=device)
model.eval()

prompt = llama.format_prompt("Please introduce this painting.")
img = Image.fromarray(cv2.imread("../{G}/data/images/img_0.png"))
img = preprocess(img).unsqueeze(0).to(device)

result = model.generate(img, [prompt], max_gen_len=8)[0]

print(result)
open("../{G}/out/v2-inference.txt", "w").write(repr(result))
"""

_V1_FT = ("--model Llama7B_adapter --llama_model_path ../{G}/llama-v1/ --data_path ../{G}/data/alpaca_data.json "
          "--adapter_layer 1 --adapter_len 2 --max_seq_len 48 --batch_size 1 --epochs 1 --warmup_epochs 1 "
          "--blr 9e-3 --weight_decay 0.02 --num_workers 1").format(G=G)
_V2 = "cd llama_adapter_v2_multimodal7b && python -u -m torch.distributed.launch --nproc_per_node=1 --use_env"

STEPS = [
    Step("v1-inference",
         f"torchrun --nproc_per_node 1 --master_port 29731 example.py --ckpt_dir {G}/llama-v1/tiny "
         f"--tokenizer_path {G}/llama-v1/tokenizer.model "
         f"--adapter_path {G}/adapter/llama_adapter_len10_layer1_release.pth --max_seq_len 128 "
         f"> {G}/v1-inference.log 2>&1; status=$?; cat {G}/v1-inference.log; "
         f"test $status -eq 0 && grep -qx '==================================' {G}/v1-inference.log",
         timeout=300, env={**ENV, "GAUNTLET_QUANTIZER_ARG": "1"}),
    Step("v1-finetune",
         f"cd alpaca_finetuning_v1 && torchrun --nproc_per_node 1 --master_port 29732 finetuning.py {_V1_FT} "
         f"--output_dir ../{G}/out/v1-finetune --log_dir ../{G}/out/v1-finetune",
         outputs=[f"{G}/out/v1-finetune/checkpoint-0.pth", f"{G}/out/v1-finetune/log.txt"], timeout=600, env=ENV),
    Step("v2-pretrain",
         f"{_V2} --master_port=29733 main_pretrain.py --data_config ../{G}/data/pretrain.yaml --batch_size 2 "
         f"--epochs 1 --split_epoch 1 --warmup_epochs 1 --blr 1.0e-4 --weight_decay 0.05 --max_words 64 "
         f"--num_workers 1 --llama_path ../{G}/llama-v2 --output_dir ../{G}/out/v2-pretrain "
         f"--log_dir ../{G}/out/v2-pretrain",
         outputs=[f"{G}/out/v2-pretrain/checkpoint-0.pth", f"{G}/out/v2-pretrain/log.txt"], timeout=600, env=ENV),
    Step("v2-finetune-2proc",
         f"{_V2.replace('nproc_per_node=1', 'nproc_per_node=2')} --master_port=29734 main_finetune.py --data_config ../{G}/data/finetune.yaml --batch_size 1 "
         f"--epochs 1 --warmup_epochs 1 --blr 10e-4 --weight_decay 0.02 --max_words 96 --num_workers 1 "
         f"--llama_path ../{G}/llama-v2 --output_dir ../{G}/out/v2-finetune --log_dir ../{G}/out/v2-finetune "
         f"--pretrained_path ../{G}/ckpts/pretrain-checkpoint-0.pth",
         outputs=[f"{G}/out/v2-finetune/checkpoint-0.pth", f"{G}/out/v2-finetune/log.txt"], timeout=600, env=ENV),
    Step("v2-inference",
         f"mkdir -p {G}/out && cd llama_adapter_v2_multimodal7b && python - <<'EOF'\n{V2_INFERENCE}\nEOF",
         outputs=[f"{G}/out/v2-inference.txt"], timeout=300, env=ENV),
]
