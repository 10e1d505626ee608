"""InternLM's own commands, tiny, on a tiny random InternLM2-style model the recipe writes (remote code, as the Hub's):

- ``web-demo``: the README's ``streamlit run ./chat/web_demo.py`` (``load_model``: ``AutoModelForCausalLM.from_pretrained(
  'internlm/internlm3-8b-instruct', trust_remote_code=True).to(torch.bfloat16).cuda()``, then its own
  ``generate_interactive`` loop), driven by streamlit's ``AppTest`` from ``_gauntlet/web_demo_app.py`` (chat/ first on
  sys.path, as ``streamlit run`` puts it): one run of the script, then one message typed into its chat input; the answer is written to ``_gauntlet/out/web_demo.txt``.
- ``pal``: agent/pal_inference.md's ``python pal_inference.py <model> <out_dir> -v`` from agent/ (``.to(torch.bfloat16)
  .cuda()``, its own ``generate_interactive`` with a KV cache, the PAL prompt, executing the generated code) on a
  synthetic two-question GSM8K laid out as the Hub's ``gsm8k`` dataset (README configs, ``main`` split folder) in
  agent/gsm8k, which ``load_dataset(path='gsm8k', name='main')`` reads as a local folder.
- ``convert2llama``: tools/README.md's ``python convert2llama.py --src ... --tgt ...`` on the tiny InternLM2 checkpoint,
  whose ``pytorch_model.bin`` is written as on a GPU box (storages tagged ``cuda:0``; the script's ``torch.load(fp)``).
- ``hf-test``: ``pytest tests/test_hf_model.py`` on one case, ``TestChat::test_demo_default`` for
  internlm/internlm2_5-1_8b-chat (``float16 ... .cuda()``, ``model.chat`` and ``model.stream_chat`` of the remote code).

The model: configuration_internlm2.py / modeling_internlm2.py written by the recipe, a compact stand-in for the Hub's
InternLM2 remote code (the same weight names and fused ``wqkv`` layout that convert2llama.py unpacks, RMSNorm, rotary
embeddings, grouped-query attention through scaled_dot_product_attention, a legacy tuple KV cache,
``prepare_inputs_for_generation``, the Hub's ``build_inputs`` / ``chat`` / ``stream_chat`` with its threaded streamer),
with a SentencePiece tokenizer trained on synthetic text and loaded as ``LlamaTokenizer`` (the Hub's InternLM2Tokenizer
is a SentencePiece Llama-style tokenizer; convert2llama.py itself reads it with ``LlamaTokenizer``). It is test
scaffolding written by ``prepare`` (after porter ran): porter never sees it.
"""

import json
import os
import shutil
from pathlib import Path

from _recipe import Step, fake_hub_model, save_cuda_checkpoint, synthetic_text, train_sentencepiece

G = "_gauntlet"
MODEL = f"{G}/internlm2-tiny"
HUB_IDS = ("internlm/internlm3-8b-instruct", "internlm/internlm2_5-7b-chat", "internlm/internlm2_5-1_8b-chat")
ENV = {"HF_HOME": "{tree}/_gauntlet/hf", "PYTHONPATH": "{tree}/_gauntlet/site"}

CONFIGURATION = '''\
"""A stand-in for the Hub's configuration_internlm2.py (gauntlet scaffolding)."""
from transformers.configuration_utils import PretrainedConfig


class InternLM2Config(PretrainedConfig):
    model_type = "internlm2"
    _auto_class = "AutoConfig"

    def __init__(self, vocab_size=103168, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, hidden_act="silu", max_position_embeddings=2048,
                 initializer_range=0.02, rms_norm_eps=1e-6, use_cache=True, pad_token_id=0, bos_token_id=1,
                 eos_token_id=2, tie_word_embeddings=False, bias=True, rope_theta=10000, rope_scaling=None,
                 attn_implementation=None, **kwargs):
        self.vocab_size = vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.bias = bias
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.rope_theta = rope_theta
        self.rope_scaling = rope_scaling
        self.attn_implementation = attn_implementation or "eager"
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                         tie_word_embeddings=tie_word_embeddings, **kwargs)
'''

MODELING = '''\
"""A compact stand-in for the Hub's modeling_internlm2.py (gauntlet scaffolding): the same module and weight names,
fused wqkv layout ((kv_heads, groups + 2, head_dim) rows), rotary embeddings, a legacy tuple KV cache, and the Hub's
build_inputs / chat / stream_chat."""
import queue
import threading
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers.generation.streamers import BaseStreamer
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.modeling_utils import PreTrainedModel

from .configuration_internlm2 import InternLM2Config


class InternLM2RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class InternLM2RotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000):
        super().__init__()
        self.dim = dim
        self.base = base

    def forward(self, x, position_ids):
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2, device=x.device, dtype=torch.float32) / self.dim))
        freqs = position_ids[:, :, None].float() * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class InternLM2MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.w1 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w3 = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.w2 = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class InternLM2Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = self.hidden_size // self.num_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        self.wqkv = nn.Linear(self.hidden_size, (self.num_heads + 2 * self.num_key_value_heads) * self.head_dim,
                              bias=config.bias)
        self.wo = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=config.bias)
        self.rotary_emb = InternLM2RotaryEmbedding(self.head_dim, base=config.rope_theta)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value=None, use_cache=False):
        bsz, q_len, _ = hidden_states.size()
        qkv = self.wqkv(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.num_key_value_groups + 2,
                                             self.head_dim)
        query = qkv[..., : self.num_key_value_groups, :].reshape(bsz, q_len, self.num_heads, self.head_dim)
        query = query.transpose(1, 2)
        key = qkv[..., -2, :].transpose(1, 2)
        value = qkv[..., -1, :].transpose(1, 2)
        cos, sin = self.rotary_emb(value, position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query = query * cos + rotate_half(query) * sin
        key = key * cos + rotate_half(key) * sin
        if past_key_value is not None:
            key = torch.cat([past_key_value[0], key], dim=2)
            value = torch.cat([past_key_value[1], value], dim=2)
        present = (key, value) if use_cache else None
        key = key.repeat_interleave(self.num_key_value_groups, dim=1)
        value = value.repeat_interleave(self.num_key_value_groups, dim=1)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask)
        out = out.transpose(1, 2).reshape(bsz, q_len, self.hidden_size)
        return self.wo(out), present


class InternLM2DecoderLayer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = InternLM2Attention(config)
        self.feed_forward = InternLM2MLP(config)
        self.attention_norm = InternLM2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.ffn_norm = InternLM2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states, attention_mask, position_ids, past_key_value=None, use_cache=False):
        attn, present = self.attention(self.attention_norm(hidden_states), attention_mask, position_ids,
                                       past_key_value, use_cache)
        hidden_states = hidden_states + attn
        hidden_states = hidden_states + self.feed_forward(self.ffn_norm(hidden_states))
        return hidden_states, present


class InternLM2PreTrainedModel(PreTrainedModel):
    config_class = InternLM2Config
    base_model_prefix = "model"
    supports_gradient_checkpointing = False
    _no_split_modules = ["InternLM2DecoderLayer"]

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=std)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=std)


class InternLM2Model(InternLM2PreTrainedModel):
    _auto_class = "AutoModel"

    def __init__(self, config):
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, self.padding_idx)
        self.layers = nn.ModuleList([InternLM2DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = InternLM2RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_init()

    def get_input_embeddings(self):
        return self.tok_embeddings

    def set_input_embeddings(self, value):
        self.tok_embeddings = value

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, use_cache=None):
        if inputs_embeds is None:
            inputs_embeds = self.tok_embeddings(input_ids)
        bsz, q_len = inputs_embeds.shape[:2]
        past_len = past_key_values[0][0].shape[2] if past_key_values else 0
        device = inputs_embeds.device
        if position_ids is None:
            position_ids = torch.arange(past_len, past_len + q_len, device=device)[None].expand(bsz, -1)
        kv_len = past_len + q_len
        mask = torch.ones(q_len, kv_len, dtype=torch.bool, device=device).tril(diagonal=past_len)[None, None]
        if attention_mask is not None:
            mask = mask & attention_mask[:, None, None, :kv_len].bool()
            mask = mask | ~mask.any(-1, keepdim=True)  # rows of left padding attend to everything (discarded)
        hidden_states = inputs_embeds
        presents = [] if use_cache else None
        for i, layer in enumerate(self.layers):
            past = past_key_values[i] if past_key_values else None
            hidden_states, present = layer(hidden_states, mask, position_ids, past, use_cache)
            if use_cache:
                presents.append(present)
        return self.norm(hidden_states), (tuple(presents) if use_cache else None)


class InternLM2ForCausalLM(InternLM2PreTrainedModel):
    _auto_class = "AutoModelForCausalLM"
    _tied_weights_keys = ["output.weight"]

    def __init__(self, config):
        super().__init__(config)
        self.model = InternLM2Model(config)
        self.vocab_size = config.vocab_size
        self.output = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.tok_embeddings

    def set_input_embeddings(self, value):
        self.model.tok_embeddings = value

    def get_output_embeddings(self):
        return self.output

    def set_output_embeddings(self, new_embeddings):
        self.output = new_embeddings

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                inputs_embeds=None, labels=None, use_cache=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, **kwargs):
        use_cache = self.config.use_cache if use_cache is None else use_cache
        hidden_states, presents = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                             position_ids=position_ids, past_key_values=past_key_values,
                                             inputs_embeds=inputs_embeds, use_cache=use_cache)
        logits = self.output(hidden_states).float()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, self.vocab_size), labels[:, 1:].reshape(-1))
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=presents)

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None,
                                      inputs_embeds=None, **kwargs):
        if past_key_values is not None:
            past_length = past_key_values[0][0].shape[2]
            input_ids = input_ids[:, past_length:] if input_ids.shape[1] > past_length else input_ids[:, -1:]
        position_ids = kwargs.get("position_ids", None)
        if attention_mask is not None and position_ids is None:
            position_ids = attention_mask.long().cumsum(-1) - 1
            position_ids.masked_fill_(attention_mask == 0, 1)
            if past_key_values:
                position_ids = position_ids[:, -input_ids.shape[1]:]
        return {"input_ids": input_ids, "position_ids": position_ids, "past_key_values": past_key_values,
                "use_cache": kwargs.get("use_cache"), "attention_mask": attention_mask}

    @staticmethod
    def _reorder_cache(past_key_values, beam_idx):
        return tuple(tuple(p.index_select(0, beam_idx.to(p.device)) for p in layer) for layer in past_key_values)

    def build_inputs(self, tokenizer, query: str, history: List[Tuple[str, str]] = [], meta_instruction=""):
        if tokenizer.add_bos_token:
            prompt = ""
        else:
            prompt = tokenizer.bos_token
        if meta_instruction:
            prompt += f"""<|im_start|>system\\n{meta_instruction}<|im_end|>\\n"""
        for record in history:
            prompt += f"""<|im_start|>user\\n{record[0]}<|im_end|>\\n<|im_start|>assistant\\n{record[1]}<|im_end|>\\n"""
        prompt += f"""<|im_start|>user\\n{query}<|im_end|>\\n<|im_start|>assistant\\n"""
        return tokenizer([prompt], return_tensors="pt")

    @torch.no_grad()
    def chat(self, tokenizer, query: str, history: List[Tuple[str, str]] = [], streamer: Optional[BaseStreamer] = None,
             max_new_tokens: int = 1024, do_sample: bool = True, temperature: float = 0.8, top_p: float = 0.8,
             meta_instruction: str = "You are an AI assistant whose name is InternLM (书生·浦语).", **kwargs):
        inputs = self.build_inputs(tokenizer, query, history, meta_instruction)
        inputs = {k: v.to(self.device) for k, v in inputs.items() if torch.is_tensor(v)}
        eos_token_id = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(["<|im_end|>"])[0]]
        outputs = self.generate(**inputs, streamer=streamer, max_new_tokens=max_new_tokens, do_sample=do_sample,
                                temperature=temperature, top_p=top_p, eos_token_id=eos_token_id, **kwargs)
        outputs = outputs[0].cpu().tolist()[len(inputs["input_ids"][0]):]
        response = tokenizer.decode(outputs, skip_special_tokens=True)
        response = response.split("<|im_end|>")[0]
        history = history + [(query, response)]
        return response, history

    @torch.no_grad()
    def stream_chat(self, tokenizer, query: str, history: List[Tuple[str, str]] = [], max_new_tokens: int = 1024,
                    do_sample: bool = True, temperature: float = 0.8, top_p: float = 0.8, **kwargs):
        response_queue = queue.Queue(maxsize=20)

        class ChatStreamer(BaseStreamer):
            def __init__(self, tokenizer) -> None:
                super().__init__()
                self.tokenizer = tokenizer
                self.queue = response_queue
                self.query = query
                self.history = history
                self.response = ""
                self.cache = []
                self.received_inputs = False
                self.queue.put((self.response, history + [(self.query, self.response)]))

            def put(self, value):
                if len(value.shape) > 1 and value.shape[0] > 1:
                    raise ValueError("ChatStreamer only supports batch size 1")
                elif len(value.shape) > 1:
                    value = value[0]
                if not self.received_inputs:
                    self.received_inputs = True
                    return
                self.cache.extend(value.tolist())
                token = self.tokenizer.decode(self.cache, skip_special_tokens=True)
                if token.strip() != "<|im_end|>":
                    self.response = self.response + token
                    history = self.history + [(self.query, self.response)]
                    self.queue.put((self.response, history))
                    self.cache = []
                else:
                    self.end()

            def end(self):
                self.queue.put(None)

        def stream_producer():
            return self.chat(tokenizer=tokenizer, query=query, streamer=ChatStreamer(tokenizer=tokenizer),
                             history=history, max_new_tokens=max_new_tokens, do_sample=do_sample,
                             temperature=temperature, top_p=top_p, **kwargs)

        def consumer():
            producer = threading.Thread(target=stream_producer)
            producer.start()
            while True:
                res = response_queue.get()
                if res is None:
                    return
                yield res

        return consumer()
'''

# test_hf_model.py imports auto_gptq and lmdeploy at its top (used only by the 4-bit and AWQ cases, not run here):
# both are CUDA-built packages PyPI can't give this machine, so the recipe puts empty stand-ins on PYTHONPATH.
STUBS = {
    "auto_gptq/__init__.py": "",
    "auto_gptq/modeling.py": "class BaseGPTQForCausalLM:  # gauntlet stand-in (CUDA package)\n    pass\n",
    "lmdeploy/__init__.py": ("class TurbomindEngineConfig:  # gauntlet stand-in (CUDA package)\n"
                             "    def __init__(self, *args, **kwargs):\n        raise NotImplementedError\n\n\n"
                             "def pipeline(*args, **kwargs):\n    raise NotImplementedError\n"),
}

WEB_DEMO_APP = '''\
"""Drives chat/web_demo.py as `streamlit run ./chat/web_demo.py` would, with streamlit's AppTest: the page loads
(load_model), then one message is typed into the chat input and the answer streams out of generate_interactive."""
import os
import sys

from streamlit.testing.v1 import AppTest


def check(app):  # the app's own traceback is logged above by streamlit; end without one of ours after it
    if app.exception:
        print("web demo raised:", [e.value for e in app.exception])
        sys.exit(1)


# `streamlit run ./chat/web_demo.py` puts the script's folder first on sys.path (streamlit.web.bootstrap._fix_sys_path);
# AppTest does not: without this line the harness, not the command, differs (blind round 18's first contact).
sys.path.insert(0, os.path.abspath("chat"))
app = AppTest.from_file(os.path.abspath("chat/web_demo.py"), default_timeout=500)
app.run()
check(app)
app.chat_input[0].set_value("the model learns a small function").run()
check(app)
robots = [m for m in app.chat_message if m.name == "robot"]
assert robots, "no answer"
answer = robots[-1].markdown[-1].value
print("web demo answer:", repr(answer))
assert answer.startswith(":blue[[Normal Response]]"), answer
os.makedirs("_gauntlet/out", exist_ok=True)
with open("_gauntlet/out/web_demo.txt", "w", encoding="utf-8") as out:
    out.write(answer)
'''

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS = 32, 4, 2, 64, 2


def write_model(folder: Path, spm_model: Path) -> None:
    import sentencepiece
    import torch
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "configuration_internlm2.py").write_text(CONFIGURATION, encoding="utf-8")
    (folder / "modeling_internlm2.py").write_text(MODELING, encoding="utf-8")
    # the Hub's InternLM2 tokenizer pads with </s> (both demos call tokenizer([prompt], padding=True))
    tokenizer = transformers.LlamaTokenizer(vocab_file=str(spm_model), legacy=True, pad_token="</s>")
    tokenizer.save_pretrained(folder)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    vocab = sp.get_piece_size()
    eos, unk, bos = sp.eos_id(), sp.unk_id(), sp.bos_id()
    config = {
        "architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2",
        "auto_map": {"AutoConfig": "configuration_internlm2.InternLM2Config",
                     "AutoModel": "modeling_internlm2.InternLM2ForCausalLM",
                     "AutoModelForCausalLM": "modeling_internlm2.InternLM2ForCausalLM"},
        "attn_implementation": "eager", "bias": False, "bos_token_id": bos, "eos_token_id": eos, "pad_token_id": unk,
        "hidden_act": "silu", "hidden_size": HIDDEN, "initializer_range": 0.02, "intermediate_size": FFN,
        "max_position_embeddings": 4096, "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 1000000,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.41.0",
        "use_cache": True, "vocab_size": vocab,
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    # Random weights in the Hub's InternLM2 layout. Residual channels 0 and 1 are set in the embeddings and no block
    # writes to them: channel 0 is 1.0 for every token (about 4 after the final RMSNorm), channel 1 is +1.0 for the
    # pieces that hold a full stop or comma and -1.0 for every other. EOS's output row reads channel 1, so EOS is
    # likely only right after such a piece: answers are a few tokens long, never empty. The punctuation rows read
    # channel 0 (sampled about one step in six); the rows of pieces that decode to nothing (<unk>, <s>, a bare
    # "\u2581") read it negatively.
    torch.manual_seed(0)
    head_dim = HIDDEN // HEADS
    qkv = (HEADS + 2 * KV_HEADS) * head_dim
    stops = [i for i in range(vocab) if any(c in sp.id_to_piece(i) for c in ".,") and i != eos]
    assert stops, "no punctuation piece"
    emb = torch.randn(vocab, HIDDEN) * 0.02
    emb[:, 0] = 1.0
    emb[:, 1] = -1.0
    emb[stops, 1] = 1.0
    state = {"model.tok_embeddings.weight": emb, "model.norm.weight": torch.ones(HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        state[p + "attention_norm.weight"] = torch.ones(HIDDEN)
        state[p + "ffn_norm.weight"] = torch.ones(HIDDEN)
        state[p + "attention.wqkv.weight"] = torch.randn(qkv, HIDDEN) * 0.1
        wo = torch.randn(HIDDEN, HIDDEN) * 0.02
        wo[:2] = 0.0
        state[p + "attention.wo.weight"] = wo
        state[p + "feed_forward.w1.weight"] = torch.randn(FFN, HIDDEN) * 0.1
        state[p + "feed_forward.w3.weight"] = torch.randn(FFN, HIDDEN) * 0.1
        w2 = torch.randn(HIDDEN, FFN) * 0.02
        w2[:2] = 0.0
        state[p + "feed_forward.w2.weight"] = w2
    out = torch.randn(vocab, HIDDEN) * 0.1
    out[:, :2] = 0.0
    out[eos, 1] = 2.0
    out[stops, 0] = 0.5
    empty = [unk, bos] + [i for i in range(vocab) if sp.id_to_piece(i) == "\u2581"]
    out[empty, 0] = -1.5
    state["output.weight"] = out
    # as the Hub's checkpoints: bfloat16; written as a GPU box saves it (storages tagged cuda:0)
    save_cuda_checkpoint({k: v.to(torch.bfloat16) for k, v in state.items()}, folder / "pytorch_model.bin")


QUESTIONS = [
    ("Olivia has 23 apples and eats 5 of them. How many apples does she have left?", "She has 23 - 5 = 18 left.\n#### 18"),
    ("A box holds 4 rows of 6 eggs. How many eggs are in 3 boxes?", "4 * 6 * 3 = 72 eggs.\n#### 72"),
]

GSM8K_README = """---
configs:
- config_name: main
  data_files:
  - split: test
    path: main/test.jsonl
---
A synthetic stand-in for GSM8K (gauntlet), laid out as the Hub's dataset repository.
"""


def prepare(tree: Path) -> None:
    tree = Path(tree)
    root = tree / G
    text = synthetic_text(words=3000)
    text += "\n" + "\n".join(f"{q} {a}" for q, a in QUESTIONS * 10)
    text += "\nWhat is up, model? The answer, in short, is small.\n" * 5
    # a relative prefix: SentencePiece stores it in the model file, which would then differ between two trees
    # (--cuda-unchanged compares the original's files with the port's)
    cwd = os.getcwd()
    os.chdir(tree)
    try:
        spm_model = tree / train_sentencepiece(text, Path(G) / "spm" / "tokenizer", vocab_size=160)
    finally:
        os.chdir(cwd)
    model = tree / MODEL
    shutil.rmtree(model, ignore_errors=True)
    write_model(model, spm_model)
    for repo_id in HUB_IDS:  # the ids the commands name, in a Hugging Face cache under HF_HOME (offline)
        fake_hub_model(root / "hf", repo_id, lambda folder: shutil.copytree(model, folder, dirs_exist_ok=True))

    gsm8k = tree / "agent" / "gsm8k"  # load_dataset(path='gsm8k', name='main') from agent/
    (gsm8k / "main").mkdir(parents=True, exist_ok=True)
    (gsm8k / "README.md").write_text(GSM8K_README)
    (gsm8k / "main" / "test.jsonl").write_text("".join(json.dumps({"question": q, "answer": a}) + "\n"
                                                      for q, a in QUESTIONS))
    for name, body in STUBS.items():
        path = root / "site" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    (root / "out").mkdir(parents=True, exist_ok=True)
    (root / "web_demo_app.py").write_text(WEB_DEMO_APP, encoding="utf-8")



HF_TEST = "tests/test_hf_model.py::TestChat::test_demo_default[False-internlm/internlm2_5-1_8b-chat]"

STEPS = [
    Step("web-demo", f"python {G}/web_demo_app.py", outputs=[f"{G}/out/web_demo.txt"], timeout=600, env=ENV),
    # pal_inference.py catches any error per question and still writes the line: a line with no generation failed
    Step("pal", "cd agent && python pal_inference.py internlm/internlm2_5-7b-chat ../_gauntlet/out/pal -v && "
                "python -c \"import json; rows = [json.loads(l) for l in open('../_gauntlet/out/pal/gsm8k.json')]; "
                "assert len(rows) == 2 and all(r['generation'] for r in rows), rows; print(rows)\" && "
                "rm -rf ../_gauntlet/hf/datasets",  # datasets' cache names hold the tree's path (--cuda-unchanged)
         outputs=[f"{G}/out/pal/gsm8k.json"], timeout=600, env=ENV),
    Step("convert2llama", f"python tools/convert2llama.py --src {MODEL} --tgt {G}/out/llama",
         outputs=[f"{G}/out/llama/pytorch_model.bin", f"{G}/out/llama/config.json",
                  f"{G}/out/llama/tokenizer.model"], timeout=300, env=ENV),
    Step("hf-test", f"python -m pytest -x -q -s '{HF_TEST}' -p no:cacheprovider && echo passed > {G}/out/hf_test.ok",
         outputs=[f"{G}/out/hf_test.ok"], timeout=600, env=ENV),
]
