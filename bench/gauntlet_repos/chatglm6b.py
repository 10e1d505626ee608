"""ChatGLM-6B's own commands, tiny, with its own flags:

- ``cli``: the README's ``python cli_demo.py`` (``AutoModel.from_pretrained("THUDM/chatglm-6b",
  trust_remote_code=True).half().cuda()``, then ``model.stream_chat``), two turns typed on stdin, then ``stop``.
- ``api``: the README's ``python api.py`` (its ``__main__``: the same ``.half().cuda()`` load, then
  ``uvicorn.run(app)``), run by ``runpy`` from ``_gauntlet/api_client.py``, which replaces ``uvicorn.run`` by a
  FastAPI ``TestClient`` that POSTs two requests (the README's ``{"prompt": ..., "history": []}``) to the repository's
  own handler (``model.chat``, then ``torch_gc``) and checks the answers: no port is opened.
- ``ptuning-train``: ptuning/train.sh's ``main.py --do_train`` (P-Tuning v2, PRE_SEQ_LEN 128 -> 4, LR 2e-2), on a
  synthetic AdvertiseGen (content/summary) with --max_source_length/--max_target_length 16, batch 1, gradient
  accumulation 2, --max_steps 2 --save_steps 2: the vendored Trainer saves the prefix encoder at checkpoint-2.
- ``ptuning-predict``: evaluate.sh's ``main.py --do_predict --ptuning_checkpoint`` on the checkpoint-2 just written.
- ``ptuning-predict-gpu``: the same on a prefix-encoder checkpoint written as on a GPU box (``save_cuda_checkpoint``;
  main.py loads it with a bare ``torch.load``).
- ``ptuning-chat``: train_chat.sh's ``main.py --do_train`` with a ``history`` column (multi-turn), 1 step.

The shell scripts all pass ``--quantization_bit 4``; the README says to leave it out for FP16 ("不加此选项则为 FP16 精度
加载"), and the INT4 kernels are the Hub's remote quantization.py (cpm_kernels), not this repository's code, so the
recipe leaves it out. ds_train_finetune.sh (DeepSpeed full fine-tuning) and the Gradio web demos are not run.

The model is test scaffolding, not ported code: the Hub is unreachable (and transformers 4.27.1 asks the Hub for
the commit of a remote-code repository even offline), so ``prepare`` writes a stand-in at ``THUDM/chatglm-6b``
inside the tree, which ``from_pretrained("THUDM/chatglm-6b")`` run from the tree's root reads as a local folder (the
README's "load the model from a local folder", under the Hub's name; ptuning's --model_name_or_path points at it,
and HF_HOME keeps the copied remote-code modules in ``_gauntlet/hf``): remote code (configuration_chatglm.py, modeling_chatglm.py, tokenization_chatglm.py)
with the interface the repository's scripts call, as the Hub's has it (``chat``/``stream_chat`` moving inputs to
``self.device``, ``pre_seq_len``/``prefix_projection`` with a ``transformer.prefix_encoder`` and a frozen backbone,
gradient checkpointing, ``build_inputs_with_special_tokens`` with [gMASK] and <sop>), a tiny causal transformer on
random weights whose EOS is likely enough that each answer is a few tokens, and a SentencePiece tokenizer trained
on synthetic text.
"""

import json
from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint

G = "_gauntlet"
REPO_ID = "THUDM/chatglm-6b"

ENV = {
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_DISABLED": "true",
    "TERM": "dumb",
}

CONFIGURATION = '''\
from transformers.configuration_utils import PretrainedConfig


class ChatGLMConfig(PretrainedConfig):
    model_type = "chatglm"

    def __init__(self, vocab_size=150528, hidden_size=4096, num_layers=28, num_attention_heads=32,
                 layernorm_epsilon=1e-5, use_cache=False, bos_token_id=150004, eos_token_id=150005,
                 mask_token_id=150000, gmask_token_id=150001, pad_token_id=0, max_sequence_length=2048,
                 inner_hidden_size=16384, pre_seq_len=None, prefix_projection=False, **kwargs):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_attention_heads = num_attention_heads
        self.layernorm_epsilon = layernorm_epsilon
        self.use_cache = use_cache
        self.mask_token_id = mask_token_id
        self.gmask_token_id = gmask_token_id
        self.max_sequence_length = max_sequence_length
        self.inner_hidden_size = inner_hidden_size
        self.pre_seq_len = pre_seq_len
        self.prefix_projection = prefix_projection
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id, **kwargs)
'''

MODELING = '''\
"""A tiny stand-in for the Hub's ChatGLM-6B modeling code (gauntlet scaffolding, random weights)."""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn
from transformers.generation.logits_process import LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper, \\
    TopPLogitsWarper
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import PreTrainedModel

from .configuration_chatglm import ChatGLMConfig


class InvalidScoreLogitsProcessor(LogitsProcessor):
    def __call__(self, input_ids, scores):
        if torch.isnan(scores).any() or torch.isinf(scores).any():
            scores.zero_()
            scores[..., 5] = 5e4
        return scores


class PrefixEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.prefix_projection = config.prefix_projection
        width = config.num_layers * config.hidden_size * 2
        if self.prefix_projection:
            self.embedding = nn.Embedding(config.pre_seq_len, config.hidden_size)
            self.trans = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh(),
                                       nn.Linear(config.hidden_size, width))
        else:
            self.embedding = nn.Embedding(config.pre_seq_len, width)

    def forward(self, prefix):
        if self.prefix_projection:
            return self.trans(self.embedding(prefix))
        return self.embedding(prefix)


class GLMBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.input_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layernorm_epsilon)
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layernorm_epsilon)
        self.dense_h_to_4h = nn.Linear(config.hidden_size, config.inner_hidden_size)
        self.dense_4h_to_h = nn.Linear(config.inner_hidden_size, config.hidden_size)

    def forward(self, hidden_states, prefix_key, prefix_value):
        b, s, _ = hidden_states.shape
        x = self.input_layernorm(hidden_states)
        q, k, v = self.query_key_value(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        if prefix_key is not None:
            k = torch.cat([prefix_key, k], dim=2)
            v = torch.cat([prefix_value, v], dim=2)
        p = k.shape[2] - s
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        causal = torch.ones(s, s + p, dtype=torch.bool, device=hidden_states.device).tril(diagonal=p)
        scores = scores.float().masked_fill(~causal, -10000.0)
        probs = F.softmax(scores, dim=-1).type(v.dtype)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, -1)
        hidden_states = hidden_states + self.dense(context)
        x = self.post_attention_layernorm(hidden_states)
        return hidden_states + self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))


class ChatGLMPreTrainedModel(PreTrainedModel):
    config_class = ChatGLMConfig
    base_model_prefix = "transformer"
    supports_gradient_checkpointing = True
    is_parallelizable = False
    _no_split_modules = ["GLMBlock"]

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=0.02)

    def _set_gradient_checkpointing(self, module, value=False):
        if isinstance(module, ChatGLMModel):
            module.gradient_checkpointing = value


class ChatGLMModel(ChatGLMPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.num_layers = config.num_layers
        self.heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([GLMBlock(config) for _ in range(config.num_layers)])
        self.final_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layernorm_epsilon)
        self.gradient_checkpointing = False
        self.pre_seq_len = config.pre_seq_len
        if self.pre_seq_len is not None:
            for param in self.parameters():
                param.requires_grad = False
            self.prefix_tokens = torch.arange(self.pre_seq_len).long()
            self.prefix_encoder = PrefixEncoder(config)
            self.dropout = nn.Dropout(0.1)

    def get_input_embeddings(self):
        return self.word_embeddings

    def set_input_embeddings(self, new_embeddings):
        self.word_embeddings = new_embeddings

    def get_prompt(self, batch_size, device, dtype=torch.half):
        prefix_tokens = self.prefix_tokens.unsqueeze(0).expand(batch_size, -1).to(device)
        past = self.prefix_encoder(prefix_tokens).type(dtype)
        past = past.view(batch_size, self.pre_seq_len, self.num_layers * 2, self.heads, self.head_dim)
        past = self.dropout(past)
        return past.permute(2, 0, 3, 1, 4)  # (layers*2, batch, heads, prefix, head_dim)

    def forward(self, input_ids=None, inputs_embeds=None):
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)
        prompt = None
        if self.pre_seq_len is not None:
            prompt = self.get_prompt(inputs_embeds.shape[0], inputs_embeds.device, inputs_embeds.dtype)
        hidden_states = inputs_embeds
        for i, layer in enumerate(self.layers):
            key, value = (prompt[2 * i], prompt[2 * i + 1]) if prompt is not None else (None, None)
            if self.gradient_checkpointing and self.training:
                hidden_states = torch.utils.checkpoint.checkpoint(layer, hidden_states, key, value,
                                                                  use_reentrant=True)
            else:
                hidden_states = layer(hidden_states, key, value)
        return self.final_layernorm(hidden_states)


class ChatGLMForConditionalGeneration(ChatGLMPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.transformer = ChatGLMModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.pre_seq_len is not None:  # P-Tuning v2 trains the prefix encoder only (the Hub's ties lm_head)
            self.lm_head.weight.requires_grad = False
        self.post_init()

    def get_input_embeddings(self):
        return self.transformer.word_embeddings

    def get_output_embeddings(self):
        return self.lm_head

    def prepare_inputs_for_generation(self, input_ids, **kwargs):
        return {"input_ids": input_ids}

    def forward(self, input_ids=None, position_ids=None, attention_mask=None, past_key_values=None,
                inputs_embeds=None, labels=None, use_cache=None, output_attentions=None,
                output_hidden_states=None, return_dict=None):
        hidden_states = self.transformer(input_ids=input_ids, inputs_embeds=inputs_embeds)
        lm_logits = self.lm_head(hidden_states)
        loss = None
        if labels is not None:
            lm_logits = lm_logits.to(torch.float32)
            shift_logits = lm_logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1),
                                   ignore_index=-100)
            lm_logits = lm_logits.to(hidden_states.dtype)
            loss = loss.to(hidden_states.dtype)
        return CausalLMOutputWithPast(loss=loss, logits=lm_logits)

    def process_response(self, response):
        return response.strip().replace("[[训练时间]]", "2023年")

    @staticmethod
    def build_prompt(query, history):
        if not history:
            return query
        prompt = ""
        for i, (old_query, response) in enumerate(history):
            prompt += "[Round {}]\\n问：{}\\n答：{}\\n".format(i, old_query, response)
        return prompt + "[Round {}]\\n问：{}\\n答：".format(len(history), query)

    @torch.no_grad()
    def chat(self, tokenizer, query: str, history: List[Tuple[str, str]] = None, max_length: int = 2048,
             num_beams=1, do_sample=True, top_p=0.7, temperature=0.95, logits_processor=None, **kwargs):
        if history is None:
            history = []
        if logits_processor is None:
            logits_processor = LogitsProcessorList()
        logits_processor.append(InvalidScoreLogitsProcessor())
        gen_kwargs = {"max_length": max_length, "num_beams": num_beams, "do_sample": do_sample, "top_p": top_p,
                      "temperature": temperature, "logits_processor": logits_processor, **kwargs}
        inputs = tokenizer([self.build_prompt(query, history)], return_tensors="pt")
        inputs = inputs.to(self.device)
        outputs = self.generate(**inputs, **gen_kwargs)
        outputs = outputs.tolist()[0][len(inputs["input_ids"][0]):]
        response = self.process_response(tokenizer.decode(outputs))
        return response, history + [(query, response)]

    @torch.no_grad()
    def stream_chat(self, tokenizer, query: str, history: List[Tuple[str, str]] = None, max_length: int = 2048,
                    do_sample=True, top_p=0.7, temperature=0.95, logits_processor=None, **kwargs):
        if history is None:
            history = []
        if logits_processor is None:
            logits_processor = LogitsProcessorList()
        logits_processor.append(InvalidScoreLogitsProcessor())
        inputs = tokenizer([self.build_prompt(query, history)], return_tensors="pt")
        inputs = inputs.to(self.device)
        for outputs in self.stream_generate(**inputs, max_length=max_length, do_sample=do_sample, top_p=top_p,
                                            temperature=temperature, logits_processor=logits_processor):
            outputs = outputs.tolist()[0][len(inputs["input_ids"][0]):]
            response = self.process_response(tokenizer.decode(outputs))
            yield response, history + [(query, response)]

    @torch.no_grad()
    def stream_generate(self, input_ids, max_length=2048, do_sample=True, top_p=0.7, temperature=0.95,
                        logits_processor=None, **kwargs):
        logits_processor = logits_processor if logits_processor is not None else LogitsProcessorList()
        warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature), TopPLogitsWarper(top_p)])
        eos = self.config.eos_token_id
        while input_ids.shape[-1] < max_length:
            logits = self(input_ids=input_ids).logits[:, -1, :].float()
            scores = warpers(input_ids, logits_processor(input_ids, logits))
            if do_sample:
                next_tokens = torch.multinomial(F.softmax(scores, dim=-1), num_samples=1).squeeze(1)
            else:
                next_tokens = torch.argmax(scores, dim=-1)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            yield input_ids
            if int(next_tokens[0]) == eos:
                break
'''

TOKENIZATION = '''\
"""A stand-in for the Hub's ChatGLM tokenizer (gauntlet scaffolding): SentencePiece pieces plus GLM's specials."""
import os
import shutil

import sentencepiece as spm
from transformers.tokenization_utils import PreTrainedTokenizer

SPECIALS = ["<pad>", "[MASK]", "[gMASK]", "<sop>", "<eop>"]


class ChatGLMTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "ice_text.model"}
    model_input_names = ["input_ids"]

    def __init__(self, vocab_file, bos_token="<sop>", eos_token="<eop>", mask_token="[MASK]",
                 gmask_token="[gMASK]", pad_token="<pad>", unk_token="<unk>", padding_side="left", **kwargs):
        self.vocab_file = vocab_file
        self.sp = spm.SentencePieceProcessor(model_file=vocab_file)
        self.gmask_token = gmask_token
        super().__init__(bos_token=bos_token, eos_token=eos_token, mask_token=mask_token, pad_token=pad_token,
                         unk_token=unk_token, padding_side=padding_side, **kwargs)

    @property
    def vocab_size(self):
        return self.sp.get_piece_size() + len(SPECIALS)

    @property
    def gmask_token_id(self):
        return self._convert_token_to_id(self.gmask_token)

    def get_vocab(self):
        vocab = {self._convert_id_to_token(i): i for i in range(self.vocab_size)}
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text, **kwargs):
        return self.sp.encode(text, out_type=str)

    def _convert_token_to_id(self, token):
        if token in SPECIALS:
            return self.sp.get_piece_size() + SPECIALS.index(token)
        return self.sp.piece_to_id(token)

    def _convert_id_to_token(self, index):
        if index >= self.sp.get_piece_size():
            return SPECIALS[index - self.sp.get_piece_size()]
        return self.sp.id_to_piece(index)

    def convert_tokens_to_string(self, tokens):
        return self.sp.decode_pieces([t for t in tokens if t not in SPECIALS])

    def _decode(self, token_ids, skip_special_tokens=False, **kwargs):
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        # as the Hub's SPTokenizer.decode: negative ids (the -100 of ignored labels) and padding are dropped
        token_ids = [i for i in token_ids if 0 <= i < self.vocab_size and i != self.pad_token_id]
        return super()._decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)

    def save_vocabulary(self, save_directory, filename_prefix=None):
        target = os.path.join(save_directory, (filename_prefix or "") + "ice_text.model")
        if os.path.abspath(self.vocab_file) != os.path.abspath(target):
            shutil.copyfile(self.vocab_file, target)
        return (target,)

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        ids = token_ids_0 + [self.gmask_token_id, self.bos_token_id]
        if token_ids_1 is not None:
            ids = ids + token_ids_1 + [self.eos_token_id]
        return ids
'''

CONTENT_KEYS = {"类型": ["裙", "裤", "上衣", "外套"], "颜色": ["白色", "黑色", "红色", "蓝色"],
                "风格": ["清新", "简约", "复古", "休闲"], "图案": ["条纹", "纯色", "印花"], "材质": ["棉", "牛仔布"]}
SUMMARY_WORDS = ["这款", "裙子", "简约", "设计", "穿着", "舒适", "清新", "自然", "时尚", "百搭", "显瘦", "气质",
                 "的", "，", "。", "面料", "柔软", "透气", "适合", "日常", "搭配", "优雅", "修身", "版型"]
CHAT_WORDS = ["你好", "请问", "今天", "天气", "怎么样", "我", "想", "去", "公园", "散步", "好的", "谢谢", "，", "。"]


def advertise(r, count):
    rows = []
    for _ in range(count):
        keys = r.sample(sorted(CONTENT_KEYS), 3)
        content = "*".join(f"{k}#{r.choice(CONTENT_KEYS[k])}" for k in keys)
        summary = "".join(r.choice(SUMMARY_WORDS) for _ in range(r.randint(8, 20)))
        rows.append({"content": content, "summary": summary})
    return rows


def chats(r, count):
    def sentence():
        return "".join(r.choice(CHAT_WORDS) for _ in range(r.randint(3, 8)))
    return [{"prompt": sentence(), "response": sentence(),
             "history": [[sentence(), sentence()] for _ in range(r.randint(0, 2))]} for _ in range(count)]


def write_jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


API_CLIENT = '''\
"""Runs the repository's api.py as `python api.py` does, with uvicorn.run answering two POSTs in-process."""
import os
import runpy
import sys

import uvicorn
from fastapi.testclient import TestClient


def serve(app, host=None, port=None, workers=None, **kwargs):
    client = TestClient(app)
    history = []
    for prompt in ("你好", "请问今天天气怎么样"):
        reply = client.post("/", json={"prompt": prompt, "history": history})
        assert reply.status_code == 200, reply.text
        answer = reply.json()
        assert answer["status"] == 200 and isinstance(answer["response"], str), answer
        history = answer["history"]
        print("api answer:", answer)
    assert len(history) == 2, history
    with open("_gauntlet/out/api.json", "w", encoding="utf-8") as out:
        out.write(str(history))


uvicorn.run = serve
sys.argv = ["api.py"]
sys.path[0] = os.path.dirname(os.path.abspath("api.py"))  # as `python api.py` has it: the script's folder
runpy.run_path("api.py", run_name="__main__")
'''


def write_model(folder: Path, spm_model: Path) -> None:
    import shutil

    import torch

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "configuration_chatglm.py").write_text(CONFIGURATION, encoding="utf-8")
    (folder / "modeling_chatglm.py").write_text(MODELING, encoding="utf-8")
    (folder / "tokenization_chatglm.py").write_text(TOKENIZATION, encoding="utf-8")
    shutil.copyfile(spm_model, folder / "ice_text.model")
    import sentencepiece

    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    pieces = sp.get_piece_size()
    specials = {name: pieces + i for i, name in enumerate(["<pad>", "[MASK]", "[gMASK]", "<sop>", "<eop>"])}
    config = {
        "architectures": ["ChatGLMModel"],
        "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                     "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
                     "AutoModelForSeq2SeqLM": "modeling_chatglm.ChatGLMForConditionalGeneration"},
        "model_type": "chatglm", "vocab_size": pieces + 5, "hidden_size": 32, "num_layers": 2,
        "num_attention_heads": 4, "inner_hidden_size": 64, "layernorm_epsilon": 1e-5, "max_sequence_length": 256,
        "bos_token_id": specials["<sop>"], "eos_token_id": specials["<eop>"], "pad_token_id": specials["<pad>"],
        "mask_token_id": specials["[MASK]"], "gmask_token_id": specials["[gMASK]"], "use_cache": False,
        "torch_dtype": "float16", "transformers_version": "4.27.1", "tie_word_embeddings": False,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "auto_map": {"AutoTokenizer": ["tokenization_chatglm.ChatGLMTokenizer", None]},
        "tokenizer_class": "ChatGLMTokenizer", "bos_token": "<sop>", "eos_token": "<eop>", "mask_token": "[MASK]",
        "gmask_token": "[gMASK]", "pad_token": "<pad>", "unk_token": "<unk>", "padding_side": "left",
        "remove_space": False, "do_lower_case": False}, indent=2))
    # random weights in the model's own layout; EOS is likely enough (about 0.3 before top-p) that answers stay short
    torch.manual_seed(0)
    hidden, vocab, layers = 32, pieces + 5, 2
    state = {"transformer.word_embeddings.weight": torch.randn(vocab, hidden) * 0.02,
             "transformer.final_layernorm.weight": torch.ones(hidden),
             "transformer.final_layernorm.bias": torch.zeros(hidden)}
    for i in range(layers):
        p = f"transformer.layers.{i}."
        for name, shape in (("query_key_value", (3 * hidden, hidden)), ("dense", (hidden, hidden)),
                            ("dense_h_to_4h", (64, hidden)), ("dense_4h_to_h", (hidden, 64))):
            state[p + name + ".weight"] = torch.randn(*shape) * 0.02
            state[p + name + ".bias"] = torch.zeros(shape[0])
        for name in ("input_layernorm", "post_attention_layernorm"):
            state[p + name + ".weight"] = torch.ones(hidden)
            state[p + name + ".bias"] = torch.zeros(hidden)
    # residual channels 0 and 1 are the current token's embedding channels (no block writes to them): channel 0 is
    # 1.0 at every token, channel 1 too except at <sop>, which ends every prompt, where it is -1.0 (each about +-4
    # after the final LayerNorm). EOS's output row reads channel 1 (logit about 3: about one token in five ends the
    # answer, never the first one); the rows of tokens that decode to nothing (specials, <unk>, <s>, </s>, a bare
    # "\u2581") read channel 0 negatively (logit about -4: never sampled under top-p).
    emb = state["transformer.word_embeddings.weight"]
    emb[:, 0] = 1.0
    emb[:, 1] = 1.0
    emb[specials["<sop>"], 1] = -1.0
    for i in range(layers):
        state[f"transformer.layers.{i}.dense.weight"][:2] = 0.0
        state[f"transformer.layers.{i}.dense_4h_to_h.weight"][:2] = 0.0
    lm_head = torch.randn(vocab, hidden) * 0.02
    lm_head[:, :2] = 0.0
    lm_head[specials["<eop>"], 1] = 0.8
    empty = [0, 1, 2, *(v for k, v in specials.items() if k != "<eop>")]
    empty += [i for i in range(pieces) if sp.id_to_piece(i) == "\u2581"]
    lm_head[empty, 0] = -1.0
    state["lm_head.weight"] = lm_head
    torch.save({k: v.half() for k, v in state.items()}, folder / "pytorch_model.bin")


def prepare(tree: Path) -> None:
    from _recipe import train_sentencepiece

    root = Path(tree) / G
    r = rng(0)
    train = advertise(r, 8)
    dev = advertise(r, 2)
    text = "\n".join(f"{row['content']} {row['summary']}" for row in train * 4)
    text += "\n" + "\n".join("[Round 0]\n问：你好\n答：好的 " + "".join(CHAT_WORDS) for _ in range(20))
    spm_model = train_sentencepiece(text, root / "spm" / "ice_text", vocab_size=120)
    write_model(Path(tree) / REPO_ID, spm_model)

    data = root / "AdvertiseGen"
    write_jsonl(data / "train.json", train)
    write_jsonl(data / "dev.json", dev)
    write_jsonl(root / "chat" / "train.json", chats(r, 6))
    write_jsonl(root / "chat" / "dev.json", chats(r, 2))

    import torch

    torch.manual_seed(1)  # a P-Tuning v2 checkpoint as the vendored Trainer writes it on a GPU box: the prefix only
    prefix = {"transformer.prefix_encoder.embedding.weight": torch.randn(4, 2 * 2 * 32) * 0.02}
    save_cuda_checkpoint(prefix, root / "gpu-ckpt" / "checkpoint-3000" / "pytorch_model.bin")

    (root / "out").mkdir(parents=True, exist_ok=True)
    (root / "api_client.py").write_text(API_CLIENT, encoding="utf-8")


# ptuning/train.sh and evaluate.sh, scaled down by their own flags (PRE_SEQ_LEN 128 -> 4; no --quantization_bit)
MAIN = f"cd ptuning && python main.py --model_name_or_path ../{REPO_ID} --overwrite_cache --overwrite_output_dir"
TRAIN = (f"{MAIN} --do_train --train_file ../{G}/AdvertiseGen/train.json --validation_file ../{G}/AdvertiseGen/dev.json "
         "--prompt_column content --response_column summary --output_dir ../{G}/out/adgen-pt "
         "--max_source_length 16 --max_target_length 16 --per_device_train_batch_size 1 "
         "--per_device_eval_batch_size 1 --gradient_accumulation_steps 2 --predict_with_generate --max_steps 2 "
         "--logging_steps 1 --save_steps 2 --learning_rate 2e-2 --pre_seq_len 4").replace("{G}", G)
PREDICT = (f"{MAIN} --do_predict --validation_file ../{G}/AdvertiseGen/dev.json --test_file ../{G}/AdvertiseGen/dev.json "
           "--prompt_column content --response_column summary --max_source_length 16 --max_target_length 16 "
           "--per_device_eval_batch_size 1 --predict_with_generate --pre_seq_len 4").replace("{G}", G)
CHAT_TRAIN = (f"{MAIN} --do_train --train_file ../{G}/chat/train.json --validation_file ../{G}/chat/dev.json "
              "--prompt_column prompt --response_column response --history_column history "
              "--output_dir ../{G}/out/chat-pt --max_source_length 32 --max_target_length 16 "
              "--per_device_train_batch_size 1 --per_device_eval_batch_size 1 --gradient_accumulation_steps 2 "
              "--predict_with_generate --max_steps 1 --logging_steps 1 --save_steps 1 --learning_rate 1e-2 "
              "--pre_seq_len 4").replace("{G}", G)

STEPS = [
    Step("cli", f"printf '你好\\n请问今天天气怎么样\\nstop\\n' | python cli_demo.py > {G}/out/cli.txt 2>&1; rc=$?; "
                f"tail -c 2000 {G}/out/cli.txt; test $rc = 0 && grep -q '请问今天天气怎么样' {G}/out/cli.txt",
         outputs=[f"{G}/out/cli.txt"], timeout=300, env=ENV),
    Step("api", f"python {G}/api_client.py", outputs=[f"{G}/out/api.json"], timeout=300, env=ENV),
    Step("ptuning-train", TRAIN, outputs=[f"{G}/out/adgen-pt/checkpoint-2/pytorch_model.bin"], timeout=400,
         env=ENV),
    Step("ptuning-predict",
         f"{PREDICT} --ptuning_checkpoint ../{G}/out/adgen-pt/checkpoint-2 --output_dir ../{G}/out/adgen-pt",
         outputs=[f"{G}/out/adgen-pt/generated_predictions.txt"], timeout=400, env=ENV),
    Step("ptuning-predict-gpu",
         f"{PREDICT} --ptuning_checkpoint ../{G}/gpu-ckpt/checkpoint-3000 --output_dir ../{G}/out/gpu-ckpt",
         outputs=[f"{G}/out/gpu-ckpt/generated_predictions.txt"], timeout=400, env=ENV),
    Step("ptuning-chat", CHAT_TRAIN, outputs=[f"{G}/out/chat-pt/checkpoint-1/pytorch_model.bin"], timeout=400,
         env=ENV),
]
