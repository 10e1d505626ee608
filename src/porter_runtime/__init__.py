"""porter_runtime: the device shim that ported CUDA code calls.

Exact on CUDA (every call makes the original's choice), honest on MPS and CPU:
no faked ``is_available()``, no dtype change without a one-time warning.
torch + stdlib only; importing it probes no device. See README.md.
"""
from __future__ import annotations

import os as _os
import sys as _sys
from typing import MutableMapping as _MutableMapping

__version__ = "0.1.0"


def _enable_mps_fallback(environ: _MutableMapping[str, str] = _os.environ,
                         modules: dict = _sys.modules, platform: str = _sys.platform) -> bool:
    """Set PYTORCH_ENABLE_MPS_FALLBACK=1 on macOS when it can still take effect.

    torch reads the variable once, while ``import torch`` registers the MPS
    kernels, so it is set only when torch is not imported yet, and never over a
    value the user chose. Ops MPS lacks then run on the CPU (torch warns once
    per op) instead of raising NotImplementedError.
    """
    if platform != "darwin" or "torch" in modules or "PYTORCH_ENABLE_MPS_FALLBACK" in environ:
        return False
    environ["PYTORCH_ENABLE_MPS_FALLBACK"] = "1"
    return True


#: True when importing porter_runtime set PYTORCH_ENABLE_MPS_FALLBACK=1.
MPS_FALLBACK_SET = _enable_mps_fallback()

from ._amp import GradScaler, amp_dtype, autocast, custom_bwd, custom_fwd, grad_scaler  # noqa: E402
from ._amp import cuda_amp_autocast  # noqa: E402
from ._attention import (  # noqa: E402
    attention,
    attention_kvpacked,
    attention_qkvpacked,
    attention_varlen,
    attention_varlen_kvpacked,
    attention_varlen_qkvpacked,
    sdpa_kernel,
)
from ._cast import double  # noqa: E402
from ._compile import compile  # noqa: E402
from ._data import (  # noqa: E402
    dataloader_kwargs,
    map_location,
    pin_memory,
    pin_memory_device,
    pin_tensor,
    to_device,
)
from ._device import device, device_str, device_type, is_accelerator_available  # noqa: E402
from ._dist import (  # noqa: E402
    barrier_device_ids,
    ddp_device_ids,
    ddp_output_device,
    dist_backend,
    init_process_group,
)
from ._dist import ShardedGradScaler, fsdp_sync_module_states, is_multiprocess_launch  # noqa: E402
from ._dtypes import is_bf16_supported, supported_dtype  # noqa: E402
from ._extensions import build_cuda_extension  # noqa: E402
from ._fa3 import fa3_attention  # noqa: E402
from ._huggingface import attn_implementation, cuda_option  # noqa: E402
from ._idioms import load_state_dict, require_device, set_default_tensor_type  # noqa: E402
from ._memory import (  # noqa: E402
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    reset_peak_memory_stats,
)
from ._thirdparty_adam_atan2 import AdamATan2  # noqa: E402
from ._thirdparty_apex import FusedAdam, FusedLAMB, FusedLayerNorm, FusedRMSNorm  # noqa: E402
from ._thirdparty_xformers import memory_efficient_attention  # noqa: E402
from . import _thirdparty_bnb as bnb_optim  # noqa: E402
from . import _thirdparty_xformers_bias as xformers_bias  # noqa: E402
from ._timing import Event, WallClockEvent, nvtx_range, nvtx_range_pop, nvtx_range_push  # noqa: E402
from ._twins import (  # noqa: E402
    DeviceProperties,
    current_device,
    device_count,
    device_name,
    empty_cache,
    get_device_properties,
    manual_seed,
    manual_seed_all,
    set_device,
    synchronize,
)


def _reset() -> None:
    """Forget every cached decision (device, flash_attn import, one-time messages).

    For tests that simulate another machine; not needed in user code.
    """
    from . import _attention, _device, _thirdparty_libs

    _device._reset()
    _attention._reset()
    _thirdparty_libs._reset()


__all__ = [
    "__version__", "MPS_FALLBACK_SET",
    # device
    "device", "device_str", "device_type", "is_accelerator_available", "to_device", "map_location",
    # torch.cuda twins
    "synchronize", "empty_cache", "manual_seed", "manual_seed_all", "device_count",
    "current_device", "set_device", "device_name", "get_device_properties",
    "DeviceProperties", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "mem_get_info", "Event",
    "WallClockEvent", "nvtx_range_push", "nvtx_range_pop", "nvtx_range",
    # precision
    "autocast", "GradScaler", "grad_scaler", "custom_fwd", "custom_bwd", "amp_dtype",
    "supported_dtype", "is_bf16_supported", "double",
    # attention
    "attention", "attention_qkvpacked", "attention_kvpacked", "attention_varlen",
    "attention_varlen_qkvpacked", "attention_varlen_kvpacked", "sdpa_kernel",
    # CUDA-only third-party libraries: the library on CUDA, exact torch elsewhere
    "memory_efficient_attention", "xformers_bias", "FusedAdam", "FusedLAMB",
    "FusedLayerNorm", "FusedRMSNorm", "AdamATan2", "bnb_optim",
    # compile, distributed, data
    "compile", "dist_backend", "init_process_group", "ddp_device_ids", "ddp_output_device",
    "barrier_device_ids", "is_multiprocess_launch", "fsdp_sync_module_states",
    "ShardedGradScaler", "cuda_amp_autocast", "pin_memory", "pin_memory_device", "pin_tensor",
    "dataloader_kwargs",
    # research-code idioms
    "require_device", "set_default_tensor_type", "load_state_dict",
    # FlashAttention-3, compiled extensions, Hugging Face options
    "fa3_attention", "build_cuda_extension", "attn_implementation", "cuda_option",
]

from . import _peak  # noqa: E402
_peak.install()  # does nothing unless PORTER_PEAK_MEMORY_FILE is set (porter fit)
