"""Twins of torch.cuda's memory statistics.

CUDA: forwarded verbatim. MPS: torch.mps counters, and the torch.accelerator
peak statistics where this torch has them for MPS (they raise an internal
assert on 2.9-2.12, facts §1). CPU: torch keeps no CPU allocator statistics,
so the neutral result 0 is returned (documented, never an error).
"""
from __future__ import annotations

import os

import torch

from .._compat import mps_accelerator as _mps_accelerator
from .device_calls import Dev, _forward, _on_mps


def memory_allocated(device: Dev = None) -> int:
    """Bytes held by tensors. CUDA: torch.cuda.memory_allocated(device).
    MPS: torch.mps.current_allocated_memory(). CPU: 0."""
    mod = _forward()
    if mod is not None:
        return int(mod.memory_allocated(device))
    return int(torch.mps.current_allocated_memory()) if _on_mps() else 0


def max_memory_allocated(device: Dev = None) -> int:
    """Peak bytes held by tensors. CUDA: torch.cuda.max_memory_allocated(device).
    MPS: torch.accelerator.max_memory_allocated() where supported, else 0. CPU: 0."""
    mod = _forward()
    if mod is not None:
        return int(mod.max_memory_allocated(device))
    return int(_mps_accelerator("max_memory_allocated", 0)) if _on_mps() else 0


def memory_reserved(device: Dev = None) -> int:
    """Bytes reserved by the allocator. CUDA: torch.cuda.memory_reserved(device).
    MPS: torch.mps.driver_allocated_memory(). CPU: 0."""
    mod = _forward()
    if mod is not None:
        return int(mod.memory_reserved(device))
    return int(torch.mps.driver_allocated_memory()) if _on_mps() else 0


def max_memory_reserved(device: Dev = None) -> int:
    """Peak reserved bytes. CUDA: torch.cuda.max_memory_reserved(device).
    MPS: torch.accelerator.max_memory_reserved() where supported, else 0. CPU: 0."""
    mod = _forward()
    if mod is not None:
        return int(mod.max_memory_reserved(device))
    return int(_mps_accelerator("max_memory_reserved", 0)) if _on_mps() else 0


def reset_peak_memory_stats(device: Dev = None) -> None:
    """Reset the peaks. CUDA: torch.cuda.reset_peak_memory_stats(device).
    MPS: torch.accelerator.reset_peak_memory_stats() where supported. CPU: no-op."""
    mod = _forward()
    if mod is not None:
        mod.reset_peak_memory_stats(device)
    elif _on_mps():
        _mps_accelerator("reset_peak_memory_stats", None)


def _cpu_mem_info() -> tuple[int, int]:
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return page * os.sysconf("SC_AVPHYS_PAGES"), page * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0, 0


def _mps_mem_info() -> tuple[int, int]:
    info = _mps_accelerator("get_memory_info", None)
    if info is not None:
        return int(info[0]), int(info[1])
    # Estimate from the working-set limit Metal recommends for this process.
    total = int(torch.mps.recommended_max_memory())
    return max(total - int(torch.mps.driver_allocated_memory()), 0), total


def mem_get_info(device: Dev = None) -> tuple[int, int]:
    """(free, total) bytes. CUDA: torch.cuda.mem_get_info(device).
    MPS: torch.accelerator.get_memory_info(), or (recommended max - driver allocated,
    recommended max). CPU: (available RAM, physical RAM), (0, 0) where unknown."""
    mod = _forward()
    if mod is not None:
        free, total = mod.mem_get_info(device)
        return int(free), int(total)
    return _mps_mem_info() if _on_mps() else _cpu_mem_info()


class MemoryStats(dict):
    """What ``memory_stats()`` returns off CUDA: the keys torch.cuda.memory_stats names
    for allocated, reserved and active bytes ("allocated_bytes.all.peak", ...) from the
    counters above, and 0 for any other key ("num_ooms", "num_alloc_retries", a pool's
    counters), as a CUDA allocator that saw no such event reports them."""

    def __missing__(self, key: str) -> int:
        return 0


def memory_stats(device: Dev = None) -> dict:
    """CUDA: torch.cuda.memory_stats(device). Elsewhere a MemoryStats: the CUDA keys
    for allocated, reserved and active bytes (current and peak) from this device's
    counters (0 on the CPU), and 0 for every other key; torch.cuda.memory_stats returns
    {} there, so ``stats["active_bytes.all.peak"]`` would raise KeyError."""
    mod = _forward()
    if mod is not None:
        return mod.memory_stats(device)
    allocated, peak_allocated = memory_allocated(device), max_memory_allocated(device)
    reserved, peak_reserved = memory_reserved(device), max_memory_reserved(device)
    stats = MemoryStats()
    for kind, current, peak in (("allocated_bytes", allocated, peak_allocated),
                                ("active_bytes", allocated, peak_allocated),
                                ("reserved_bytes", reserved, peak_reserved)):
        for pool in ("all", "large_pool", "small_pool"):
            stats[f"{kind}.{pool}.current"] = current if pool == "all" else 0
            stats[f"{kind}.{pool}.peak"] = max(peak, current) if pool == "all" else 0
    stats.update(num_alloc_retries=0, num_ooms=0)
    return stats


def reset_accumulated_memory_stats(device: Dev = None) -> None:
    """CUDA: torch.cuda.reset_accumulated_memory_stats(device). Elsewhere nothing is
    accumulated: no-op."""
    mod = _forward()
    if mod is not None:
        mod.reset_accumulated_memory_stats(device)


def memory_summary(device: Dev = None, abbreviated: bool = False) -> str:
    """CUDA: torch.cuda.memory_summary(device, abbreviated). Elsewhere one line with
    the counters this device has."""
    mod = _forward()
    if mod is not None:
        return mod.memory_summary(device, abbreviated)
    return (f"porter_runtime: no CUDA caching allocator here; allocated {memory_allocated(device)} bytes "
            f"(peak {max_memory_allocated(device)}), reserved {memory_reserved(device)} bytes")


def _nvml_reading(name: str, device: Dev) -> int:
    mod = _forward()
    return int(getattr(mod, name)(device)) if mod is not None else 0


def power_draw(device: Dev = None) -> int:
    """CUDA: torch.cuda.power_draw(device) (milliwatts, through pynvml). Elsewhere 0."""
    return _nvml_reading("power_draw", device)


def utilization(device: Dev = None) -> int:
    """CUDA: torch.cuda.utilization(device) (percent). Elsewhere 0."""
    return _nvml_reading("utilization", device)


def temperature(device: Dev = None) -> int:
    """CUDA: torch.cuda.temperature(device) (degrees C). Elsewhere 0."""
    return _nvml_reading("temperature", device)


def clock_rate(device: Dev = None) -> int:
    """CUDA: torch.cuda.clock_rate(device) (MHz). Elsewhere 0."""
    return _nvml_reading("clock_rate", device)
