"""ChatGLM2-6B's own commands, tiny, with its own flags:

- ``cli``: the README's ``python cli_demo.py`` (``AutoModel.from_pretrained("THUDM/chatglm2-6b",
  trust_remote_code=True).cuda()``, then ``model.stream_chat(..., past_key_values=..., return_past_key_values=True)``),
  two turns typed on stdin, then ``stop``.
- ``api``: the README's ``python api.py`` (its ``__main__``: the same ``.cuda()`` load, then ``uvicorn.run(app)``),
  run by ``runpy`` from ``_gauntlet/api_client.py`` (with ``sys.path[0]`` the script's folder, as ``python api.py``
  has it), which replaces ``uvicorn.run`` by a FastAPI ``TestClient`` that POSTs the README's
  ``{"prompt": "你好", "history": []}`` and a second turn to the repository's handler (``model.chat``, then
  ``torch_gc``): no port is opened.
- ``ptuning-train``: ptuning/train.sh as written (``torchrun --standalone --nnodes=1 --nproc-per-node=$NUM_GPUS
  main.py --do_train ...`` from ptuning/, on AdvertiseGen/train.json and dev.json there, model
  THUDM/chatglm2-6b), scaled down by its own variables and flags: NUM_GPUS 2 (two processes), PRE_SEQ_LEN 128 -> 4,
  --max_source_length/--max_target_length 16, --gradient_accumulation_steps 2, --max_steps 2 --save_steps 2
  --logging_steps 1, no --preprocessing_num_workers; the PrefixTrainer saves the prefix encoder at
  output/adgen-chatglm2-6b-pt-4-2e-2/checkpoint-2.
- ``ptuning-evaluate``: evaluate.sh as written (torchrun, NUM_GPUS 1, ``--do_predict --ptuning_checkpoint
  ./output/$CHECKPOINT/checkpoint-$STEP``) on that checkpoint (CHECKPOINT adgen-chatglm2-6b-pt-4-2e-2, STEP 2),
  lengths 16: generated_predictions.txt.
- ``ptuning-evaluate-gpu``: the same on a prefix-encoder checkpoint written as on a GPU box
  (``save_cuda_checkpoint``: the PrefixTrainer's pytorch_model.bin; main.py loads it with a bare ``torch.load``).
- ``ceval``: evaluation/README.md's ``cd evaluation && python evaluate_ceval.py`` (``.bfloat16().cuda()``, inputs
  ``.to('cuda')``, ``model.generate(do_sample=False, max_new_tokens=512)`` then the answer logits) on a synthetic
  C-Eval validation subject under evaluation/CEval/val/.

The scripts pass ``--quantization_bit 4``; the README says to leave it out for FP16 ("不加此选项则为 FP16 精度加载"), and
the INT4 kernels are the Hub's remote quantization.py (cpm_kernels), not this repository's code, so the recipe
leaves it out. ds_train_finetune.sh (DeepSpeed on 4 GPUs), openai_api.py and the Gradio/Streamlit web demos are not
run.

The model is test scaffolding, not ported code: the Hub is unreachable, so ``prepare`` writes a stand-in at
``THUDM/chatglm2-6b`` inside the tree and inside ptuning/ and evaluation/ (the folders the commands run from), which
``from_pretrained("THUDM/chatglm2-6b")`` reads as a local folder (the README's "load the model from a local folder",
under the Hub's name): remote code (configuration_chatglm.py, modeling_chatglm.py, tokenization_chatglm.py) with the
interface the repository's scripts call, as the Hub's ChatGLM2-6B code has it (``chat``/``stream_chat`` with
``past_key_values``/``return_past_key_values`` moving inputs to ``self.device``, ``stream_generate``, seq-first KV
caches, rotary embeddings, multi-query attention through ``scaled_dot_product_attention``, RMSNorm, modules built
in ``config.torch_dtype`` (float16) with ``skip_init``, ``return_last_logit``, ``pre_seq_len``/``prefix_projection``
with a ``transformer.prefix_encoder`` and a frozen backbone, gradient checkpointing of the encoder layers; the
tokenizer's ``build_prompt``, [gMASK]/sop prefix, left padding with position_ids), a tiny model on random weights
whose EOS is likely enough that each sampled answer is a few tokens (and the first greedy token), and a
SentencePiece tokenizer trained on synthetic text.
"""

import json
from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint

G = "_gauntlet"
REPO_ID = "THUDM/chatglm2-6b"
PRE_SEQ_LEN = 4

ENV = {
    "HF_HOME": "{tree}/_gauntlet/hf",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_DISABLED": "true",
    "TERM": "dumb",
    "TOKENIZERS_PARALLELISM": "false",
}

CONFIGURATION = '''\
"""A stand-in for the Hub's ChatGLM2-6B configuration (gauntlet scaffolding)."""
from transformers import PretrainedConfig


class ChatGLMConfig(PretrainedConfig):
    model_type = "chatglm"

    def __init__(self, num_layers=28, padded_vocab_size=65024, hidden_size=4096, ffn_hidden_size=13696,
                 kv_channels=128, num_attention_heads=32, seq_length=2048, hidden_dropout=0.0,
                 attention_dropout=0.0, layernorm_epsilon=1e-5, rmsnorm=True,
                 apply_residual_connection_post_layernorm=False, post_layer_norm=True, add_bias_linear=False,
                 add_qkv_bias=False, bias_dropout_fusion=True, multi_query_attention=False, multi_query_group_num=1,
                 apply_query_key_layer_scaling=True, attention_softmax_in_fp32=True, fp32_residual_connection=False,
                 quantization_bit=0, pre_seq_len=None, prefix_projection=False, **kwargs):
        self.num_layers = num_layers
        self.vocab_size = padded_vocab_size
        self.padded_vocab_size = padded_vocab_size
        self.hidden_size = hidden_size
        self.ffn_hidden_size = ffn_hidden_size
        self.kv_channels = kv_channels
        self.num_attention_heads = num_attention_heads
        self.seq_length = seq_length
        self.hidden_dropout = hidden_dropout
        self.attention_dropout = attention_dropout
        self.layernorm_epsilon = layernorm_epsilon
        self.rmsnorm = rmsnorm
        self.apply_residual_connection_post_layernorm = apply_residual_connection_post_layernorm
        self.post_layer_norm = post_layer_norm
        self.add_bias_linear = add_bias_linear
        self.add_qkv_bias = add_qkv_bias
        self.bias_dropout_fusion = bias_dropout_fusion
        self.multi_query_attention = multi_query_attention
        self.multi_query_group_num = multi_query_group_num
        self.apply_query_key_layer_scaling = apply_query_key_layer_scaling
        self.attention_softmax_in_fp32 = attention_softmax_in_fp32
        self.fp32_residual_connection = fp32_residual_connection
        self.quantization_bit = quantization_bit
        self.pre_seq_len = pre_seq_len
        self.prefix_projection = prefix_projection
        super().__init__(**kwargs)
'''

MODELING = '''\
"""A tiny stand-in for the Hub's ChatGLM2-6B modeling code (gauntlet scaffolding, random weights)."""
import copy
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn
from torch.nn.utils import skip_init
from transformers.generation.logits_process import LogitsProcessor
from transformers.generation.utils import GenerationConfig, LogitsProcessorList, ModelOutput, StoppingCriteriaList
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast
from transformers.modeling_utils import PreTrainedModel
from transformers.utils import logging

from .configuration_chatglm import ChatGLMConfig

# flags required to enable jit fusion kernels (as the Hub's code sets them)
if sys.platform != "darwin":
    torch._C._jit_set_profiling_mode(False)
    torch._C._jit_set_profiling_executor(False)
    torch._C._jit_override_can_fuse_on_cpu(True)
    torch._C._jit_override_can_fuse_on_gpu(True)

logger = logging.get_logger(__name__)


def default_init(cls, *args, **kwargs):
    return cls(*args, **kwargs)


class InvalidScoreLogitsProcessor(LogitsProcessor):
    def __call__(self, input_ids, scores):
        if torch.isnan(scores).any() or torch.isinf(scores).any():
            scores.zero_()
            scores[..., 5] = 5e4
        return scores


class PrefixEncoder(torch.nn.Module):
    def __init__(self, config: ChatGLMConfig):
        super().__init__()
        self.prefix_projection = config.prefix_projection
        kv_size = config.num_layers * config.kv_channels * config.multi_query_group_num * 2
        if self.prefix_projection:
            self.embedding = torch.nn.Embedding(config.pre_seq_len, kv_size)
            self.trans = torch.nn.Sequential(torch.nn.Linear(kv_size, config.hidden_size), torch.nn.Tanh(),
                                             torch.nn.Linear(config.hidden_size, kv_size))
        else:
            self.embedding = torch.nn.Embedding(config.pre_seq_len, kv_size)

    def forward(self, prefix):
        if self.prefix_projection:
            return self.trans(self.embedding(prefix))
        return self.embedding(prefix)


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, original_impl=False, device=None, dtype=None):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, device=device).to(dtype=dtype) / dim))
        self.register_buffer("inv_freq", inv_freq)
        self.dim = dim
        self.original_impl = original_impl

    def forward_impl(self, seq_len, n_elem, dtype, device, base=10000):
        theta = 1.0 / (base ** (torch.arange(0, n_elem, 2, dtype=torch.float, device=device) / n_elem))
        seq_idx = torch.arange(seq_len, dtype=torch.float, device=device)
        idx_theta = torch.outer(seq_idx, theta).float()
        cache = torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1)
        if dtype in (torch.float16, torch.bfloat16, torch.int8):
            cache = cache.bfloat16() if dtype == torch.bfloat16 else cache.half()
        return cache

    def forward(self, max_seq_len, offset=0):
        return self.forward_impl(max_seq_len, self.dim, dtype=self.inv_freq.dtype, device=self.inv_freq.device)


@torch.jit.script
def apply_rotary_pos_emb(x: torch.Tensor, rope_cache: torch.Tensor) -> torch.Tensor:
    # x: [sq, b, np, hn]
    sq, b, np, hn = x.size(0), x.size(1), x.size(2), x.size(3)
    rot_dim = rope_cache.shape[-2] * 2
    x, x_pass = x[..., :rot_dim], x[..., rot_dim:]
    rope_cache = rope_cache[:sq]
    xshaped = x.reshape(sq, -1, np, rot_dim // 2, 2)
    rope_cache = rope_cache.view(sq, -1, 1, xshaped.size(3), 2)
    x_out2 = torch.stack(
        [
            xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
            xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1],
        ],
        -1,
    )
    x_out2 = x_out2.flatten(3)
    return torch.cat((x_out2, x_pass), dim=-1)


class RMSNorm(torch.nn.Module):
    def __init__(self, normalized_shape, eps=1e-5, device=None, dtype=None, **kwargs):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(normalized_shape, device=device, dtype=dtype))
        self.eps = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return (self.weight * hidden_states).to(input_dtype)


def _config_to_kwargs(args):
    return {"dtype": args.torch_dtype}


class CoreAttention(torch.nn.Module):
    def __init__(self, config: ChatGLMConfig, layer_number):
        super().__init__()
        self.hidden_size_per_partition = config.kv_channels * config.num_attention_heads

    def forward(self, query_layer, key_layer, value_layer, attention_mask):
        query_layer, key_layer, value_layer = [k.permute(1, 2, 0, 3) for k in [query_layer, key_layer, value_layer]]
        if attention_mask is None and query_layer.shape[2] == key_layer.shape[2]:
            context_layer = torch.nn.functional.scaled_dot_product_attention(query_layer, key_layer, value_layer,
                                                                             is_causal=True)
        else:
            if attention_mask is not None:
                attention_mask = ~attention_mask
            context_layer = torch.nn.functional.scaled_dot_product_attention(query_layer, key_layer, value_layer,
                                                                             attention_mask)
        context_layer = context_layer.permute(2, 0, 1, 3)
        new_context_layer_shape = context_layer.size()[:-2] + (self.hidden_size_per_partition,)
        return context_layer.reshape(*new_context_layer_shape)


class SelfAttention(torch.nn.Module):
    def __init__(self, config: ChatGLMConfig, layer_number, device=None):
        super().__init__()
        self.projection_size = config.kv_channels * config.num_attention_heads
        self.hidden_size_per_attention_head = self.projection_size // config.num_attention_heads
        self.num_attention_heads_per_partition = config.num_attention_heads
        self.multi_query_attention = config.multi_query_attention
        self.qkv_hidden_size = 3 * self.projection_size
        if self.multi_query_attention:
            self.num_multi_query_groups_per_partition = config.multi_query_group_num
            self.qkv_hidden_size = self.projection_size + 2 * self.hidden_size_per_attention_head * \\
                config.multi_query_group_num
        self.query_key_value = nn.Linear(config.hidden_size, self.qkv_hidden_size,
                                         bias=config.add_bias_linear or config.add_qkv_bias, device=device,
                                         **_config_to_kwargs(config))
        self.core_attention = CoreAttention(config, layer_number)
        self.dense = nn.Linear(self.projection_size, config.hidden_size, bias=config.add_bias_linear, device=device,
                               **_config_to_kwargs(config))

    def forward(self, hidden_states, attention_mask, rotary_pos_emb, kv_cache=None, use_cache=True):
        mixed_x_layer = self.query_key_value(hidden_states)  # [sq, b, h] -> [sq, b, qkv]
        heads, groups, hn = (self.num_attention_heads_per_partition, self.num_multi_query_groups_per_partition,
                             self.hidden_size_per_attention_head)
        query_layer, key_layer, value_layer = mixed_x_layer.split([heads * hn, groups * hn, groups * hn], dim=-1)
        query_layer = query_layer.view(query_layer.size()[:-1] + (heads, hn))
        key_layer = key_layer.view(key_layer.size()[:-1] + (groups, hn))
        value_layer = value_layer.view(value_layer.size()[:-1] + (groups, hn))
        if rotary_pos_emb is not None:
            query_layer = apply_rotary_pos_emb(query_layer, rotary_pos_emb)
            key_layer = apply_rotary_pos_emb(key_layer, rotary_pos_emb)
        if kv_cache is not None:
            cache_k, cache_v = kv_cache
            key_layer = torch.cat((cache_k, key_layer), dim=0)
            value_layer = torch.cat((cache_v, value_layer), dim=0)
        kv_cache = (key_layer, value_layer) if use_cache else None
        key_layer = key_layer.unsqueeze(-2).expand(-1, -1, -1, heads // groups, -1)
        key_layer = key_layer.contiguous().view(key_layer.size()[:2] + (heads, hn))
        value_layer = value_layer.unsqueeze(-2).expand(-1, -1, -1, heads // groups, -1)
        value_layer = value_layer.contiguous().view(value_layer.size()[:2] + (heads, hn))
        context_layer = self.core_attention(query_layer, key_layer, value_layer, attention_mask)
        return self.dense(context_layer), kv_cache


class MLP(torch.nn.Module):
    def __init__(self, config: ChatGLMConfig, device=None):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(config.hidden_size, config.ffn_hidden_size * 2, bias=config.add_bias_linear,
                                       device=device, **_config_to_kwargs(config))

        def swiglu(x):
            x = torch.chunk(x, 2, dim=-1)
            return F.silu(x[0]) * x[1]

        self.activation_func = swiglu
        self.dense_4h_to_h = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=config.add_bias_linear,
                                       device=device, **_config_to_kwargs(config))

    def forward(self, hidden_states):
        return self.dense_4h_to_h(self.activation_func(self.dense_h_to_4h(hidden_states)))


class GLMBlock(torch.nn.Module):
    def __init__(self, config: ChatGLMConfig, layer_number, device=None):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.layernorm_epsilon, device=device,
                                       dtype=config.torch_dtype)
        self.self_attention = SelfAttention(config, layer_number, device=device)
        self.hidden_dropout = config.hidden_dropout
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.layernorm_epsilon, device=device,
                                                dtype=config.torch_dtype)
        self.mlp = MLP(config, device=device)

    def forward(self, hidden_states, attention_mask, rotary_pos_emb, kv_cache=None, use_cache=True):
        layernorm_output = self.input_layernorm(hidden_states)
        attention_output, kv_cache = self.self_attention(layernorm_output, attention_mask, rotary_pos_emb,
                                                         kv_cache=kv_cache, use_cache=use_cache)
        layernorm_input = hidden_states + F.dropout(attention_output, p=self.hidden_dropout, training=self.training)
        layernorm_output = self.post_attention_layernorm(layernorm_input)
        mlp_output = self.mlp(layernorm_output)
        output = layernorm_input + F.dropout(mlp_output, p=self.hidden_dropout, training=self.training)
        return output, kv_cache


class GLMTransformer(torch.nn.Module):
    def __init__(self, config: ChatGLMConfig, device=None):
        super().__init__()
        self.num_layers = config.num_layers
        self.layers = torch.nn.ModuleList([GLMBlock(config, i + 1, device=device) for i in range(self.num_layers)])
        self.final_layernorm = RMSNorm(config.hidden_size, eps=config.layernorm_epsilon, device=device,
                                       dtype=config.torch_dtype)
        self.gradient_checkpointing = False

    def _get_layer(self, layer_number):
        return self.layers[layer_number]

    def forward(self, hidden_states, attention_mask, rotary_pos_emb, kv_caches=None, use_cache=True,
                output_hidden_states=False):
        if not kv_caches:
            kv_caches = [None for _ in range(self.num_layers)]
        presents = () if use_cache else None
        if self.gradient_checkpointing and self.training:
            if use_cache:
                logger.warning_once("`use_cache=True` is incompatible with gradient checkpointing. "
                                    "Setting `use_cache=False`...")
                use_cache = False
        all_hidden_states = () if output_hidden_states else None
        for index in range(self.num_layers):
            if output_hidden_states:
                all_hidden_states = all_hidden_states + (hidden_states,)
            layer = self._get_layer(index)
            if self.gradient_checkpointing and self.training:
                layer_ret = torch.utils.checkpoint.checkpoint(layer, hidden_states, attention_mask, rotary_pos_emb,
                                                              kv_caches[index], use_cache)
            else:
                layer_ret = layer(hidden_states, attention_mask, rotary_pos_emb, kv_cache=kv_caches[index],
                                  use_cache=use_cache)
            hidden_states, kv_cache = layer_ret
            if use_cache:
                presents = presents + (kv_cache,)
        if output_hidden_states:
            all_hidden_states = all_hidden_states + (hidden_states,)
        hidden_states = self.final_layernorm(hidden_states)
        return hidden_states, presents, all_hidden_states, None


class ChatGLMPreTrainedModel(PreTrainedModel):
    is_parallelizable = False
    supports_gradient_checkpointing = True
    config_class = ChatGLMConfig
    base_model_prefix = "transformer"
    _no_split_modules = ["GLMBlock"]

    def _init_weights(self, module: nn.Module):
        return

    def get_masks(self, input_ids, past_key_values, padding_mask=None):
        batch_size, seq_length = input_ids.shape
        full_attention_mask = torch.ones(batch_size, seq_length, seq_length, device=input_ids.device)
        full_attention_mask.tril_()
        past_length = 0
        if past_key_values:
            past_length = past_key_values[0][0].shape[0]
        if past_length:
            full_attention_mask = torch.cat((torch.ones(batch_size, seq_length, past_length,
                                                        device=input_ids.device), full_attention_mask), dim=-1)
        if padding_mask is not None:
            full_attention_mask = full_attention_mask * padding_mask.unsqueeze(1)
        if not past_length and padding_mask is not None:
            full_attention_mask -= padding_mask.unsqueeze(-1) - 1
        full_attention_mask = (full_attention_mask < 0.5).bool()
        full_attention_mask.unsqueeze_(1)
        return full_attention_mask

    def get_position_ids(self, input_ids, device):
        batch_size, seq_length = input_ids.shape
        return torch.arange(seq_length, dtype=torch.long, device=device).unsqueeze(0).repeat(batch_size, 1)

    def _set_gradient_checkpointing(self, module, value=False):
        if isinstance(module, GLMTransformer):
            module.gradient_checkpointing = value


class Embedding(torch.nn.Module):
    def __init__(self, config: ChatGLMConfig, device=None):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.word_embeddings = nn.Embedding(config.padded_vocab_size, self.hidden_size, dtype=config.torch_dtype,
                                            device=device)
        self.fp32_residual_connection = config.fp32_residual_connection

    def forward(self, input_ids):
        embeddings = self.word_embeddings(input_ids)
        embeddings = embeddings.transpose(0, 1).contiguous()  # [b s h] --> [s b h]
        if self.fp32_residual_connection:
            embeddings = embeddings.float()
        return embeddings


class ChatGLMModel(ChatGLMPreTrainedModel):
    def __init__(self, config: ChatGLMConfig, device=None, empty_init=True):
        super().__init__(config)
        init_method = skip_init if empty_init else default_init
        init_kwargs = {}
        if device is not None:
            init_kwargs["device"] = device
        self.embedding = init_method(Embedding, config, **init_kwargs)
        self.num_layers = config.num_layers
        self.multi_query_group_num = config.multi_query_group_num
        self.kv_channels = config.kv_channels
        self.seq_length = config.seq_length
        rotary_dim = config.hidden_size // config.num_attention_heads if config.kv_channels is None \\
            else config.kv_channels
        self.rotary_pos_emb = RotaryEmbedding(rotary_dim // 2, original_impl=config.original_rope, device=device,
                                              dtype=config.torch_dtype)
        self.encoder = init_method(GLMTransformer, config, **init_kwargs)
        self.output_layer = init_method(nn.Linear, config.hidden_size, config.padded_vocab_size, bias=False,
                                        dtype=config.torch_dtype, **init_kwargs)
        self.pre_seq_len = config.pre_seq_len
        self.prefix_projection = config.prefix_projection
        if self.pre_seq_len is not None:
            for param in self.parameters():
                param.requires_grad = False
            self.prefix_tokens = torch.arange(self.pre_seq_len).long()
            self.prefix_encoder = PrefixEncoder(config)
            self.dropout = torch.nn.Dropout(0.1)

    def get_input_embeddings(self):
        return self.embedding.word_embeddings

    def get_prompt(self, batch_size, device, dtype=torch.half):
        prefix_tokens = self.prefix_tokens.unsqueeze(0).expand(batch_size, -1).to(device)
        past_key_values = self.prefix_encoder(prefix_tokens).type(dtype)
        past_key_values = past_key_values.view(batch_size, self.pre_seq_len, self.num_layers * 2,
                                               self.multi_query_group_num, self.kv_channels)
        past_key_values = self.dropout(past_key_values)
        past_key_values = past_key_values.permute([2, 1, 0, 3, 4]).split(2)
        return past_key_values

    def forward(self, input_ids, position_ids=None, attention_mask=None, full_attention_mask=None,
                past_key_values=None, inputs_embeds=None, use_cache=None, output_hidden_states=None,
                return_dict=None):
        output_hidden_states = output_hidden_states if output_hidden_states is not None \\
            else self.config.output_hidden_states
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        return_dict = return_dict if return_dict is not None else self.config.use_return_dict
        batch_size, seq_length = input_ids.shape
        if inputs_embeds is None:
            inputs_embeds = self.embedding(input_ids)
        if self.pre_seq_len is not None:
            if past_key_values is None:
                past_key_values = self.get_prompt(batch_size=batch_size, device=input_ids.device,
                                                  dtype=inputs_embeds.dtype)
            if attention_mask is not None:
                attention_mask = torch.cat([attention_mask.new_ones((batch_size, self.pre_seq_len)),
                                            attention_mask], dim=-1)
        if full_attention_mask is None:
            if (attention_mask is not None and not attention_mask.all()) or (past_key_values and seq_length != 1):
                full_attention_mask = self.get_masks(input_ids, past_key_values, padding_mask=attention_mask)
        rotary_pos_emb = self.rotary_pos_emb(self.seq_length)
        if position_ids is not None:
            rotary_pos_emb = rotary_pos_emb[position_ids]
        else:
            rotary_pos_emb = rotary_pos_emb[None, :seq_length]
        rotary_pos_emb = rotary_pos_emb.transpose(0, 1).contiguous()
        hidden_states, presents, all_hidden_states, all_self_attentions = self.encoder(
            inputs_embeds, full_attention_mask, rotary_pos_emb=rotary_pos_emb, kv_caches=past_key_values,
            use_cache=use_cache, output_hidden_states=output_hidden_states)
        if not return_dict:
            return tuple(v for v in [hidden_states, presents, all_hidden_states, all_self_attentions]
                         if v is not None)
        return BaseModelOutputWithPast(last_hidden_state=hidden_states, past_key_values=presents,
                                       hidden_states=all_hidden_states, attentions=all_self_attentions)

    def quantize(self, weight_bit_width: int):
        from .quantization import quantize  # the Hub's cpm_kernels INT4/INT8 code: not part of this stand-in
        quantize(self.encoder, weight_bit_width)
        return self


class ChatGLMForConditionalGeneration(ChatGLMPreTrainedModel):
    def __init__(self, config: ChatGLMConfig, empty_init=True, device=None):
        super().__init__(config)
        self.max_sequence_length = config.max_length
        self.transformer = ChatGLMModel(config, empty_init=empty_init, device=device)
        self.config = config
        self.quantized = False
        if self.config.quantization_bit:
            self.quantize(self.config.quantization_bit, empty_init=True)

    def _update_model_kwargs_for_generation(self, outputs: ModelOutput, model_kwargs: Dict[str, Any],
                                            is_encoder_decoder: bool = False,
                                            standardize_cache_format: bool = False) -> Dict[str, Any]:
        model_kwargs["past_key_values"] = outputs.past_key_values
        if "attention_mask" in model_kwargs:
            attention_mask = model_kwargs["attention_mask"]
            model_kwargs["attention_mask"] = torch.cat(
                [attention_mask, attention_mask.new_ones((attention_mask.shape[0], 1))], dim=-1)
        if "position_ids" in model_kwargs:
            position_ids = model_kwargs["position_ids"]
            new_position_id = position_ids[..., -1:].clone()
            new_position_id += 1
            model_kwargs["position_ids"] = torch.cat([position_ids, new_position_id], dim=-1)
        model_kwargs["is_first_forward"] = False
        return model_kwargs

    def prepare_inputs_for_generation(self, input_ids, past_key_values=None, attention_mask=None,
                                      position_ids=None, use_cache=None, is_first_forward=True, **kwargs):
        if position_ids is None:
            position_ids = self.get_position_ids(input_ids, device=input_ids.device)
        if not is_first_forward:
            if past_key_values is not None:
                position_ids = position_ids[..., -1:]
                input_ids = input_ids[:, -1:]
        return {"input_ids": input_ids, "past_key_values": past_key_values, "position_ids": position_ids,
                "attention_mask": attention_mask, "return_last_logit": True, "use_cache": use_cache}

    def forward(self, input_ids=None, position_ids=None, attention_mask=None, past_key_values=None,
                inputs_embeds=None, labels=None, use_cache=None, output_attentions=None, output_hidden_states=None,
                return_dict=None, return_last_logit=False):
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        return_dict = return_dict if return_dict is not None else self.config.use_return_dict
        transformer_outputs = self.transformer(
            input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
            past_key_values=past_key_values, inputs_embeds=inputs_embeds, use_cache=use_cache,
            output_hidden_states=output_hidden_states, return_dict=return_dict)
        hidden_states = transformer_outputs[0]
        if return_last_logit:
            hidden_states = hidden_states[-1:]
        lm_logits = self.transformer.output_layer(hidden_states)
        lm_logits = lm_logits.transpose(0, 1).contiguous()
        loss = None
        if labels is not None:
            lm_logits = lm_logits.to(torch.float32)
            shift_logits = lm_logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1),
                                   ignore_index=-100)
            lm_logits = lm_logits.to(hidden_states.dtype)
            loss = loss.to(hidden_states.dtype)
        if not return_dict:
            output = (lm_logits,) + transformer_outputs[1:]
            return ((loss,) + output) if loss is not None else output
        return CausalLMOutputWithPast(loss=loss, logits=lm_logits, past_key_values=transformer_outputs.past_key_values,
                                      hidden_states=transformer_outputs.hidden_states,
                                      attentions=transformer_outputs.attentions)

    @staticmethod
    def _reorder_cache(past, beam_idx):
        return tuple((layer_past[0].index_select(1, beam_idx.to(layer_past[0].device)),
                      layer_past[1].index_select(1, beam_idx.to(layer_past[1].device))) for layer_past in past)

    def process_response(self, response):
        response = response.strip()
        response = response.replace("[[训练时间]]", "2023年")
        return response

    def build_inputs(self, tokenizer, query: str, history: List[Tuple[str, str]] = None):
        prompt = tokenizer.build_prompt(query, history=history)
        inputs = tokenizer([prompt], return_tensors="pt")
        inputs = inputs.to(self.device)
        return inputs

    def build_stream_inputs(self, tokenizer, query: str, history: List[Tuple[str, str]] = None):
        if history:
            prompt = "\\n\\n[Round {}]\\n\\n问：{}\\n\\n答：".format(len(history) + 1, query)
            input_ids = tokenizer.encode(prompt, add_special_tokens=False)
            input_ids = input_ids[1:]
            inputs = tokenizer.batch_encode_plus([(input_ids, None)], return_tensors="pt", add_special_tokens=False)
        else:
            prompt = "[Round {}]\\n\\n问：{}\\n\\n答：".format(len(history) + 1, query)
            inputs = tokenizer([prompt], return_tensors="pt")
        inputs = inputs.to(self.device)
        return inputs

    @torch.no_grad()
    def chat(self, tokenizer, query: str, history: List[Tuple[str, str]] = None, max_length: int = 8192,
             num_beams=1, do_sample=True, top_p=0.8, temperature=0.8, logits_processor=None, **kwargs):
        if history is None:
            history = []
        if logits_processor is None:
            logits_processor = LogitsProcessorList()
        logits_processor.append(InvalidScoreLogitsProcessor())
        gen_kwargs = {"max_length": max_length, "num_beams": num_beams, "do_sample": do_sample, "top_p": top_p,
                      "temperature": temperature, "logits_processor": logits_processor, **kwargs}
        inputs = self.build_inputs(tokenizer, query, history=history)
        outputs = self.generate(**inputs, **gen_kwargs)
        outputs = outputs.tolist()[0][len(inputs["input_ids"][0]):]
        response = tokenizer.decode(outputs)
        response = self.process_response(response)
        history = history + [(query, response)]
        return response, history

    @torch.no_grad()
    def stream_chat(self, tokenizer, query: str, history: List[Tuple[str, str]] = None, past_key_values=None,
                    max_length: int = 8192, do_sample=True, top_p=0.8, temperature=0.8, logits_processor=None,
                    return_past_key_values=False, **kwargs):
        if history is None:
            history = []
        if logits_processor is None:
            logits_processor = LogitsProcessorList()
        logits_processor.append(InvalidScoreLogitsProcessor())
        gen_kwargs = {"max_length": max_length, "do_sample": do_sample, "top_p": top_p,
                      "temperature": temperature, "logits_processor": logits_processor, **kwargs}
        if past_key_values is None and not return_past_key_values:
            inputs = self.build_inputs(tokenizer, query, history=history)
        else:
            inputs = self.build_stream_inputs(tokenizer, query, history=history)
        if past_key_values is not None:
            past_length = past_key_values[0][0].shape[0]
            if self.transformer.pre_seq_len is not None:
                past_length -= self.transformer.pre_seq_len
            inputs.position_ids += past_length
            attention_mask = inputs.attention_mask
            attention_mask = torch.cat((attention_mask.new_ones(1, past_length), attention_mask), dim=1)
            inputs["attention_mask"] = attention_mask
        for outputs in self.stream_generate(**inputs, past_key_values=past_key_values,
                                            return_past_key_values=return_past_key_values, **gen_kwargs):
            if return_past_key_values:
                outputs, past_key_values = outputs
            outputs = outputs.tolist()[0][len(inputs["input_ids"][0]):]
            response = tokenizer.decode(outputs)
            if response and response[-1] != "\\ufffd":
                response = self.process_response(response)
                new_history = history + [(query, response)]
                if return_past_key_values:
                    yield response, new_history, past_key_values
                else:
                    yield response, new_history

    @torch.no_grad()
    def stream_generate(self, input_ids, generation_config: Optional[GenerationConfig] = None,
                        logits_processor: Optional[LogitsProcessorList] = None,
                        stopping_criteria: Optional[StoppingCriteriaList] = None,
                        prefix_allowed_tokens_fn: Optional[Callable[[int, torch.Tensor], List[int]]] = None,
                        return_past_key_values=False, **kwargs):
        batch_size, input_ids_seq_length = input_ids.shape[0], input_ids.shape[-1]
        if generation_config is None:
            generation_config = self.generation_config
        generation_config = copy.deepcopy(generation_config)
        model_kwargs = generation_config.update(**kwargs)
        model_kwargs["use_cache"] = generation_config.use_cache
        bos_token_id, eos_token_id = generation_config.bos_token_id, generation_config.eos_token_id
        if isinstance(eos_token_id, int):
            eos_token_id = [eos_token_id]
        if generation_config.max_new_tokens is not None:
            generation_config.max_length = generation_config.max_new_tokens + input_ids_seq_length
        logits_processor = logits_processor if logits_processor is not None else LogitsProcessorList()
        stopping_criteria = stopping_criteria if stopping_criteria is not None else StoppingCriteriaList()
        logits_processor = self._get_logits_processor(
            generation_config=generation_config, input_ids_seq_length=input_ids_seq_length,
            encoder_input_ids=input_ids, prefix_allowed_tokens_fn=prefix_allowed_tokens_fn,
            logits_processor=logits_processor)
        stopping_criteria = self._get_stopping_criteria(generation_config=generation_config,
                                                        stopping_criteria=stopping_criteria)
        logits_warper = self._get_logits_warper(generation_config)
        unfinished_sequences = input_ids.new(input_ids.shape[0]).fill_(1)
        scores = None
        while True:
            model_inputs = self.prepare_inputs_for_generation(input_ids, **model_kwargs)
            outputs = self(**model_inputs, return_dict=True, output_attentions=False, output_hidden_states=False)
            next_token_logits = outputs.logits[:, -1, :]
            next_token_scores = logits_processor(input_ids, next_token_logits)
            next_token_scores = logits_warper(input_ids, next_token_scores)
            probs = nn.functional.softmax(next_token_scores, dim=-1)
            if generation_config.do_sample:
                next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
            else:
                next_tokens = torch.argmax(probs, dim=-1)
            input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
            model_kwargs = self._update_model_kwargs_for_generation(
                outputs, model_kwargs, is_encoder_decoder=self.config.is_encoder_decoder)
            unfinished_sequences = unfinished_sequences.mul((sum(next_tokens != i for i in eos_token_id)).long())
            if return_past_key_values:
                yield input_ids, outputs.past_key_values
            else:
                yield input_ids
            if unfinished_sequences.max() == 0 or stopping_criteria(input_ids, scores):
                break

    def quantize(self, bits: int, empty_init=False, device=None, **kwargs):
        if bits == 0:
            return
        from .quantization import quantize  # the Hub's cpm_kernels INT4/INT8 code: not part of this stand-in
        if self.quantized:
            return self
        self.quantized = True
        self.config.quantization_bit = bits
        self.transformer.encoder = quantize(self.transformer.encoder, bits, empty_init=empty_init, device=device,
                                            **kwargs)
        return self
'''

TOKENIZATION = '''\
"""A stand-in for the Hub's ChatGLM2-6B tokenizer (gauntlet scaffolding): SentencePiece plus GLM's specials."""
import os
from typing import Dict, List, Optional, Union

from sentencepiece import SentencePieceProcessor
from transformers import PreTrainedTokenizer
from transformers.tokenization_utils_base import BatchEncoding, EncodedInput
from transformers.utils import PaddingStrategy


class SPTokenizer:
    def __init__(self, model_path: str):
        assert os.path.isfile(model_path), model_path
        self.sp_model = SentencePieceProcessor(model_file=model_path)
        self.n_words: int = self.sp_model.vocab_size()
        self.bos_id: int = self.sp_model.bos_id()
        self.eos_id: int = self.sp_model.eos_id()
        self.pad_id: int = self.sp_model.unk_id()
        assert self.sp_model.vocab_size() == self.sp_model.get_piece_size()
        special_tokens = ["[MASK]", "[gMASK]", "[sMASK]", "sop", "eop"]
        self.special_tokens = {}
        self.index_special_tokens = {}
        for token in special_tokens:
            self.special_tokens[token] = self.n_words
            self.index_special_tokens[self.n_words] = token
            self.n_words += 1

    def tokenize(self, s: str):
        return self.sp_model.EncodeAsPieces(s)

    def encode(self, s: str, bos: bool = False, eos: bool = False) -> List[int]:
        t = self.sp_model.encode(s)
        if bos:
            t = [self.bos_id] + t
        if eos:
            t = t + [self.eos_id]
        return t

    def decode(self, t: List[int]) -> str:
        return self.sp_model.decode(t)

    def decode_tokens(self, tokens: List[str]) -> str:
        return self.sp_model.DecodePieces(tokens)

    def convert_token_to_id(self, token):
        if token in self.special_tokens:
            return self.special_tokens[token]
        return self.sp_model.PieceToId(token)

    def convert_id_to_token(self, index):
        if index in self.index_special_tokens or index in [self.eos_id, self.bos_id, self.pad_id] or index < 0:
            return ""
        return self.sp_model.IdToPiece(index)


class ChatGLMTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "tokenizer.model"}
    model_input_names = ["input_ids", "attention_mask", "position_ids"]

    def __init__(self, vocab_file, padding_side="left", clean_up_tokenization_spaces=False, **kwargs):
        super().__init__(padding_side=padding_side, clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                         **kwargs)
        self.name = "GLMTokenizer"
        self.vocab_file = vocab_file
        self.tokenizer = SPTokenizer(vocab_file)
        self.special_tokens = {"<bos>": self.tokenizer.bos_id, "<eos>": self.tokenizer.eos_id,
                               "<pad>": self.tokenizer.pad_id}

    def get_command(self, token):
        if token in self.special_tokens:
            return self.special_tokens[token]
        assert token in self.tokenizer.special_tokens, f"{token} is not a special token for {self.name}"
        return self.tokenizer.special_tokens[token]

    @property
    def unk_token(self) -> str:
        return "<unk>"

    @property
    def pad_token(self) -> str:
        return "<unk>"

    @property
    def pad_token_id(self):
        return self.get_command("<pad>")

    @property
    def eos_token(self) -> str:
        return "</s>"

    @property
    def eos_token_id(self):
        return self.get_command("<eos>")

    @property
    def vocab_size(self):
        return self.tokenizer.n_words

    def get_vocab(self):
        vocab = {self._convert_id_to_token(i): i for i in range(self.vocab_size)}
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text, **kwargs):
        return self.tokenizer.tokenize(text)

    def _convert_token_to_id(self, token):
        return self.tokenizer.convert_token_to_id(token)

    def _convert_id_to_token(self, index):
        return self.tokenizer.convert_id_to_token(index)

    def convert_tokens_to_string(self, tokens: List[str]) -> str:
        return self.tokenizer.decode_tokens(tokens)

    def save_vocabulary(self, save_directory, filename_prefix=None):
        if os.path.isdir(save_directory):
            vocab_file = os.path.join(save_directory, self.vocab_files_names["vocab_file"])
        else:
            vocab_file = save_directory
        with open(self.vocab_file, "rb") as fin:
            proto_str = fin.read()
        with open(vocab_file, "wb") as writer:
            writer.write(proto_str)
        return (vocab_file,)

    def get_prefix_tokens(self):
        return [self.get_command("[gMASK]"), self.get_command("sop")]

    def build_prompt(self, query, history=None):
        if history is None:
            history = []
        prompt = ""
        for i, (old_query, response) in enumerate(history):
            prompt += "[Round {}]\\n\\n问：{}\\n\\n答：{}\\n\\n".format(i + 1, old_query, response)
        prompt += "[Round {}]\\n\\n问：{}\\n\\n答：".format(len(history) + 1, query)
        return prompt

    def build_inputs_with_special_tokens(self, token_ids_0: List[int], token_ids_1: Optional[List[int]] = None):
        prefix_tokens = self.get_prefix_tokens()
        token_ids_0 = prefix_tokens + token_ids_0
        if token_ids_1 is not None:
            token_ids_0 = token_ids_0 + token_ids_1 + [self.get_command("<eos>")]
        return token_ids_0

    def _pad(self, encoded_inputs: Union[Dict[str, EncodedInput], BatchEncoding], max_length: Optional[int] = None,
             padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD, pad_to_multiple_of: Optional[int] = None,
             return_attention_mask: Optional[bool] = None) -> dict:
        assert self.padding_side == "left"
        required_input = encoded_inputs[self.model_input_names[0]]
        seq_length = len(required_input)
        if padding_strategy == PaddingStrategy.LONGEST:
            max_length = len(required_input)
        if max_length is not None and pad_to_multiple_of is not None and (max_length % pad_to_multiple_of != 0):
            max_length = ((max_length // pad_to_multiple_of) + 1) * pad_to_multiple_of
        needs_to_be_padded = padding_strategy != PaddingStrategy.DO_NOT_PAD and len(required_input) != max_length
        if "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1] * seq_length
        if "position_ids" not in encoded_inputs:
            encoded_inputs["position_ids"] = list(range(seq_length))
        if needs_to_be_padded:
            difference = max_length - len(required_input)
            if "attention_mask" in encoded_inputs:
                encoded_inputs["attention_mask"] = [0] * difference + encoded_inputs["attention_mask"]
            if "position_ids" in encoded_inputs:
                encoded_inputs["position_ids"] = [0] * difference + encoded_inputs["position_ids"]
            encoded_inputs[self.model_input_names[0]] = [self.pad_token_id] * difference + required_input
        return encoded_inputs
'''

QUANTIZATION = '''\
"""A stand-in for the Hub's quantization.py (gauntlet scaffolding): the Hub's INT4/INT8 kernels are cpm_kernels CUDA
code; the recipe leaves --quantization_bit out, so nothing calls this."""


def quantize(model, weight_bit_width, empty_init=False, device=None, **kwargs):
    raise NotImplementedError("the gauntlet's ChatGLM2 stand-in has no INT4/INT8 kernels (the Hub's cpm_kernels code)")
'''

CONTENT_KEYS = {"类型": ["裙", "裤", "上衣", "外套"], "颜色": ["白色", "黑色", "红色", "蓝色"],
                "风格": ["清新", "简约", "复古", "休闲"], "图案": ["条纹", "纯色", "印花"], "材质": ["棉", "牛仔布"]}
SUMMARY_WORDS = ["这款", "裙子", "简约", "设计", "穿着", "舒适", "清新", "自然", "时尚", "百搭", "显瘦", "气质",
                 "的", "，", "。", "面料", "柔软", "透气", "适合", "日常", "搭配", "优雅", "修身", "版型"]
CHAT_WORDS = ["你好", "请问", "今天", "天气", "怎么样", "我", "想", "去", "公园", "散步", "好的", "谢谢", "，", "。"]
CEVAL_WORDS = ["下列", "哪个", "选项", "正确", "答案", "是", "的", "计算", "结果", "为", "中国", "首都", "北京", "上海"]


def advertise(r, count):
    rows = []
    for _ in range(count):
        keys = r.sample(sorted(CONTENT_KEYS), 3)
        content = "*".join(f"{k}#{r.choice(CONTENT_KEYS[k])}" for k in keys)
        summary = "".join(r.choice(SUMMARY_WORDS) for _ in range(r.randint(8, 20)))
        rows.append({"content": content, "summary": summary})
    return rows


def ceval(r, count):
    rows = []
    for _ in range(count):
        question = "".join(r.choice(CEVAL_WORDS) for _ in range(r.randint(4, 10)))
        choices = ["".join(r.choice(CEVAL_WORDS) for _ in range(2)) for _ in range(4)]
        text = question + "\n" + "\n".join(f"{letter}. {c}" for letter, c in zip("ABCD", choices))
        rows.append({"inputs_pretokenized": text, "choices_pretokenized": [" A", " B", " C", " D"],
                     "label": r.randrange(4)})
    return rows


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

HIDDEN, HEADS, KV, GROUPS, FFN, LAYERS = 32, 4, 8, 2, 48, 2


def write_model(folder: Path, spm_model: Path) -> None:
    import shutil

    import sentencepiece
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "configuration_chatglm.py").write_text(CONFIGURATION, encoding="utf-8")
    (folder / "modeling_chatglm.py").write_text(MODELING, encoding="utf-8")
    (folder / "tokenization_chatglm.py").write_text(TOKENIZATION, encoding="utf-8")
    (folder / "quantization.py").write_text(QUANTIZATION, encoding="utf-8")
    shutil.copyfile(spm_model, folder / "tokenizer.model")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(spm_model))
    pieces = sp.get_piece_size()
    vocab = pieces + 5  # [MASK] [gMASK] [sMASK] sop eop
    config = {
        "_name_or_path": "THUDM/chatglm2-6b", "model_type": "chatglm", "architectures": ["ChatGLMModel"],
        "auto_map": {"AutoConfig": "configuration_chatglm.ChatGLMConfig",
                     "AutoModel": "modeling_chatglm.ChatGLMForConditionalGeneration",
                     "AutoModelForCausalLM": "modeling_chatglm.ChatGLMForConditionalGeneration",
                     "AutoModelForSeq2SeqLM": "modeling_chatglm.ChatGLMForConditionalGeneration"},
        "add_bias_linear": False, "add_qkv_bias": True, "apply_query_key_layer_scaling": True,
        "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0,
        "attention_softmax_in_fp32": True, "bias_dropout_fusion": True, "ffn_hidden_size": FFN,
        "fp32_residual_connection": False, "hidden_dropout": 0.0, "hidden_size": HIDDEN, "kv_channels": KV,
        "layernorm_epsilon": 1e-05, "multi_query_attention": True, "multi_query_group_num": GROUPS,
        "num_attention_heads": HEADS, "num_layers": LAYERS, "original_rope": True, "padded_vocab_size": vocab,
        "post_layer_norm": True, "rmsnorm": True, "seq_length": 1024, "use_cache": True, "torch_dtype": "float16",
        "transformers_version": "4.27.1", "tie_word_embeddings": False,
        "eos_token_id": sp.eos_id(), "pad_token_id": sp.unk_id(),
    }
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "name_or_path": "THUDM/chatglm2-6b", "remove_space": False, "do_lower_case": False,
        "tokenizer_class": "ChatGLMTokenizer",
        "auto_map": {"AutoTokenizer": ["tokenization_chatglm.ChatGLMTokenizer", None]}}, indent=2))
    # random weights in the Hub's layout. Residual channels 0 and 1 are set in the embeddings and no block writes to
    # them: channel 0 is 1.0 for every token (after the final RMSNorm about 4), channel 1 is +1.0 for the pieces that
    # hold a full stop or comma ("。", "，", which no prompt ends with) and -1.0 for every other. EOS's output row
    # reads channel 1: after a punctuation piece EOS is likely (logit about 4), after anything else it is not (about
    # -4), so no answer is empty (the P-Tuning evaluation's Rouge refuses an empty one) and each is a few tokens.
    # The punctuation rows read channel 0 (logit about 2: sampled about one token in ten, and the first greedy
    # token, so a greedy answer is two tokens); the rows of tokens that decode to nothing (specials, <unk>, <s>, a
    # bare "\u2581") read it negatively (never sampled under top-p).
    torch.manual_seed(0)
    qkv = HEADS * KV + 2 * GROUPS * KV
    stops = [i for i in range(pieces) if "。" in sp.id_to_piece(i) or "，" in sp.id_to_piece(i)]
    assert stops and sp.eos_id() not in stops, stops
    emb = torch.randn(vocab, HIDDEN) * 0.02
    emb[:, 0] = 1.0
    emb[:, 1] = -1.0
    emb[stops, 1] = 1.0
    state = {"transformer.embedding.word_embeddings.weight": emb,
             "transformer.encoder.final_layernorm.weight": torch.ones(HIDDEN)}
    for i in range(LAYERS):
        p = f"transformer.encoder.layers.{i}."
        state[p + "input_layernorm.weight"] = torch.ones(HIDDEN)
        state[p + "post_attention_layernorm.weight"] = torch.ones(HIDDEN)
        state[p + "self_attention.query_key_value.weight"] = torch.randn(qkv, HIDDEN) * 0.1
        state[p + "self_attention.query_key_value.bias"] = torch.zeros(qkv)
        dense = torch.randn(HIDDEN, HEADS * KV) * 0.02
        dense[:2] = 0.0
        state[p + "self_attention.dense.weight"] = dense
        state[p + "mlp.dense_h_to_4h.weight"] = torch.randn(2 * FFN, HIDDEN) * 0.1
        down = torch.randn(HIDDEN, FFN) * 0.02
        down[:2] = 0.0
        state[p + "mlp.dense_4h_to_h.weight"] = down
    out = torch.randn(vocab, HIDDEN) * 0.1
    out[:, :2] = 0.0
    out[sp.eos_id(), 1] = 1.0
    out[stops, 0] = 0.5
    empty = [sp.unk_id(), sp.bos_id(), *range(pieces, vocab)]
    empty += [i for i in range(pieces) if sp.id_to_piece(i) == "\u2581"]
    out[empty, 0] = -1.0
    state["transformer.output_layer.weight"] = out
    rotary = KV // 2
    state["transformer.rotary_pos_emb.inv_freq"] = 1.0 / (10000 ** (torch.arange(0, rotary, 2).float() / rotary))
    torch.save({k: v.half() for k, v in state.items()}, folder / "pytorch_model.bin")


def prepare(tree: Path) -> None:
    import shutil

    from _recipe import train_sentencepiece

    tree = Path(tree)
    root = tree / G
    r = rng(0)
    train = advertise(r, 16)
    dev = advertise(r, 2)
    questions = ceval(r, 3)
    text = "\n".join(f"{row['content']} {row['summary']}" for row in train * 4)
    text += "\n" + "\n".join("[Round 1]\n\n问：你好\n\n答：好的 " + "".join(CHAT_WORDS) for _ in range(20))
    text += "\n" + "\n".join(row["inputs_pretokenized"] + " 综上所述，ABCD中正确的选项是：A B C D" for row in questions * 4)
    spm_model = train_sentencepiece(text, root / "spm" / "tokenizer", vocab_size=200)
    model = tree / REPO_ID
    write_model(model, spm_model)
    for folder in ("ptuning", "evaluation"):  # `cd ptuning && bash train.sh`, `cd evaluation && python ...`
        shutil.rmtree(tree / folder / REPO_ID, ignore_errors=True)
        shutil.copytree(model, tree / folder / REPO_ID)

    write_jsonl(tree / "ptuning" / "AdvertiseGen" / "train.json", train)
    write_jsonl(tree / "ptuning" / "AdvertiseGen" / "dev.json", dev)
    write_jsonl(tree / "evaluation" / "CEval" / "val" / "computer_network" / "computer_network.jsonl", questions)

    import torch

    torch.manual_seed(1)  # a P-Tuning v2 checkpoint as the PrefixTrainer writes it on a GPU box: the prefix only
    prefix = {"transformer.prefix_encoder.embedding.weight": torch.randn(PRE_SEQ_LEN, LAYERS * KV * GROUPS * 2) * 0.02}
    save_cuda_checkpoint(prefix, tree / "ptuning" / "output" / "adgen-chatglm2-6b-pt-gpu" / "checkpoint-3000"
                         / "pytorch_model.bin")

    (root / "out").mkdir(parents=True, exist_ok=True)
    (root / "api_client.py").write_text(API_CLIENT, encoding="utf-8")


# Step time limits are several times a step's time on an idle machine: under the MPS emulation on the shared 2-core
# machine of round 16 (load average about 14) loading the tiny weights took 50 s instead of 3.5 s, and the first run's
# ptuning-evaluate ran past its 400 s limit (unedited, it passed in 75 s when rerun).
# ptuning/train.sh and evaluate.sh as written, scaled down by their own variables and flags (no --quantization_bit)
TRAIN = f"""cd ptuning && PRE_SEQ_LEN={PRE_SEQ_LEN} && LR=2e-2 && NUM_GPUS=2 && \\
torchrun --standalone --nnodes=1 --nproc-per-node=$NUM_GPUS main.py \\
    --do_train \\
    --train_file AdvertiseGen/train.json \\
    --validation_file AdvertiseGen/dev.json \\
    --prompt_column content \\
    --response_column summary \\
    --overwrite_cache \\
    --model_name_or_path THUDM/chatglm2-6b \\
    --output_dir output/adgen-chatglm2-6b-pt-$PRE_SEQ_LEN-$LR \\
    --overwrite_output_dir \\
    --max_source_length 16 \\
    --max_target_length 16 \\
    --per_device_train_batch_size 1 \\
    --per_device_eval_batch_size 1 \\
    --gradient_accumulation_steps 2 \\
    --predict_with_generate \\
    --max_steps 2 \\
    --logging_steps 1 \\
    --save_steps 2 \\
    --learning_rate $LR \\
    --pre_seq_len $PRE_SEQ_LEN"""


def evaluate(checkpoint: str, step: int) -> str:
    return f"""cd ptuning && PRE_SEQ_LEN={PRE_SEQ_LEN} && CHECKPOINT={checkpoint} && STEP={step} && NUM_GPUS=1 && \\
torchrun --standalone --nnodes=1 --nproc-per-node=$NUM_GPUS main.py \\
    --do_predict \\
    --validation_file AdvertiseGen/dev.json \\
    --test_file AdvertiseGen/dev.json \\
    --overwrite_cache \\
    --prompt_column content \\
    --response_column summary \\
    --model_name_or_path THUDM/chatglm2-6b \\
    --ptuning_checkpoint ./output/$CHECKPOINT/checkpoint-$STEP \\
    --output_dir ./output/$CHECKPOINT \\
    --overwrite_output_dir \\
    --max_source_length 16 \\
    --max_target_length 16 \\
    --per_device_eval_batch_size 1 \\
    --predict_with_generate \\
    --pre_seq_len $PRE_SEQ_LEN"""


STEPS = [
    Step("cli", f"printf '你好\\n请问今天天气怎么样\\nstop\\n' | python cli_demo.py > {G}/out/cli.txt 2>&1; rc=$?; "
                f"tail -c 2000 {G}/out/cli.txt; test $rc = 0 && test $(grep -c 'ChatGLM：' {G}/out/cli.txt) = 2",
         outputs=[f"{G}/out/cli.txt"], timeout=600, env=ENV),
    Step("api", f"python {G}/api_client.py", outputs=[f"{G}/out/api.json"], timeout=600, env=ENV),
    Step("ptuning-train", TRAIN,
         outputs=[f"ptuning/output/adgen-chatglm2-6b-pt-{PRE_SEQ_LEN}-2e-2/checkpoint-2/pytorch_model.bin"],
         timeout=1200, env=ENV),
    Step("ptuning-evaluate", evaluate(f"adgen-chatglm2-6b-pt-{PRE_SEQ_LEN}-2e-2", 2),
         outputs=[f"ptuning/output/adgen-chatglm2-6b-pt-{PRE_SEQ_LEN}-2e-2/generated_predictions.txt"], timeout=1200,
         env=ENV),
    Step("ptuning-evaluate-gpu", evaluate("adgen-chatglm2-6b-pt-gpu", 3000),
         outputs=["ptuning/output/adgen-chatglm2-6b-pt-gpu/generated_predictions.txt"], timeout=1200,
         env=ENV),
    Step("ceval", f"cd evaluation && python evaluate_ceval.py > ../{G}/out/ceval.txt 2>&1; rc=$?; "
                  f"tail -c 2000 ../{G}/out/ceval.txt; test $rc = 0",
         outputs=[f"{G}/out/ceval.txt"], timeout=600, env=ENV),
]
