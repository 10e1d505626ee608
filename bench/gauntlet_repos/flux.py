"""FLUX (black-forest-labs/flux): the README's Fire CLIs ``python -m flux t2i`` (FLUX.1 [schnell], docs/text-to-image.md;
it picks "cuda" only when available, a control) and ``python -m flux kontext`` (FLUX.1 Kontext [dev], the README's and
docs/image-editing.md's single-generation command, without --track_usage, which calls the BFL API), on tiny random
models, each scaled down by the CLI's own flags (--height/--width, --num_steps, --seed, --output_dir).

Weights come from the Hugging Face hub, which is out of reach: prepare() writes tiny random models where the
repository looks for them. The flow transformer and the autoencoder are safetensors files named by the variables
util.get_checkpoint_path reads (FLUX_MODEL, FLUX_AE); T5 (google/t5-v1_1-xxl), CLIP (openai/clip-vit-large-patch14),
the NSFW classifier (Falconsai/nsfw_image_detection) and Kontext's Pixtral content filter
(mistral-community/pixtral-12b) are laid out in an offline Hugging Face cache (HF_HOME, HF_HUB_OFFLINE=1).

The model sizes are module constants (util.configs: 12B-parameter FluxParams, the 128-channel autoencoder), with no
flag to shrink them: a ``sitecustomize`` on the steps' PYTHONPATH rewrites those dataclasses right after flux.util is
imported (same in_channels/out_channels/guidance_embed per model, hidden 64, one block of each kind, a 32-channel
autoencoder), and quarters Kontext's ~1 megapixel working resolutions (PREFERED_KONTEXT_RESOLUTIONS, also a
constant): a 1 MP bf16-autocast decode takes over 15 minutes on a loaded CPU. It selects nothing about the device. ``python -m flux`` runs from src/ (PYTHONPATH) instead of the
README's ``pip install -e``.

The random content filter is made to answer "no" (its final norm is zero, so "yes" and "no" tie and greedy decoding
takes the lower id, "no"), and the NSFW classifier's bias favours "normal": otherwise a random model could flag the
prompt and write no image, on every device.
"""
from pathlib import Path

from _recipe import Step

G = "_gauntlet"
SITE = f"{G}/site"

# What the sitecustomize puts into every flux.util.configs entry (the rest of each FluxParams / AutoEncoderParams is
# kept). T5 d_model 32 -> context_in_dim, CLIP hidden 32 -> vec_in_dim; hidden 64 / 2 heads -> rope dim 32 = 8+12+12.
TEXT_DIM = 32
FLUX_TINY = {"hidden_size": 64, "num_heads": 2, "depth": 1, "depth_single_blocks": 1, "axes_dim": [8, 12, 12],
             "context_in_dim": TEXT_DIM, "vec_in_dim": TEXT_DIM}
AE_TINY = {"ch": 32, "ch_mult": [1, 1, 1, 1], "num_res_blocks": 1}

SITECUSTOMIZE = f'''\
"""The gauntlet's: shrink flux.util.configs (12B FluxParams, 128-channel autoencoder) to tiny ones after import."""
import dataclasses
import importlib.machinery
import sys

_FLUX = {FLUX_TINY!r}
_AE = {AE_TINY!r}


def _shrink(module):
    # Kontext's ~1 megapixel working resolutions, a quarter of the side each (256 px for a square image)
    module.PREFERED_KONTEXT_RESOLUTIONS[:] = [(w // 4, h // 4) for w, h in module.PREFERED_KONTEXT_RESOLUTIONS]
    for spec in module.configs.values():
        spec.params = dataclasses.replace(spec.params, **_FLUX)
        spec.ae_params = dataclasses.replace(spec.ae_params, **_AE)


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name != "flux.util":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_shrink(module):
            exec_module(module)
            _shrink(module)

        spec.loader.exec_module = exec_and_shrink
        return spec


sys.meta_path.insert(0, _Finder())
'''

# (in_channels, out_channels, guidance_embed) as util.configs has them
MODELS = {"schnell": (64, 64, False), "kontext": (64, 64, True)}

ENV = {"PYTHONPATH": f"src:{SITE}", "HF_HOME": "{tree}/_gauntlet/hf", "HF_HUB_OFFLINE": "1",
       "TRANSFORMERS_OFFLINE": "1", "FLUX_AE": "{tree}/_gauntlet/ckpt/ae.safetensors"}


def _env(model: str) -> dict:
    return {**ENV, "FLUX_MODEL": "{tree}/_gauntlet/ckpt/flux-" + model + ".safetensors"}


PIXTRAL_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}[INST]"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for chunk in message['content'] %}{% if chunk['type'] == 'text' %}{{ chunk['content'] }} "
    "{% elif chunk['type'] == 'image' %}[IMG]{% endif %}{% endfor %}{% endif %}[/INST]{% endfor %}"
)


def _fake_hub(home: Path) -> None:
    import json

    import sentencepiece as spm
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers.models.clip.tokenization_clip import bytes_to_unicode

    from _recipe import fake_hub_model, synthetic_text

    torch.manual_seed(0)
    text = synthetic_text(3000)

    # T5 v1.1 encoder: SentencePiece with T5's ids (pad 0, eos 1, unk 2), slow T5Tokenizer, 1-layer encoder
    def t5(folder: Path) -> None:
        prefix = folder.parent.parent / "spm-t5" / "spiece"
        prefix.parent.mkdir(parents=True, exist_ok=True)
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text.splitlines()), model_prefix=str(prefix), vocab_size=64, model_type="unigram",
            character_coverage=1.0, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
        tokenizer = transformers.T5Tokenizer(vocab_file=str(prefix) + ".model")
        tokenizer.save_pretrained(folder)
        config = transformers.T5Config(vocab_size=len(tokenizer), d_model=TEXT_DIM, d_kv=16, d_ff=64, num_layers=1,
                                       num_heads=2, feed_forward_proj="gated-gelu", is_encoder_decoder=False,
                                       tie_word_embeddings=False)
        transformers.T5EncoderModel(config).save_pretrained(folder)

    # CLIP text encoder: a character-level byte BPE vocabulary (no merges) for the slow CLIPTokenizer
    def clip(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        chars = list(bytes_to_unicode().values())
        vocab = {}
        for c in chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]:
            vocab.setdefault(c, len(vocab))
        (folder / "vocab.json").write_text(json.dumps(vocab))
        (folder / "merges.txt").write_text("#version: 0.2\n")
        tokenizer = transformers.CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"))
        tokenizer.save_pretrained(folder)
        config = transformers.CLIPTextConfig(
            vocab_size=len(vocab), hidden_size=TEXT_DIM, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, max_position_embeddings=77, bos_token_id=vocab["<|startoftext|>"],
            eos_token_id=vocab["<|endoftext|>"], pad_token_id=vocab["<|endoftext|>"], projection_dim=TEXT_DIM)
        transformers.CLIPTextModel(config).save_pretrained(folder)

    # NSFW classifier: a tiny ViT with the two labels the CLIs read, biased towards "normal"
    def nsfw(folder: Path) -> None:
        config = transformers.ViTConfig(image_size=32, patch_size=16, hidden_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, intermediate_size=64,
                                        id2label={0: "normal", 1: "nsfw"}, label2id={"normal": 0, "nsfw": 1})
        model = transformers.ViTForImageClassification(config)
        with torch.no_grad():
            model.classifier.bias.copy_(torch.tensor([6.0, -6.0]))
        model.save_pretrained(folder)
        transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)

    # Pixtral content filter: Llava(Pixtral vision, Mistral text) + PixtralProcessor with a word-level tokenizer
    def pixtral(folder: Path) -> None:
        special = ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
        words = ["no", "yes"] + sorted(set(text.replace(".", " ").lower().split()))  # "no" < "yes": ties say no
        vocab = {w: i for i, w in enumerate(special + words)}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                                    unk_token="<unk>", pad_token="<pad>",
                                                    model_input_names=["input_ids", "attention_mask"])
        fast.add_special_tokens({"additional_special_tokens": special[4:]})
        image_processor = transformers.PixtralImageProcessor(size={"longest_edge": 64},
                                                             patch_size={"height": 16, "width": 16})
        processor = transformers.PixtralProcessor(
            image_processor=image_processor, tokenizer=fast, patch_size=16, chat_template=PIXTRAL_TEMPLATE,
            image_token="[IMG]", image_break_token="[IMG_BREAK]", image_end_token="[IMG_END]")
        processor.save_pretrained(folder)
        config = transformers.LlavaConfig(
            vision_config=transformers.PixtralVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                                           num_attention_heads=2, image_size=64, patch_size=16,
                                                           head_dim=16),
            text_config=transformers.MistralConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                                                   num_hidden_layers=1, num_attention_heads=2,
                                                   num_key_value_heads=1, head_dim=16, bos_token_id=1,
                                                   eos_token_id=2, pad_token_id=3),
            image_token_index=vocab["[IMG]"], vision_feature_select_strategy="full", vision_feature_layer=-1,
            projector_hidden_act="gelu")
        model = transformers.LlavaForConditionalGeneration(config)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith("language_model.norm.weight"):
                    param.zero_()  # every logit 0: the yes/no tie goes to the lower id, "no"
        model.save_pretrained(folder)

    fake_hub_model(home, "google/t5-v1_1-xxl", t5)
    fake_hub_model(home, "openai/clip-vit-large-patch14", clip)
    fake_hub_model(home, "Falconsai/nsfw_image_detection", nsfw)
    fake_hub_model(home, "mistral-community/pixtral-12b", pixtral)


def prepare(tree: Path) -> None:
    import sys

    import numpy as np
    from PIL import Image

    work = tree / G
    (tree / SITE).mkdir(parents=True, exist_ok=True)
    (tree / SITE / "sitecustomize.py").write_text(SITECUSTOMIZE)

    # 256 px: the invisible watermark save_image embeds refuses images under 256x256
    rng = np.random.default_rng(0)
    images = work / "images"
    images.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, size=(256, 256, 3), dtype=np.uint8)).save(images / "cond.png")
    mask = np.zeros((256, 256), dtype=np.uint8)
    mask[64:192, 64:192] = 255
    Image.fromarray(mask).save(images / "mask.png")

    _fake_hub(work / "hf")

    # the flow transformers and the autoencoder, from the repository's own classes with the tiny sizes above;
    # bf16 like the released flux1-*.safetensors, the autoencoder in fp32 like ae.safetensors. In a child process:
    # this recipe module is itself imported as "flux".
    import json
    import subprocess

    (work / "ckpt").mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-c", WRITE_CHECKPOINTS, json.dumps(
        {"models": MODELS, "flux": FLUX_TINY, "ae": AE_TINY, "out": str((work / "ckpt").resolve())})],
        cwd=tree / "src", check=True)


WRITE_CHECKPOINTS = """\
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from flux.model import Flux, FluxParams
from flux.modules.autoencoder import AutoEncoder, AutoEncoderParams

spec = json.loads(sys.argv[1])
out = Path(spec["out"])
for model, (cin, cout, guidance) in spec["models"].items():
    torch.manual_seed(0)
    params = FluxParams(in_channels=cin, out_channels=cout, mlp_ratio=4.0, theta=10_000, qkv_bias=True,
                        guidance_embed=guidance, **spec["flux"])
    net = Flux(params).to(torch.bfloat16)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(out / f"flux-{model}.safetensors"))
torch.manual_seed(0)
ae = AutoEncoder(AutoEncoderParams(resolution=256, in_channels=3, out_ch=3, z_channels=16, scale_factor=0.3611,
                                   shift_factor=0.1159, **spec["ae"]))
save_file({k: v.contiguous() for k, v in ae.state_dict().items()}, str(out / "ae.safetensors"))
"""


PROMPT = "a photo of a forest with mist swirling around the tree trunks"

STEPS = [
    # docs/text-to-image.md: python -m flux t2i --name <name> --height <height> --width <width> --prompt "<prompt>"
    Step("t2i", f'python -m flux t2i --name flux-schnell --height 256 --width 256 --prompt "{PROMPT}" '
                f"--num_steps 2 --seed 0 --output_dir {G}/out/t2i",
         outputs=[f"{G}/out/t2i/img_0.jpg"], timeout=600, env=_env("schnell")),
    # README / docs/image-editing.md: python -m flux kontext --prompt "replace the logo with the text 'Black Forest
    # Labs'" (without --track_usage: the BFL API). Default --output_dir: the CLI writes output/noise.sft regardless.
    # Kontext resizes the conditioning image to one of its ~1 megapixel resolutions (no flag changes that; the
    # sitecustomize quarters them: a 256 px square, the smallest image the watermark accepts).
    Step("kontext", "python -m flux kontext --prompt \"replace the logo with the text 'Black Forest Labs'\" "
                    f"--img_cond_path {G}/images/cond.png --num_steps 1 --seed 0",
         outputs=["output/img_0.jpg"], timeout=900, env=_env("kontext")),
]
