"""A device's torch module reached by the device's name, with torch.cuda's functions.

Code that supports several accelerators looks the module up by the device type and then
calls it as torch.cuda: torchtune's ``getattr(torch, device_type).empty_cache()``,
torchtitan's ``torch._utils._get_device_module(device_type).reset_peak_memory_stats()``,
flash-linear-attention's ``getattr(torch, device).device(index)``. Off CUDA the type is
``mps`` or ``cpu``, and torch.mps / torch.cpu lack half of those functions
(``AttributeError: module 'torch.cpu' has no attribute 'empty_cache'``).

``device_module(module)`` takes what the original lookup returned. On CUDA (and XPU,
whose module mirrors torch.cuda) it returns it unchanged. Elsewhere torch.cuda,
torch.mps and torch.cpu come back as a view of the same module whose torch.cuda
functions are the runtime's twins (the same parameters, the MPS or CPU behaviour each
documents); any other name is the module's own.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .. import _device
from . import device_calls, memory, timing

#: torch.cuda's names -> the twins that stand in for them off CUDA.
TWINS: dict[str, Callable[..., Any]] = {
    "synchronize": device_calls.synchronize, "empty_cache": device_calls.empty_cache,
    "manual_seed": device_calls.manual_seed, "manual_seed_all": device_calls.manual_seed_all,
    "device_count": device_calls.device_count, "current_device": device_calls.current_device,
    "set_device": device_calls.set_device, "device": device_calls.cuda_device,
    "get_device_name": device_calls.device_name, "get_device_properties": device_calls.get_device_properties,
    "memory_allocated": memory.memory_allocated, "max_memory_allocated": memory.max_memory_allocated,
    "memory_reserved": memory.memory_reserved, "max_memory_reserved": memory.max_memory_reserved,
    "reset_peak_memory_stats": memory.reset_peak_memory_stats, "mem_get_info": memory.mem_get_info,
    "memory_stats": memory.memory_stats, "reset_accumulated_memory_stats": memory.reset_accumulated_memory_stats,
    "memory_summary": memory.memory_summary, "Event": timing.Event,
}


class DeviceModule:
    """torch.mps, torch.cpu or torch.cuda off CUDA, answering torch.cuda's functions
    with the runtime's twins and every other name as the module itself."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        twin = TWINS.get(name)
        if twin is not None:
            return twin
        if name == "memory":  # torch.cuda.memory.max_memory_allocated(): torch.mps and torch.cpu have no submodule
            return DeviceModule(getattr(self._module, "memory", self._module))
        return getattr(self._module, name)

    def __repr__(self) -> str:
        return f"<porter_runtime.device_module of {getattr(self._module, '__name__', self._module)!r}>"


def device_module(module: Any) -> Any:
    """What ``getattr(torch, device_type)`` / ``torch.get_device_module(device)``
    returned, made to answer torch.cuda's functions where the device is not CUDA."""
    if _device.hardware_type() in ("cuda", "xpu"):
        return module
    if any(module is getattr(torch, name, None) for name in ("cuda", "mps", "cpu")):
        return DeviceModule(module)
    return module
