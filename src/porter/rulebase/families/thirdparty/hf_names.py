"""Names of Hugging Face APIs that several rules read (TP701, TP707, TP704, TP705, TP708)."""

from __future__ import annotations

#: The loaders whose keywords the rules read (``AutoModelForCausalLM.from_pretrained``).
LOADERS = frozenset({"from_pretrained", "from_config"})
#: ``attn_implementation`` values that need flash-attn (and CUDA).
FLASH = frozenset({"flash_attention_2", "flash_attention_3"})
#: transformers' and TRL's argument dataclasses, which refuse CUDA-only options off CUDA.
TRAINING_ARGS = frozenset({
    "transformers.TrainingArguments", "transformers.Seq2SeqTrainingArguments",
    "transformers.training_args.TrainingArguments", "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
    "trl.SFTConfig", "trl.DPOConfig", "trl.GRPOConfig", "trl.RewardConfig", "trl.ORPOConfig", "trl.KTOConfig",
})
