"""Hugging Face options that only CUDA honours, chosen where the code runs.

Each helper returns the caller's value unchanged on CUDA (where the original ran), so
a ported ``from_pretrained(...)`` / ``TrainingArguments(...)`` means the same there.
"""
from __future__ import annotations

from typing import Optional, TypeVar

from .. import _device
from . import libs as _thirdparty_libs

T = TypeVar("T")

#: attn_implementation values that need the flash_attn package (and CUDA).
_FLASH = frozenset({"flash_attention_2", "flash_attention_3"})
_MODULE = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def attn_implementation(name: str) -> str:
    """``name`` on CUDA where its package imports (``flash_attention_2`` needs flash_attn,
    ``flash_attention_3`` flash_attn_interface); ``"sdpa"`` for those elsewhere, since
    transformers refuses flash attention without them. Other names are returned as given."""
    if name not in _FLASH:
        return name
    return name if _thirdparty_libs.cuda_attr(_MODULE[name], "__name__") is not None else "sdpa"


def cuda_option(value: T) -> Optional[T]:
    """``value`` on CUDA; None (the option's default: not set) elsewhere. For options
    that only mean something on CUDA and make transformers refuse to start without it,
    such as ``TrainingArguments(tf32=True)``."""
    return value if _device.is_cuda() else None

