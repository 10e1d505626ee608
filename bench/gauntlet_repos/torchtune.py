"""torchtune's own `tune run` recipes on the Llama 3.2 1B configs, scaled down by the configs' own command-line
overrides (OmegaConf dotlist, as its README and config headers show): the model component swapped for the
llama3_2 / lora_llama3_2 builders the 1B model is made from, with 2 layers, width 64 and a 512-token
vocabulary; the tokenizer a tiny tiktoken BPE file (the 256 single bytes) with the Llama 3 special tokens at ids
256-269, given by the builder's own special_tokens_path (an HF tokenizer.json's added_tokens); the Alpaca data set read from a local JSON
file through the dataset builder's own `source`/`data_files` arguments; 2 steps of batch 2, sequences cut to 64.

Weights: a random HF-format Llama 3.2 checkpoint (config.json + pytorch_model.bin), written as on a CUDA machine
(storages tagged cuda:0), read by the configs' FullModelHFCheckpointer.

Steps: full_finetune_single_device (llama3_2/1B_full_single_device: bf16, bitsandbytes PagedAdamW8bit,
optimizer in backward); a 2-process full_finetune_distributed (llama3_2/1B_full: FSDP2, fused AdamW); a
2-process lora_finetune_distributed (llama3_2/1B_lora). `device: cuda` stays as the configs set it."""

import base64
import json
from pathlib import Path

from _recipe import Step, rng, save_cuda_checkpoint

G = "_gauntlet"
ENV = {"PYTHONPATH": "{tree}", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
       "TOKENIZERS_PARALLELISM": "false", "HF_HOME": "{tree}/" + G + "/hf"}
TUNE = "python -m torchtune._cli.tune run"
DIMS = ("vocab_size=512 model.num_layers=2 model.num_heads=4 model.num_kv_heads=2 model.embed_dim=64 "
        "model.max_seq_len=256 model.intermediate_dim=128")
COMMON = (f"tokenizer.path={G}/tokenizer.model tokenizer.special_tokens_path={G}/tokenizer.json tokenizer.max_seq_len=64 "
          f"dataset.source=json dataset.data_files={G}/data/alpaca.json "
          f"checkpointer.checkpoint_dir={G}/ckpt checkpointer.checkpoint_files=[pytorch_model.bin] "
          "batch_size=2 epochs=1 max_steps_per_epoch=2 gradient_accumulation_steps=1 seed=0")
VAL = f"dataset_val.source=json dataset_val.data_files={G}/data/alpaca.json"  # the distributed configs' validation set
FULL = f"model._component_=torchtune.models.llama3_2.llama3_2 model.{DIMS}"
LORA = f"model._component_=torchtune.models.llama3_2.lora_llama3_2 model.{DIMS} model.lora_rank=8 model.lora_alpha=16"


def prepare(tree: Path) -> None:
    import torch

    g = tree / G
    (g / "data").mkdir(parents=True, exist_ok=True)
    # tiktoken BPE file: base64 token, rank; the 256 single bytes
    (g / "tokenizer.model").write_text(
        "".join(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256)))
    special = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
               "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
               "<|eot_id|>", "<|python_tag|>", "<|image|>", "<|video|>", "<|reserved_special_token_245|>"]
    (g / "tokenizer.json").write_text(json.dumps(
        {"added_tokens": [{"id": 256 + i, "content": t, "special": True} for i, t in enumerate(special)]}))
    words = ("the model learns a small function of its inputs and writes loss to the log while data flows "
             "through layers of attention and weights").split()
    r = rng(0)
    rows = [{"instruction": " ".join(r.choice(words) for _ in range(8)),
             "input": " ".join(r.choice(words) for _ in range(4)) if i % 2 else "",
             "output": " ".join(r.choice(words) for _ in range(10))} for i in range(64)]
    (g / "data" / "alpaca.json").write_text(json.dumps(rows))
    # a random HF-format Llama 3.2 checkpoint, tied embeddings, saved as on a CUDA machine
    vocab, dim, heads, kv, inter, layers = 512, 64, 4, 2, 128, 2
    hd = dim // heads
    torch.manual_seed(0)
    sd = {"model.embed_tokens.weight": torch.randn(vocab, dim) * 0.02, "model.norm.weight": torch.ones(dim)}
    for i in range(layers):
        p = f"model.layers.{i}."
        sd[p + "self_attn.q_proj.weight"] = torch.randn(heads * hd, dim) * 0.02
        sd[p + "self_attn.k_proj.weight"] = torch.randn(kv * hd, dim) * 0.02
        sd[p + "self_attn.v_proj.weight"] = torch.randn(kv * hd, dim) * 0.02
        sd[p + "self_attn.o_proj.weight"] = torch.randn(dim, heads * hd) * 0.02
        sd[p + "mlp.gate_proj.weight"] = torch.randn(inter, dim) * 0.02
        sd[p + "mlp.up_proj.weight"] = torch.randn(inter, dim) * 0.02
        sd[p + "mlp.down_proj.weight"] = torch.randn(dim, inter) * 0.02
        sd[p + "input_layernorm.weight"] = torch.ones(dim)
        sd[p + "post_attention_layernorm.weight"] = torch.ones(dim)
    sd = {k: v.to(torch.bfloat16) for k, v in sd.items()}
    save_cuda_checkpoint(sd, g / "ckpt" / "pytorch_model.bin")
    (g / "ckpt" / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim, "intermediate_size": inter,
        "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": layers, "head_dim": hd,
        "vocab_size": vocab, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "bos_token_id": 256, "eos_token_id": 265}))


STEPS = [
    Step("full-single", f"{TUNE} full_finetune_single_device --config llama3_2/1B_full_single_device "
                        f"output_dir={G}/out-single {FULL} {COMMON}",
         outputs=[f"{G}/out-single/epoch_0/*.safetensors"], env=ENV, timeout=300),
    Step("full-fsdp2", f"{TUNE} --nproc_per_node 2 full_finetune_distributed --config llama3_2/1B_full "
                       f"output_dir={G}/out-fsdp {FULL} {COMMON} {VAL}",
         outputs=[f"{G}/out-fsdp/epoch_0/*.safetensors"], env=ENV, timeout=300),
    Step("lora-fsdp2", f"{TUNE} --nproc_per_node 2 lora_finetune_distributed --config llama3_2/1B_lora "
                       f"output_dir={G}/out-lora {LORA} {COMMON} {VAL}",
         outputs=[f"{G}/out-lora/epoch_0/adapter_model.*"], env=ENV, timeout=300),
]
