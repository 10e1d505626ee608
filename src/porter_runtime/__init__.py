"""porter_runtime: the device shim that ported CUDA code calls.

Exact on CUDA (every call makes the original's choice), honest on MPS and CPU:
no faked ``is_available()``, no dtype change without a one-time warning.
torch + stdlib only; importing it probes no device. See README.md.
"""
from __future__ import annotations

import importlib as _importlib
import os as _os
import sys as _sys
from typing import MutableMapping as _MutableMapping

__version__ = "0.1.0"


def _enable_mps_fallback(environ: _MutableMapping[str, str] = _os.environ,
                         modules: dict = _sys.modules, platform: str = _sys.platform) -> bool:
    """Set PYTORCH_ENABLE_MPS_FALLBACK=1 on macOS (and PORTER_EMULATE=mps) when it can
    still take effect.

    torch reads the variable once, while ``import torch`` registers the MPS
    kernels, so it is set only when torch is not imported yet, and never over a
    value the user chose. Ops MPS lacks then run on the CPU (torch warns once
    per op) instead of raising NotImplementedError.
    """
    mac = platform == "darwin" or environ.get("PORTER_EMULATE", "").strip().lower() == "mps"
    if not mac or "torch" in modules or "PYTORCH_ENABLE_MPS_FALLBACK" in environ:
        return False
    environ["PYTORCH_ENABLE_MPS_FALLBACK"] = "1"
    return True


#: True when importing porter_runtime set PYTORCH_ENABLE_MPS_FALLBACK=1.
MPS_FALLBACK_SET = _enable_mps_fallback()

#: Each public name and the module that defines it. Names are imported on first use
#: (PEP 562), so a copy vendored with only the names its repository uses still imports,
#: and ``import porter_runtime`` costs nothing until a name is used. A vendored copy's
#: table lists only the names it holds (porter's tree shaking cuts it).
_EXPORTS = {
    "GradScaler": "_amp", "amp_dtype": "_amp", "autocast": "_amp", "custom_bwd": "_amp",
    "custom_fwd": "_amp", "grad_scaler": "_amp", "cuda_amp_autocast": "_amp",
    "attention": "attn.attention", "flash_attn_version": "attn.attention", "attention_kvpacked": "attn.attention",
    "attention_qkvpacked": "attn.attention", "attention_varlen": "attn.attention",
    "attention_varlen_kvpacked": "attn.attention", "attention_varlen_qkvpacked": "attn.attention",
    "sdpa_kernel": "attn.sdpa", "flex_attention_call": "attn.flex",
    "flash_attn_forward": "attn.internals", "flash_attn_varlen_forward": "attn.internals",
    "flash_attn_backward": "attn.internals", "flash_attn_varlen_backward": "attn.internals",
    "apply_rotary_emb": "attn.flash_ops", "CrossEntropyLoss": "attn.flash_ops", "index_first_axis": "attn.flash_ops", "layer_norm_fn": "attn.flash_ops",
    "pad_input": "attn.flash_ops", "rms_norm_fn": "attn.flash_ops", "unpad_input": "attn.flash_ops",
    "as_tensor": "_cast", "double": "_cast", "double_here": "_cast", "to_dtype": "_cast", "gradcheck": "_cast", "gradgradcheck": "_cast",
    "compile": "_compile",
    "dataloader_kwargs": "_data", "map_location": "_data", "mpi_workers": "_data", "pin_memory": "_data",
    "pin_memory_device": "_data", "pin_tensor": "_data", "to_device": "_data", "unguarded_workers": "_data",
    "device": "_device", "device_option": "_device", "device_str": "_device", "device_type": "_device",
    "is_accelerator_available": "_device", "is_cuda": "_device",
    "barrier_device_ids": "_dist", "data_parallel": "_dist", "convert_sync_batchnorm": "_dist", "SyncBatchNorm": "_dist", "ddp_device_ids": "_dist", "ddp_output_device": "_dist",
    "dist_backend": "_dist", "init_process_group": "_dist", "ShardedGradScaler": "_dist",
    "fsdp_sync_module_states": "_dist", "fsdp_syncing": "_dist", "is_multiprocess_launch": "_dist",
    "mesh_device_type": "_dist",
    "collective_input": "_dist", "work_future": "_dist",
    "is_bf16_supported": "_dtypes", "supported_dtype": "_dtypes",
    "build_cuda_extension": "_extensions", "reference_path": "_extensions",
    "FlashAttention": "attn.flash_v1",
    "fa3_attention": "attn.fa3",
    "attn_implementation": "thirdparty.huggingface", "cuda_option": "thirdparty.huggingface",
    "training_arguments": "thirdparty.huggingface", "quantized_load": "thirdparty.huggingface",
    "training_arguments_class": "thirdparty.huggingface", "detectron2_config": "thirdparty.detectron2",
    "load_state_dict": "_idioms", "require_device": "_idioms", "off_device": "_idioms",
    "set_default_tensor_type": "_idioms", "legacy_tensor_type": "_idioms", "tensor_type": "_idioms",
    "max_memory_allocated": "twins.memory", "max_memory_reserved": "twins.memory",
    "mem_get_info": "twins.memory", "memory_allocated": "twins.memory", "memory_reserved": "twins.memory",
    "reset_peak_memory_stats": "twins.memory", "memory_stats": "twins.memory",
    "reset_accumulated_memory_stats": "twins.memory", "memory_summary": "twins.memory",
    "power_draw": "twins.memory", "utilization": "twins.memory", "temperature": "twins.memory",
    "clock_rate": "twins.memory",
    "AdamATan2": "thirdparty.adam_atan2", "timm_mixup": "thirdparty.timm",
    "lightning_accelerator": "thirdparty.lightning", "lightning_strategy": "thirdparty.lightning",
    "lightning_args": "thirdparty.lightning", "lightning_options": "thirdparty.lightning",
    "FusedAdam": "thirdparty.apex", "FusedLAMB": "thirdparty.apex",
    "FusedLayerNorm": "thirdparty.apex", "FusedRMSNorm": "thirdparty.apex",
    "memory_efficient_attention": "thirdparty.xformers",
    "bnb_optim": "thirdparty.bnb",
    "xformers_bias": "thirdparty.xformers_bias", "xformers_ops": "thirdparty.xformers_ops",
    "triton_stand_in": "thirdparty.triton_stand_in", "twins_stand_in": "thirdparty.libs",
    "Event": "twins.timing", "WallClockEvent": "twins.timing", "current_stream": "twins.timing", "nvtx_range": "twins.timing",
    "Stream": "twins.timing", "stream": "twins.timing", "default_stream": "twins.timing",
    "record_stream": "twins.timing", "DeviceQueue": "twins.timing",
    "nvtx_range_pop": "twins.timing", "nvtx_range_push": "twins.timing",
    "DeviceProperties": "twins.device_calls", "current_device": "twins.device_calls",
    "cuda_device": "twins.device_calls", "device_module": "twins.device_module",
    "device_count": "twins.device_calls", "device_name": "twins.device_calls",
    "empty_cache": "twins.device_calls", "get_device_properties": "twins.device_calls",
    "get_device_capability": "twins.device_calls",
    "manual_seed": "twins.device_calls", "manual_seed_all": "twins.device_calls",
    "get_rng_state": "twins.device_calls", "set_rng_state": "twins.device_calls",
    "get_rng_state_all": "twins.device_calls", "set_rng_state_all": "twins.device_calls", "fork_rng": "twins.device_calls",
    "set_device": "twins.device_calls", "synchronize": "twins.device_calls",
}
#: Names that are the module itself.
_MODULES = {"bnb_optim", "xformers_bias", "xformers_ops"}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None and not name.startswith("__") and _os.path.isfile(_os.path.join(__path__[0], "VENDORED.txt")):
        raise AttributeError(
            f"module {__name__!r} has no attribute {name!r}: a vendored copy holds only what the ported code "
            "used when porter vendored it; run `porter migrate --write` again after adding code that uses it, "
            "or vendor the whole runtime with `--full-runtime`")
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        loaded = _importlib.import_module(f".{module}", __name__)
    except ModuleNotFoundError as error:
        if not _missing(error, module):
            raise
        raise AttributeError(
            f"porter_runtime.{name} lives in {_file(module)}, which this vendored copy does not hold "
            "(porter vendors the modules the ported code uses): run `porter migrate --write` again "
            "after adding code that uses it, or vendor the whole runtime with `--full-runtime`"
        ) from None
    value = loaded if name in _MODULES else getattr(loaded, name)
    globals()[name] = value
    return value


def _missing(error: ModuleNotFoundError, module: str) -> bool:
    """Whether ``error`` says this copy lacks ``module`` (or the sub-package holding it),
    not that the module failed to import something else."""
    wanted = f"{__name__}.{module}"
    return bool(error.name) and (wanted == error.name or wanted.startswith(f"{error.name}.")) \
        and error.name.startswith(f"{__name__}.")


def _file(module: str) -> str:
    """``thirdparty.apex`` -> ``thirdparty/apex.py``: where a module of the runtime lives."""
    return module.replace(".", "/") + ".py"


def __dir__() -> list:
    return sorted(set(globals()) | set(_EXPORTS))


def _reset() -> None:
    """Forget every cached decision (device, flash_attn import, one-time messages).

    For tests that simulate another machine; not needed in user code.
    """
    for name in ("_device", "attn.attention", "thirdparty.libs"):
        module = _sys.modules.get(f"{__name__}.{name}")
        if module is not None:  # a module never imported has decided nothing yet
            module._reset()


__all__ = ["__version__", "MPS_FALLBACK_SET", *_EXPORTS]

# A copy sized to the port holds only the modules its code uses. porter fit (the peak
# memory recorder) and porter verify --emulate mps (the emulation) hand the child they run
# the modules they need in a folder named by PORTER_RUNTIME_EXTRA, searched after this one.
_extra = _os.environ.get("PORTER_RUNTIME_EXTRA", "").strip()
if _extra and _os.path.isdir(_extra) and _extra not in __path__:
    __path__.append(_extra)


def _tool_module(name: str, variable: str, tool: str):
    try:
        return _importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as exc:
        if not _missing(exc, name):
            raise
        raise ImportError(f"{variable} is set, but this copy of porter_runtime (sized to the port) has no "
                          f"{_file(name)}: run the code through `{tool}`, which supplies it, or vendor the whole "
                          "runtime (porter migrate --write --full-runtime)") from None


if _os.environ.get("PORTER_PEAK_MEMORY_FILE", "").strip():  # porter fit
    _tool_module("tools.peak", "PORTER_PEAK_MEMORY_FILE", "porter fit").install()

if _os.environ.get("PORTER_EMULATE", "").strip():  # porter verify --emulate mps; imports torch
    _tool_module("tools.emulate", "PORTER_EMULATE", "porter verify --emulate mps").install()
