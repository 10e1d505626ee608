"""torch.distributed choices: NCCL and device ids on CUDA, Gloo and None elsewhere."""
from __future__ import annotations

import os
from typing import Any, Optional, TypeVar

from . import _device

T = TypeVar("T")


def dist_backend(requested: Optional[str] = None) -> str:
    """The process-group backend.

    CUDA: ``requested``, or "nccl" when None. MPS / CPU: "gloo" in place of any
    NCCL request (including "cpu:gloo,cuda:nccl" forms and None), because only
    Gloo is built there; other backends ("gloo", "mpi") are kept.
    """
    if _device.is_cuda():
        return requested or "nccl"
    if requested is None or "nccl" in requested:
        return "gloo"
    return requested


def _world_size(kwargs: dict[str, Any]) -> int:
    size = kwargs.get("world_size", -1)
    return int(size) if size not in (None, -1) else int(os.environ.get("WORLD_SIZE", "1"))


def check_launch(world_size: int) -> None:
    """Refuse a multi-process launch on MPS with a clear message (facts §7)."""
    if world_size > 1 and _device.device_type() == "mps":
        raise RuntimeError(
            f"porter_runtime: a {world_size}-process launch resolved to mps, but Gloo (the "
            "only backend on macOS) cannot communicate MPS tensors and a Mac has one GPU. "
            "Run a single process, or set PORTER_DEVICE=cpu to train multi-process on CPU.")


def init_process_group(backend: Optional[str] = None, **kwargs: Any) -> None:
    """Twin of torch.distributed.init_process_group with the backend chosen per device.

    CUDA: forwarded unchanged (backend None stays None, as in the original).
    MPS / CPU: backend from dist_backend(); an MPS multi-process launch raises.
    """
    import torch.distributed as dist  # deferred: importing it is not free

    if _device.is_cuda():
        dist.init_process_group(backend=backend, **kwargs)
        return
    check_launch(_world_size(kwargs))
    dist.init_process_group(backend=dist_backend(backend), **kwargs)


def ddp_device_ids(local_rank: int) -> Optional[list[int]]:
    """DDP ``device_ids``: ``[local_rank]`` on CUDA, None elsewhere (DDP rejects
    device ids for CPU modules, facts §7)."""
    return [local_rank] if _device.is_cuda() else None


def ddp_output_device(x: T) -> Optional[T]:
    """DDP ``output_device``: ``x`` on CUDA, None elsewhere."""
    return x if _device.is_cuda() else None


def barrier_device_ids(ids: T) -> Optional[T]:
    """``dist.barrier(device_ids=...)``: ``ids`` on CUDA, None elsewhere (NCCL only)."""
    return ids if _device.is_cuda() else None
