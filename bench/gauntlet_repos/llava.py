"""LLaVA's README commands: the two LLaVA-1.5 training stages (scripts/v1_5/pretrain.sh: feature alignment with
DeepSpeed ZeRO-2, only the mm_projector trained and saved; scripts/v1_5/finetune.sh: visual instruction tuning with
ZeRO-3 from that projector, then a resume from its own checkpoint), launched with torchrun instead of the deepspeed
launcher, and its inference commands: ``python -m llava.serve.cli`` (default --device) on the fine-tuned model,
``python -m llava.eval.run_llava`` (README Quick Start's eval_model) and ``python -m llava.eval.model_vqa`` (the GPT-
assisted evaluation's first step) on released weights written as on CUDA. Tiny random Vicuna, CLIP tower and LLaVA,
synthetic images and conversations."""

import json
from pathlib import Path

from _recipe import Step, fake_hub_model, rng, save_cuda_checkpoint, synthetic_text, tiny_llama

G = "_gauntlet"
HF = f"{G}/hf"
# Everything is local: fail fast instead of retrying the hub. The README pip-installs the tree (-e); the root on
# PYTHONPATH is the same for `torchrun llava/train/train_mem.py` (sys.path[0] is llava/train).
ENV = {"HF_HOME": HF, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true",
       "PYTHONPATH": "."}
VICUNA = "lmsys/vicuna-13b-v1.5"
CLIP = "openai/clip-vit-large-patch14-336"
RELEASED = "liuhaotian/llava-v1.5-7b"
PRETRAIN_OUT = f"{G}/checkpoints/llava-v1.5-13b-pretrain"
FINETUNE_OUT = f"{G}/checkpoints/llava-v1.5-13b"
SYSTEM = ("A chat between a curious human and an artificial intelligence assistant. "
          "The assistant gives helpful, detailed, and polite answers to the human's questions.")
PROMPTS = ["Render a clear and concise summary of the photo.", "What is in the image?",
           "Describe the image concisely.", "What are the colors in this picture?"]


def _image(path: Path, width: int, height: int, seed: int) -> None:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path)


def prepare(tree: Path) -> None:
    import torch
    import transformers

    tree = Path(tree)
    root = tree / G
    root.mkdir(parents=True, exist_ok=True)
    r = rng(0)
    captions = [" ".join(r.choice(synthetic_text(400).split()) for _ in range(8)) for _ in range(16)]

    # the tokenizer sees the conversation templates' words (system prompt, USER/ASSISTANT, separators)
    text = "\n".join([SYSTEM, "USER: ASSISTANT: ###Human: ###Assistant: </s>", *PROMPTS, *captions,
                      synthetic_text(2000), "0123456789?!:;,.'\"()-"]) + "\n"

    # the base LLM the scripts name (lmsys/vicuna-13b-v1.5): a tiny random Llama, pytorch_model.bin as a GPU box
    # writes it (storages tagged cuda:0)
    def save_vicuna(folder: Path) -> None:
        _, config = tiny_llama(folder, text)
        config.max_position_embeddings = 4096
        config.save_pretrained(folder)
        model = transformers.LlamaForCausalLM(config)
        save_cuda_checkpoint(model.state_dict(), folder / "pytorch_model.bin")

    fake_hub_model(root / "hf", VICUNA, save_vicuna)

    # the vision tower (openai/clip-vit-large-patch14-336): tiny CLIP ViT, 28 px images, 14 px patches
    def save_clip(folder: Path) -> None:
        config = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=4, image_size=28, patch_size=14,
                                               projection_dim=32)
        torch.manual_seed(0)
        transformers.CLIPVisionModel(config).save_pretrained(folder)
        transformers.CLIPImageProcessor(size={"shortest_edge": 28}, crop_size={"height": 28, "width": 28}
                                        ).save_pretrained(folder)

    fake_hub_model(root / "hf", CLIP, save_clip)

    # released LLaVA-1.5 weights (liuhaotian/llava-v1.5-7b): a llava_llama config naming the CLIP tower, Llama
    # weights plus the 2-layer mm_projector, float16, tagged cuda:0 as written on the authors' GPUs
    def save_released(folder: Path) -> None:
        tokenizer, config = tiny_llama(folder, text)
        config.max_position_embeddings = 4096
        model = transformers.LlamaForCausalLM(config).to(torch.float16)
        state = dict(model.state_dict())
        hidden, mm_hidden = config.hidden_size, 32
        state["model.mm_projector.0.weight"] = torch.randn(hidden, mm_hidden, dtype=torch.float16) * 0.02
        state["model.mm_projector.0.bias"] = torch.zeros(hidden, dtype=torch.float16)
        state["model.mm_projector.2.weight"] = torch.randn(hidden, hidden, dtype=torch.float16) * 0.02
        state["model.mm_projector.2.bias"] = torch.zeros(hidden, dtype=torch.float16)
        save_cuda_checkpoint(state, folder / "pytorch_model.bin")
        cfg = config.to_dict()
        cfg.update({
            "model_type": "llava_llama", "architectures": ["LlavaLlamaForCausalLM"], "torch_dtype": "float16",
            "mm_vision_tower": CLIP, "mm_hidden_size": mm_hidden, "mm_projector_type": "mlp2x_gelu",
            "mm_vision_select_layer": -2, "mm_vision_select_feature": "patch", "mm_patch_merge_type": "flat",
            "mm_use_im_start_end": False, "mm_use_im_patch_token": False, "image_aspect_ratio": "pad",
            "use_mm_proj": True, "tune_mm_mlp_adapter": False, "freeze_mm_mlp_adapter": False,
            "tokenizer_model_max_length": 2048, "tokenizer_padding_side": "right", "use_cache": True,
        })
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))

    fake_hub_model(root / "hf", RELEASED, save_released)

    # stage 1 data (blip_laion_cc_sbu_558k.json's shape): one <image> turn and a caption each, non-square images
    pre = root / "LLaVA-Pretrain"
    records = []
    for i in range(8):
        name = f"{i // 4:05d}/{i:09d}.jpg"
        _image(pre / "images" / name, 40 + 4 * i, 32, seed=i)
        records.append({"id": f"{i:09d}", "image": name, "conversations": [
            {"from": "human", "value": "<image>\n" + PROMPTS[i % len(PROMPTS)]},
            {"from": "gpt", "value": captions[i]}]})
    (pre / "blip_laion_cc_sbu_558k.json").write_text(json.dumps(records))

    # stage 2 data (llava_v1_5_mix665k.json's shape): multi-turn image conversations from coco/gqa folders, and
    # text-only (ShareGPT-like) ones, which --group_by_modality_length separates
    data = root / "data"
    records = []
    for i in range(8):
        folder = ("coco/train2017", "gqa/images")[i % 2]
        name = f"{folder}/{i:012d}.jpg"
        _image(data / name, 32, 40 + 4 * i, seed=100 + i)
        records.append({"id": f"{i:012d}", "image": name, "conversations": [
            {"from": "human", "value": PROMPTS[i % len(PROMPTS)] + "\n<image>"},
            {"from": "gpt", "value": captions[i]},
            {"from": "human", "value": PROMPTS[(i + 1) % len(PROMPTS)]},
            {"from": "gpt", "value": captions[(i + 5) % len(captions)]}]})
    for i in range(4):
        records.append({"id": f"text_{i}", "conversations": [
            {"from": "human", "value": captions[(i + 3) % len(captions)]},
            {"from": "gpt", "value": captions[(i + 7) % len(captions)]}]})
    (root / "llava_v1_5_mix665k.json").write_text(json.dumps(records))

    # model_vqa's images: the COCO val2014 names the repository's own qa90 questions use
    questions = [json.loads(line) for line in
                 (tree / "playground/data/coco2014_val_qa_eval/qa90_questions.jsonl").read_text().splitlines()
                 if line.strip()]
    for j, q in enumerate(questions[:4]):
        _image(root / "coco2014_val" / q["image"], 48, 36, seed=200 + j)


def train(stage: str, max_steps: int, save_steps: int) -> str:
    # scripts/v1_5/pretrain.sh and finetune.sh, flag for flag, sizes shrunk by their own flags (2 processes,
    # batch 2, a couple of steps, 1 dataloader worker, no wandb) and launched by torchrun with a random port.
    common = (
        "torchrun --nproc_per_node=2 --master_port=$((20000 + RANDOM % 20000)) llava/train/train_mem.py"
        f" --model_name_or_path {VICUNA}"
        f" --vision_tower {CLIP}"
        " --mm_projector_type mlp2x_gelu"
        " --mm_vision_select_layer -2"
        " --mm_use_im_start_end False"
        " --mm_use_im_patch_token False"
        " --bf16 True"
        " --num_train_epochs 1"
        f" --max_steps {max_steps}"
        " --per_device_train_batch_size 2"
        " --per_device_eval_batch_size 4"
        " --gradient_accumulation_steps 1"
        " --evaluation_strategy no"
        " --save_strategy steps"
        f" --save_steps {save_steps}"
        " --save_total_limit 1"
        " --weight_decay 0."
        " --warmup_ratio 0.03"
        " --lr_scheduler_type cosine"
        " --logging_steps 1"
        " --tf32 True"
        " --model_max_length 2048"
        " --gradient_checkpointing True"
        " --dataloader_num_workers 1"
        " --lazy_preprocess True"
        " --report_to none"
    )
    if stage == "pretrain":
        return (common + " --deepspeed ./scripts/zero2.json --version plain"
                f" --data_path {G}/LLaVA-Pretrain/blip_laion_cc_sbu_558k.json"
                f" --image_folder {G}/LLaVA-Pretrain/images"
                " --tune_mm_mlp_adapter True"
                " --learning_rate 1e-3"
                f" --output_dir {PRETRAIN_OUT}")
    return (common + " --deepspeed ./scripts/zero3.json --version v1"
            f" --data_path {G}/llava_v1_5_mix665k.json"
            f" --image_folder {G}/data"
            f" --pretrain_mm_mlp_adapter {PRETRAIN_OUT}/mm_projector.bin"
            " --image_aspect_ratio pad"
            " --group_by_modality_length True"
            " --learning_rate 2e-5"
            f" --output_dir {FINETUNE_OUT}")


IMAGE = "llava/serve/examples/waterview.jpg"

STEPS = [
    Step("pretrain-zero2", train("pretrain", 2, 24000), outputs=[f"{PRETRAIN_OUT}/mm_projector.bin",
                                                                 f"{PRETRAIN_OUT}/config.json"],
         timeout=300, env=ENV),
    Step("finetune-zero3", train("finetune", 2, 2), outputs=[f"{FINETUNE_OUT}/checkpoint-2/trainer_state.json",
                                                             f"{FINETUNE_OUT}/config.json"],
         timeout=300, env=ENV),
    # train.py resumes by itself (resume_from_checkpoint=True) when output_dir holds checkpoint-*. transformers 4.37
    # torch.load()s rng_state_N.pth (numpy arrays) with torch's weights_only default, which torch >= 2.6 refuses on
    # every device (not a CUDA matter): the older default for this step.
    # (save_steps stays 2: transformers 4.37 keeps the checkpoint's save_steps in the resumed TrainerState)
    Step("finetune-resume", train("finetune", 4, 2), outputs=[f"{FINETUNE_OUT}/checkpoint-4/trainer_state.json"],
         timeout=300, env={**ENV, "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}),
    # README "CLI Inference": python -m llava.serve.cli --model-path ... --image-file ... (no --device: its default);
    # one turn on stdin, then EOF ends the chat loop.
    Step("cli-finetuned", f"set -o pipefail; printf 'What is in the image?\\n' | python -m llava.serve.cli"
         f" --model-path {FINETUNE_OUT} --image-file {IMAGE} --max-new-tokens 16 | tee {G}/cli-finetuned.txt",
         outputs=[f"{G}/cli-finetuned.txt"], timeout=180, env=ENV),
    Step("cli-released", f"set -o pipefail; printf 'What is in the image?\\n' | python -m llava.serve.cli"
         f" --model-path {RELEASED} --image-file {IMAGE} --max-new-tokens 16 | tee {G}/cli-released.txt",
         outputs=[f"{G}/cli-released.txt"], timeout=180, env=ENV),
    # README Quick Start's eval_model, as its own __main__
    Step("run-llava", f"set -o pipefail; python -m llava.eval.run_llava --model-path {RELEASED}"
         f" --image-file {IMAGE} --query 'What are the things I should be cautious about when I visit here?'"
         f" --max_new_tokens 16 | tee {G}/run-llava.txt", outputs=[f"{G}/run-llava.txt"], timeout=180, env=ENV),
    # README "GPT-assisted Evaluation" step 1, on the repository's own question file, 2 of its 90 questions
    Step("model-vqa", f"python -m llava.eval.model_vqa --model-path {RELEASED}"
         " --question-file playground/data/coco2014_val_qa_eval/qa90_questions.jsonl"
         f" --image-folder {G}/coco2014_val --answers-file {G}/answer-file-our.jsonl"
         " --num-chunks 45 --chunk-idx 0 --temperature 0",
         outputs=[f"{G}/answer-file-our.jsonl"], timeout=240, env=ENV),
]
