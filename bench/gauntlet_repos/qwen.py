"""Qwen's own commands, tiny, with its own flags:

- ``finetune-ds``: the README's full-parameter fine-tuning command, ``bash finetune/finetune_ds.sh -m MODEL -d DATA``
  as written: ``torchrun --nproc_per_node $GPUS_PER_NODE`` (``GPUS_PER_NODE=$(python -c 'import torch;
  print(torch.cuda.device_count())')``: two processes on a 2-GPU box) ``finetune.py --bf16 True
  --gradient_checkpointing True --deepspeed finetune/ds_config_zero3.json`` (5 epochs, model_max_length 512), on a
  synthetic conversation file of 4 examples: with 16 gradient-accumulation steps that is one optimizer step an epoch.
  The script's output_dir is ``output_qwen`` (``safe_save_model_for_hf_trainer``: the ZeRO-3 consolidated state dict, model.safetensors).
- ``finetune-lora``: the README's single-GPU LoRA command, ``bash finetune/finetune_lora_single_gpu.sh -m MODEL -d
  DATA`` as written (``python finetune.py --bf16 True --use_lora --gradient_checkpointing``, the same data), into
  ``output_qwen`` too (the adapter; run after finetune-ds, whose files it leaves beside it).
- ``cli``: the README's ``python cli_demo.py`` with ``-c`` pointing at the chat checkpoint (its own flag), two
  questions typed on stdin, then ``:q`` (``model.chat_stream``; ``device_map="auto"``).
- ``eval-gsm8k``: eval/EVALUATION.md's ``python eval/evaluate_chat_gsm8k.py`` with ``-c`` and ``-f`` (its own flags:
  a GSM8K-shaped DatasetDict saved by ``save_to_disk``, 2 questions) and ``-o`` (``model.chat``, greedy).

Not run: the Q-LoRA scripts (a GPTQ Int4 checkpoint: auto-gptq / optimum, CUDA kernels), finetune_lora_ds.sh (the same
launcher as finetune_ds.sh, ZeRO-2), run_gptq.py (auto-gptq), web_demo.py (gradio), openai_api.py (a server),
the other eval/ scripts (datasets the README downloads; evaluate_plugin.py needs transformers agents), dcu-support/
and recipes/ (other stacks, notebooks).

The model is test scaffolding, not ported code: Qwen(1)'s modelling and tokenizer code is remote code on the Hugging
Face Hub (unreachable here), and no copy of it is on PyPI or in the repository. ``prepare`` writes a tiny random
model of a class transformers ships, ``GPT2LMHeadModel`` (Qwen(1)'s module names are GPT-2's: ``transformer.wte``,
``transformer.h.N.attn.c_attn`` / ``c_proj``, ``transformer.ln_f``, ``lm_head``; finetune.py's LoRA targets
``c_attn``/``c_proj`` and modules_to_save ``wte``/``lm_head`` find them), wrapped in a thin remote-code subclass
(``QWenLMHeadModel``) that adds the Hub model's ``chat`` / ``chat_stream`` (ChatML prompts) and its automatic
precision choice (bf16/fp16 on CUDA, fp32 otherwise), and a tiktoken tokenizer like the Hub's ``QWenTokenizer``
(byte-level ranks only, the ChatML special tokens, ``im_start_id`` / ``im_end_id`` / ``eod_id``). The weights are
written as on a GPU box (storages tagged cuda:0, ``pytorch_model.bin``), which ``from_pretrained`` maps to the CPU.
"""

import base64
import json
from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint

G = "_gauntlet"

ENV = {
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_DISABLED": "true",
    "TERM": "dumb",
    "TORCH_EXTENSIONS_DIR": "{tree}/_gauntlet/torch_extensions",
}

CONFIGURATION = '''\
from transformers import GPT2Config


class QWenConfig(GPT2Config):
    """Gauntlet scaffolding: GPT-2's config under Qwen's name, with the Hub config's precision switches."""
    model_type = "qwen"

    def __init__(self, bf16=False, fp16=False, fp32=False, use_flash_attn="auto", **kwargs):
        self.bf16 = bf16
        self.fp16 = fp16
        self.fp32 = fp32
        self.use_flash_attn = use_flash_attn
        super().__init__(**kwargs)
'''

MODELING = '''\
"""Gauntlet scaffolding for the Hub's modeling_qwen.py: GPT-2 (same module names) plus Qwen's chat interface."""
import torch
from transformers import GPT2LMHeadModel

from .configuration_qwen import QWenConfig


def make_context(tokenizer, query, history=None, system="You are a helpful assistant."):
    """ChatML, as the Hub's qwen_generation_utils.make_context builds it."""
    text = f"<|im_start|>system\\n{system}<|im_end|>"
    for turn_query, turn_response in history or []:
        text += f"\\n<|im_start|>user\\n{turn_query}<|im_end|>\\n<|im_start|>assistant\\n{turn_response}<|im_end|>"
    text += f"\\n<|im_start|>user\\n{query}<|im_end|>\\n<|im_start|>assistant\\n"
    return text, tokenizer.encode(text)


class QWenLMHeadModel(GPT2LMHeadModel):
    config_class = QWenConfig

    def __init__(self, config):
        # the Hub model's automatic precision: bf16 (or fp16) on a CUDA GPU, fp32 otherwise
        if not (config.bf16 or config.fp16 or config.fp32):
            if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
                config.bf16 = True
            elif torch.cuda.is_available():
                config.fp16 = True
            else:
                config.fp32 = True
        super().__init__(config)
        if config.bf16:
            self.bfloat16()
        elif config.fp16:
            self.half()

    def chat(self, tokenizer, query, history=None, system="You are a helpful assistant.", generation_config=None,
             **kwargs):
        generation_config = generation_config if generation_config is not None else self.generation_config
        history = list(history or [])
        _, context = make_context(tokenizer, query, history, system)
        input_ids = torch.tensor([context]).to(self.device)
        outputs = self.generate(input_ids, generation_config=generation_config,
                                eos_token_id=[tokenizer.im_end_id, tokenizer.im_start_id],
                                pad_token_id=tokenizer.eod_id, **kwargs)
        response = tokenizer.decode(outputs[0][len(context):], skip_special_tokens=True)
        history.append((query, response))
        return response, history

    @torch.no_grad()
    def chat_stream(self, tokenizer, query, history=None, system="You are a helpful assistant.",
                    generation_config=None, **kwargs):
        generation_config = generation_config if generation_config is not None else self.generation_config
        _, context = make_context(tokenizer, query, history, system)
        input_ids = torch.tensor([context]).to(self.device)
        stop = {tokenizer.im_end_id, tokenizer.im_start_id, tokenizer.eod_id}
        past, generated = None, []
        for _ in range(generation_config.max_new_tokens or 16):
            out = self(input_ids=input_ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            if generation_config.do_sample:
                probs = torch.softmax(logits / max(generation_config.temperature or 1.0, 1e-5), dim=-1)
                token = torch.multinomial(probs, num_samples=1)
            else:
                token = logits.argmax(dim=-1, keepdim=True)
            if int(token[0, 0]) in stop:
                break
            generated.append(int(token[0, 0]))
            input_ids = token
            yield tokenizer.decode(generated, skip_special_tokens=True)
'''

TOKENIZATION = '''\
"""Gauntlet scaffolding for the Hub's tokenization_qwen.py: a tiktoken BPE (byte-level ranks only) + ChatML specials."""
import base64
import os
import unicodedata

import tiktoken
from transformers import AddedToken, PreTrainedTokenizer

PAT_STR = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"""
ENDOFTEXT = "<|endoftext|>"
IMSTART = "<|im_start|>"
IMEND = "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IMSTART, IMEND) + tuple(f"<|extra_{i}|>" for i in range(5))


def _load_tiktoken_bpe(path):
    with open(path, "rb") as handle:
        lines = handle.read().splitlines()
    return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}


class QWenTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "qwen.tiktoken"}

    def __init__(self, vocab_file, errors="replace", **kwargs):
        self.errors = errors
        self.mergeable_ranks = _load_tiktoken_bpe(vocab_file)
        self.special_tokens = {token: index for index, token in enumerate(SPECIAL_TOKENS, start=len(self.mergeable_ranks))}
        self.tokenizer = tiktoken.Encoding("Qwen", pat_str=PAT_STR, mergeable_ranks=self.mergeable_ranks,
                                           special_tokens=self.special_tokens)
        self.decoder = {v: k for k, v in self.mergeable_ranks.items()}
        self.decoder.update({v: k for k, v in self.special_tokens.items()})
        self.eod_id = self.tokenizer.eot_token
        self.im_start_id = self.special_tokens[IMSTART]
        self.im_end_id = self.special_tokens[IMEND]
        super().__init__(**kwargs)

    def __len__(self):
        return self.tokenizer.n_vocab

    def get_vocab(self):
        return self.mergeable_ranks

    def convert_tokens_to_ids(self, tokens):
        if isinstance(tokens, (str, bytes)):
            return self.special_tokens[tokens] if tokens in self.special_tokens else self.mergeable_ranks.get(tokens)
        return [self.special_tokens[t] if t in self.special_tokens else self.mergeable_ranks.get(t) for t in tokens]

    def _add_tokens(self, new_tokens, special_tokens=False):
        if not special_tokens and new_tokens:
            raise ValueError("Adding regular tokens is not supported")
        for token in new_tokens:
            surface = token.content if isinstance(token, AddedToken) else token
            if surface not in SPECIAL_TOKENS:
                raise ValueError("Adding unknown special tokens is not supported")
        return 0

    def save_vocabulary(self, save_directory, **kwargs):
        path = os.path.join(save_directory, "qwen.tiktoken")
        with open(path, "w", encoding="utf8") as out:
            for token, rank in self.mergeable_ranks.items():
                out.write(base64.b64encode(token).decode("utf8") + " " + str(rank) + "\\n")
        return (path,)

    def tokenize(self, text, allowed_special="all", disallowed_special=(), **kwargs):
        text = unicodedata.normalize("NFC", text)
        return [self.decoder[t] for t in self.tokenizer.encode(text, allowed_special=allowed_special,
                                                               disallowed_special=disallowed_special)]

    def convert_tokens_to_string(self, tokens):
        text, temp = "", b""
        for token in tokens:
            if isinstance(token, str):
                if temp:
                    text += temp.decode("utf-8", errors=self.errors)
                    temp = b""
                text += token
            else:
                temp += token
        if temp:
            text += temp.decode("utf-8", errors=self.errors)
        return text

    @property
    def vocab_size(self):
        return self.tokenizer.n_vocab

    def _convert_id_to_token(self, index):
        if index in self.decoder:
            return self.decoder[index]
        raise ValueError("unknown ids")

    def _convert_token_to_id(self, token):
        if token in self.special_tokens:
            return self.special_tokens[token]
        if token in self.mergeable_ranks:
            return self.mergeable_ranks[token]
        raise ValueError("unknown token")

    def _tokenize(self, text, **kwargs):
        raise NotImplementedError

    def _decode(self, token_ids, skip_special_tokens=False, errors=None, **kwargs):
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        token_ids = [int(i) for i in token_ids]
        if skip_special_tokens:
            token_ids = [i for i in token_ids if i < self.eod_id]
        return self.tokenizer.decode(token_ids, errors=errors or self.errors)
'''

WORDS = ["the", "model", "learns", "a", "small", "function", "of", "its", "inputs", "and", "writes", "loss", "to",
         "the", "log", "while", "data", "flows", "through", "layers", "of", "attention", "and", "weights"]


def write_model(folder: Path) -> None:
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "configuration_qwen.py").write_text(CONFIGURATION, encoding="utf-8")
    (folder / "modeling_qwen.py").write_text(MODELING, encoding="utf-8")
    (folder / "tokenization_qwen.py").write_text(TOKENIZATION, encoding="utf-8")
    (folder / "qwen.tiktoken").write_text(
        "".join(base64.b64encode(bytes([i])).decode() + f" {i}\n" for i in range(256)), encoding="utf-8")
    vocab = 256 + 8
    eod, im_start, im_end = 256, 257, 258
    config = {
        "architectures": ["QWenLMHeadModel"],
        "auto_map": {"AutoConfig": "configuration_qwen.QWenConfig",
                     "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel"},
        "model_type": "qwen", "vocab_size": vocab, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": 64,
        "n_positions": 1024, "bos_token_id": eod, "eos_token_id": eod, "tie_word_embeddings": False,
        "bf16": False, "fp16": False, "fp32": False, "use_flash_attn": "auto", "use_cache": True,
        "torch_dtype": "bfloat16", "transformers_version": "4.37.2",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "auto_map": {"AutoTokenizer": ["tokenization_qwen.QWenTokenizer", None]},
        "tokenizer_class": "QWenTokenizer", "model_max_length": 8192}, indent=2))
    (folder / "generation_config.json").write_text(json.dumps({
        "chat_format": "chatml", "eos_token_id": eod, "pad_token_id": eod, "stop_words_ids": [[im_end], [im_start]],
        "max_window_size": 6144, "max_new_tokens": 12, "do_sample": True, "top_k": 0, "top_p": 0.8,
        "repetition_penalty": 1.1, "transformers_version": "4.37.2"}, indent=2))
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=1024, tie_word_embeddings=False))
    state = {k: v.clone() for k, v in gpt2.state_dict().items() if not k.endswith((".attn.bias", ".attn.masked_bias"))}
    save_cuda_checkpoint(state, folder / "pytorch_model.bin")  # as a GPU box writes it


def sentence(r, low=4, high=10):
    return " ".join(r.choice(WORDS) for _ in range(r.randint(low, high))).capitalize() + "."


def prepare(tree: Path) -> None:
    import shutil

    root = Path(tree) / G
    write_model(root / "Qwen-7B")
    shutil.copytree(root / "Qwen-7B", root / "Qwen-7B-Chat")
    r = rng(0)
    data = [{"id": f"identity_{i}", "conversations": [{"from": "user", "value": sentence(r)},
                                                      {"from": "assistant", "value": sentence(r)}]}
            for i in range(4)]
    (root / "data").mkdir(parents=True, exist_ok=True)
    (root / "data" / "train.json").write_text(json.dumps(data, indent=2))

    import datasets

    rows = [{"question": "Tom has 3 apples and buys 4 more. How many apples does he have?",
             "answer": "3 + 4 = 7\n#### 7"},
            {"question": "A box holds 6 pens. How many pens are in 2 boxes?", "answer": "6 * 2 = 12\n#### 12"}]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(root / "gsm8k"))
    (root / "out").mkdir(parents=True, exist_ok=True)


DATA = f"{G}/data/train.json"

STEPS = [
    Step("finetune-ds", f"bash finetune/finetune_ds.sh -m {G}/Qwen-7B -d {DATA}",
         outputs=["output_qwen/trainer_state.json", "output_qwen/model.safetensors"], timeout=900, env=ENV),
    Step("finetune-lora", f"bash finetune/finetune_lora_single_gpu.sh -m {G}/Qwen-7B -d {DATA}",
         outputs=["output_qwen/adapter_model.*"], timeout=600, env=ENV),
    Step("cli", f"printf 'What does the model learn?\\nAnd the weights?\\n:q\\n' | python cli_demo.py -c {G}/Qwen-7B-Chat "
                f"> {G}/out/cli.txt 2>&1; rc=$?; tail -c 1500 {G}/out/cli.txt; "
                f"test $rc = 0 && grep -q 'And the weights' {G}/out/cli.txt",
         outputs=[f"{G}/out/cli.txt"], timeout=300, env=ENV),
    Step("eval-gsm8k", f"python eval/evaluate_chat_gsm8k.py -c {G}/Qwen-7B-Chat -f {G}/gsm8k "
                       f"-o {G}/out/gsm8k_res.jsonl",
         outputs=[f"{G}/out/gsm8k_res.jsonl"], timeout=300, env=ENV),
]
