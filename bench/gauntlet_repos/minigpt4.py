"""Vision-CAIR/MiniGPT-4 (MiniGPT-4 and MiniGPT-v2): the README's commands, tiny.

- ``train-stage1``: MiniGPT4_Train.md's first stage, ``torchrun --nproc-per-node NUM_GPU train.py --cfg-path
  train_configs/minigpt4_stage1_pretrain.yaml``, with 2 processes, on synthetic LAION and CC/SBU webdataset shards
  (jpg + json caption pairs, the layout dataset/README_1_STAGE.md's img2dataset writes). The config as written
  (``device: "cuda"``, ``distributed: True``, ``amp: True``, the Vicuna-0 model: frozen fp16 EVA-ViT-g and Q-Former,
  frozen fp16 LLaMA, trained ``llama_proj``), shrunk by the repository's own ``--options`` override flag: the data
  paths and the LLM path the docs tell the user to set, batch size 2, 2 iterations of 1 epoch, no dataloader workers,
  wandb off (its login needs the network on any device).
- ``train-stage2``: the second stage (``train_configs/minigpt4_stage2_finetune.yaml``) on a synthetic cc_sbu_align
  folder (image/*.jpg + filter_cap.json, dataset/README_2_STAGE.md's layout), from stage 1's checkpoint
  (``model.ckpt``, as MiniGPT4_Train.md asks), 2 processes.
- ``train-stage2-resume``: the same with the config's own ``run.resume_ckpt_path`` on stage 2's checkpoint and
  ``max_epoch`` 2 (the runner reloads model, optimizer, scaler and epoch).
- ``demo-minigpt4``, ``demo-minigpt4-llama2``, ``demo-v2``: the README's three demo commands (``python demo.py
  --cfg-path eval_configs/minigpt4_eval.yaml --gpu-id 0``, the same with minigpt4_llama2_eval.yaml, ``python
  demo_v2.py --cfg-path eval_configs/minigptv2_eval.yaml --gpu-id 0``), ``low_resource`` left at the configs'
  default (True: the LLM in 8 bit), the checkpoint and LLM paths set with ``--options`` (the README tells the user
  to set them in the configs), on released-style checkpoints written as on a GPU box (``save_cuda_checkpoint``).
  The demos only wrap the ``Chat`` class in gradio: ``_gauntlet/tiny.py`` executes the demo file's own top-level
  code (model, processor, ``Chat``, the gradio callbacks) without the gradio UI block and ``demo.launch``, then
  calls the callbacks the UI wires, in order, on a synthetic image (v1: ``upload_img``, ``gradio_ask``,
  ``gradio_answer``; v2: ``gradio_ask``, ``gradio_stream_answer``, ``gradio_visualize``). ``gradio`` itself is a stub
  module there (its ``gr.update`` only).

The EVA-ViT-g the repository builds has no size flag (``create_eva_vit_g``: width 1408, 39 blocks, 1B parameters,
hard-coded), so ``_gauntlet/tiny.py`` shrinks the repository's own ``VisionTransformer`` class to width 32, 2 blocks
and 4 heads (keeping patch 14, the image sizes of the configs, and every other argument as create_eva_vit_g passes
it), then runs the script as ``__main__`` with its own command line (``sys.argv[0]`` stays the wrapper, so torchrun
starts it for both processes). The Q-Former's ``BertConfig.from_pretrained("bert-base-uncased")`` finds a tiny BERT
config in a local Hugging Face cache (HF_HOME, offline); the EVA and BLIP-2 Q-Former weights the code downloads from
LAVIS's bucket (``eva_vit_g.pth``, ``blip2_pretrained_flant5xxl.pth``) lie in timm's cache under TORCH_HOME, where
``download_cached_file`` looks first; the LLM (Vicuna / Llama-2-chat) is a tiny random Llama with a SentencePiece
tokenizer in a local folder. Nothing picks a device: no step passes anything but ``--gpu-id 0`` (the README's).
"""

import json
from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint, synthetic_text, tiny_llama, fake_hub_model

G = "_gauntlet"
LLM = f"{G}/vicuna"
ENV = {"HF_HOME": "{tree}/" + G + "/hf", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TORCH_HOME": "{tree}/" + G + "/torch", "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
TINY_VIT = dict(embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0)
BERT = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64)

TINY = r'''
"""gauntlet: MiniGPT-4 at toy size (see bench/gauntlet_repos/minigpt4.py).

python _gauntlet/tiny.py SCRIPT ARGS    (train.py: run as __main__; demo*.py: the demo's code without its gradio UI,
                                         then its callbacks driven in order)
python _gauntlet/tiny.py --weights DIR  (random EVA and Q-Former weights, by the repository's own classes)
"""
import ast
import os
import runpy
import sys
import threading
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY_VIT = %(tiny_vit)s


def shrink():
    import minigpt4.models.eva_vit as eva

    base = eva.VisionTransformer
    if getattr(base, "_gauntlet_tiny", False):
        return

    class VisionTransformer(base):
        _gauntlet_tiny = True

        def __init__(self, *args, **kwargs):
            kwargs.update(TINY_VIT)
            super().__init__(*args, **kwargs)

    eva.VisionTransformer = VisionTransformer


def weights(out):
    from functools import partial

    import torch
    import torch.nn as nn
    import minigpt4.models.eva_vit as eva
    from minigpt4.models.base_model import LayerNorm
    from minigpt4.models.minigpt4 import MiniGPT4

    torch.manual_seed(0)
    vit = eva.VisionTransformer(img_size=224, patch_size=14, use_mean_pooling=False, qkv_bias=True,
                                norm_layer=partial(nn.LayerNorm, eps=1e-6))
    torch.save(vit.state_dict(), os.path.join(out, "eva_vit_g.pth"))
    qformer, query_tokens = MiniGPT4.init_Qformer(32, vit.num_features, False)
    state = {"Qformer." + k: v for k, v in qformer.state_dict().items()}
    state["query_tokens"] = query_tokens.data
    state.update({"ln_vision." + k: v for k, v in LayerNorm(vit.num_features).state_dict().items()})
    torch.save({"model": state}, os.path.join(out, "blip2_pretrained_flant5xxl.pth"))


def _stub_gradio():
    gr = types.ModuleType("gradio")
    gr.update = lambda **kwargs: kwargs
    sys.modules["gradio"] = gr


def _uses_gradio(node):
    """`gr.*`, or the Blocks the UI block binds (`demo.launch(...)`)"""
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in ("gr", "demo")
               for n in ast.walk(node))


def demo(path):
    """The demo's top-level code but the gradio UI (statements that use `gr.` outside a function), as __main__."""
    _stub_gradio()
    tree = ast.parse(path.read_text(), filename=str(path))
    tree.body = [node for node in tree.body
                 if isinstance(node, (ast.FunctionDef, ast.Import, ast.ImportFrom)) or not _uses_gradio(node)]
    main = types.ModuleType("__main__")
    main.__file__ = str(path)
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    exec(compile(tree, str(path), "exec"), main.__dict__)
    return main.__dict__


def drive(ns, script):
    from PIL import Image

    image = Image.open(os.environ["GAUNTLET_IMAGE"]).convert("RGB")
    out = Path(os.environ["GAUNTLET_OUT"])
    if script == "demo.py":
        # the UI: upload_button.click(upload_img), text_input.submit(gradio_ask).then(gradio_answer)
        _, _, _, chat_state, img_list = ns["upload_img"](image, "", None)
        _, chatbot, chat_state = ns["gradio_ask"]("Describe this image in detail.", [], chat_state)
        chatbot, chat_state, img_list = ns["gradio_answer"](chatbot, chat_state, img_list, 1, 1.0)
        _, chatbot, chat_state = ns["gradio_ask"]("What is in the image?", chatbot, chat_state)
        chatbot, chat_state, img_list = ns["gradio_answer"](chatbot, chat_state, img_list, 1, 1.0)
    else:
        # demo_v2's UI: send.click(gradio_ask).success(gradio_stream_answer).success(gradio_visualize)
        def hook(args):  # the streamer's generate thread failing would leave the consumer waiting forever
            sys.__excepthook__(args.exc_type, args.exc_value, args.exc_traceback)
            sys.stderr.flush()
            os._exit(1)

        threading.excepthook = hook
        chatbot, chat_state, img_list = [], None, []
        for question in ("[grounding] describe this image in detail", "[vqa] What is in the image?"):
            _, chatbot, chat_state, img_list, _, _ = ns["gradio_ask"](question, chatbot, chat_state, image,
                                                                       img_list, 1 if not img_list else 0, 0)
            for chatbot, chat_state in ns["gradio_stream_answer"](chatbot, chat_state, img_list, 0.6):
                pass
            chatbot = ns["gradio_visualize"](chatbot, image)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(repr(turn) for turn in chatbot) + "\n")
    print("gauntlet: chat written to", out)


def main():
    sys.path[0] = str(ROOT)  # as `python SCRIPT` from the root puts the root first
    if sys.argv[1] == "--weights":
        shrink()
        weights(sys.argv[2])
        return
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    shrink()
    path = ROOT / script
    if path.name.startswith("demo"):
        drive(demo(path), path.name)
    else:
        runpy.run_path(str(path), run_name="__main__")


main()
''' % {"tiny_vit": repr(TINY_VIT)}

SYSTEM_V0 = ("Give the following image: <Img>ImageContent</Img>. You will be able to see the image once I provide it "
             "to you. Please answer my questions.")


def _jpg(path: Path, seed: int, size: int = 48) -> None:
    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, format="JPEG")


def _shard(path: Path, first: int, count: int, captions: list) -> None:
    import io
    import tarfile

    import numpy as np
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for i in range(first, first + count):
            buf = io.BytesIO()
            pixels = np.random.default_rng(i).integers(0, 256, size=(40, 40, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(buf, format="JPEG")
            for suffix, data in ((".jpg", buf.getvalue()),
                                 (".json", json.dumps({"caption": captions[i % len(captions)]}).encode())):
                info = tarfile.TarInfo(f"{i:09d}{suffix}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def prepare(tree: Path) -> None:
    import os
    import subprocess
    import sys

    import torch
    import transformers

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    (root / "tiny.py").write_text(TINY)
    r = rng(0)
    words = synthetic_text(400).split()
    captions = [" ".join(r.choice(words) for _ in range(8)) for _ in range(16)]

    # the LLM (Vicuna v0 / Llama-2-chat): a tiny random Llama, its SentencePiece tokenizer trained on the prompts'
    # words; pytorch_model.bin as a GPU box writes it
    prompts = (tree / "prompts" / "alignment.txt").read_text()
    text = "\n".join([SYSTEM_V0, "###Human: ###Assistant: [INST] [/INST] <s> </s> <Img></Img>", prompts,
                      *captions, synthetic_text(2000), "[grounding] [vqa] {<>} 0123456789?!:;,.'\"()-"]) + "\n"
    _, config = tiny_llama(root / "vicuna", text)
    config.max_position_embeddings = 4096
    config.save_pretrained(root / "vicuna")
    save_cuda_checkpoint(transformers.LlamaForCausalLM(config).state_dict(), root / "vicuna" / "pytorch_model.bin")

    # the Q-Former's BertConfig.from_pretrained("bert-base-uncased"): a tiny BERT config in a local HF cache
    fake_hub_model(root / "hf", "bert-base-uncased",
                   lambda folder: transformers.BertConfig(**BERT).save_pretrained(folder))

    # EVA-ViT-g and BLIP-2 Q-Former weights where timm's download_cached_file finds them (TORCH_HOME/hub/checkpoints),
    # made by the tree's own (shrunk) classes in a child process, then written as on a GPU box
    hub = root / "torch" / "hub" / "checkpoints"
    hub.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HOME=str(root / "hf"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, str(root / "tiny.py"), "--weights", str(hub)], cwd=tree, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    for name in ("eva_vit_g.pth", "blip2_pretrained_flant5xxl.pth"):
        save_cuda_checkpoint(torch.load(hub / name, map_location="cpu"), hub / name)

    # released MiniGPT-4 / MiniGPT-v2 checkpoints (only the trained llama_proj, as the released ones hold),
    # written as on a GPU box: Vicuna (Q-Former 32 -> LLM 32), Llama-2 and v2 (4 ViT tokens of 32 -> LLM 32)
    torch.manual_seed(0)
    hidden = config.hidden_size
    for name, width in (("pretrained_minigpt4.pth", 32), ("pretrained_minigpt4_llama2.pth", 4 * TINY_VIT["embed_dim"]),
                        ("minigptv2_checkpoint.pth", 4 * TINY_VIT["embed_dim"])):
        save_cuda_checkpoint({"model": {"llama_proj.weight": torch.randn(hidden, width) * 0.02,
                                        "llama_proj.bias": torch.zeros(hidden)}}, root / "ckpt" / name)

    # stage 1 data: LAION and CC/SBU webdataset shards, 2 of 4 pairs each
    for name, base in (("laion", 0), ("cc_sbu", 100)):
        for shard in range(2):
            _shard(root / "data" / name / f"{shard:05d}.tar", base + 4 * shard, 4, captions)
    # stage 2 data: cc_sbu_align (image/ID.jpg and filter_cap.json)
    align = root / "data" / "cc_sbu_align"
    anns = []
    for i in range(8):
        _jpg(align / "image" / f"{i + 2}.jpg", seed=200 + i)
        anns.append({"image_id": str(i + 2), "caption": captions[(i + 3) % len(captions)]})
    (align / "filter_cap.json").write_text(json.dumps({"annotations": anns}))
    _jpg(root / "demo.jpg", seed=300, size=64)


def _options(*extra: str) -> str:
    return " ".join(["--options", f"model.llama_model={LLM}", *extra])


def train(config: str, *extra: str) -> str:
    run = ["run.iters_per_epoch=2", "run.max_epoch=1", "run.warmup_steps=1", "run.num_workers=0",
           "run.wandb_log=False"]
    return (f"torchrun --nproc-per-node 2 --master_port=$((20000 + RANDOM % 20000)) {G}/tiny.py train.py "
            f"--cfg-path {config} " + _options(*run, *extra))


STAGE1 = "minigpt4/output/minigpt4_stage1_pretrain"
STAGE2 = "minigpt4/output/minigpt4_stage2_finetune"
SHARDS = "/{00000..00001}.tar"
ALIGN = f"datasets.cc_sbu_align.build_info.storage={G}/data/cc_sbu_align datasets.cc_sbu_align.batch_size=2"
STAGE1_CKPT = f"model.ckpt=$(ls {STAGE1}/*/checkpoint_0.pth | head -1)"


def chat(script: str, config: str, ckpt: str, out: str) -> Step:
    command = (f"python {G}/tiny.py {script} --cfg-path {config} --gpu-id 0 "
               + _options(f"model.ckpt={G}/ckpt/{ckpt}"))
    env = {**ENV, "GAUNTLET_IMAGE": "{tree}/" + G + "/demo.jpg", "GAUNTLET_OUT": "{tree}/" + G + "/" + out}
    return Step(out.split("/")[-1].removesuffix(".txt"), command, outputs=[f"{G}/{out}"], env=env, timeout=420)


STEPS = [
    Step("train-stage1", train("train_configs/minigpt4_stage1_pretrain.yaml",
                               f"'datasets.laion.build_info.storage={G}/data/laion{SHARDS}'",
                               f"'datasets.cc_sbu.build_info.storage={G}/data/cc_sbu{SHARDS}'",
                               "datasets.laion.batch_size=2", "datasets.cc_sbu.batch_size=2"),
         outputs=[f"{STAGE1}/*/checkpoint_0.pth", f"{STAGE1}/*/log.txt"], env=ENV, timeout=600),
    Step("train-stage2", train("train_configs/minigpt4_stage2_finetune.yaml", ALIGN, STAGE1_CKPT),
         outputs=[f"{STAGE2}/*/checkpoint_0.pth"], env=ENV, timeout=600),
    Step("train-stage2-resume", train("train_configs/minigpt4_stage2_finetune.yaml", ALIGN, STAGE1_CKPT,
                                      f"run.resume_ckpt_path=$(ls {STAGE2}/*/checkpoint_0.pth | head -1)")
         .replace("run.max_epoch=1", "run.max_epoch=2"),
         outputs=[f"{STAGE2}/*/checkpoint_1.pth"], env=ENV, timeout=600),
    chat("demo.py", "eval_configs/minigpt4_eval.yaml", "pretrained_minigpt4.pth", "chat/demo-minigpt4.txt"),
    chat("demo.py", "eval_configs/minigpt4_llama2_eval.yaml", "pretrained_minigpt4_llama2.pth",
         "chat/demo-minigpt4-llama2.txt"),
    chat("demo_v2.py", "eval_configs/minigptv2_eval.yaml", "minigptv2_checkpoint.pth", "chat/demo-v2.txt"),
]
