"""Moving batches, loading checkpoints and DataLoader options per device."""
from __future__ import annotations

import copy
import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import Any, Optional

import torch

from . import _device, _dtypes, _log


def _move_tensor(t: torch.Tensor, target: torch.device, non_blocking: bool) -> torch.Tensor:
    # non_blocking only where it is known to be safe: host->CUDA copies. MPS has
    # had non_blocking copy bugs, and CPU copies are synchronous anyway.
    cast = _dtypes.mps_safe(t, target)
    return t.to(target, dtype=cast or t.dtype,
                non_blocking=non_blocking and target.type == "cuda")


def _move(obj: Any, target: torch.device, non_blocking: bool) -> Any:
    if isinstance(obj, torch.Tensor):
        return _move_tensor(obj, target, non_blocking)
    if isinstance(obj, dict):
        moved = copy.copy(obj)  # keeps the subclass (OrderedDict, defaultdict factory)
        for key, value in obj.items():
            moved[key] = _move(value, target, non_blocking)
        return moved
    if isinstance(obj, Mapping):
        items = {k: _move(v, target, non_blocking) for k, v in obj.items()}
        try:
            return type(obj)(items)
        except TypeError:
            return items
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(_move(v, target, non_blocking) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_move(v, target, non_blocking) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        moved = copy.copy(obj)
        for field in dataclasses.fields(obj):
            # object.__setattr__ also works for frozen dataclasses.
            object.__setattr__(moved, field.name,
                               _move(getattr(obj, field.name), target, non_blocking))
        return moved
    return obj


def to_device(obj: Any, non_blocking: bool = False, *,
              device: _device.DeviceLike = None) -> Any:
    """Move every tensor in a nested batch to ``device`` (default: the resolved one).

    Handles tensors, dicts (subclasses kept), other mappings, lists, tuples,
    namedtuples and dataclass instances; anything else is returned unchanged.
    CUDA: ``t.to(device, non_blocking=non_blocking)``, as the original.
    MPS: float64 tensors become float32 (one warning), non_blocking is not used.
    CPU: plain ``.to``.
    """
    return _move(obj, _device.device(device), non_blocking)


def map_location(requested: Any = None) -> Any:
    """``map_location`` for ``torch.load``; ``requested`` is the original's, if any.

    CUDA: ``requested`` unchanged (None by default), so ``torch.load`` behaves
    exactly as before.
    MPS: ``cpu``. A storage's dtype is not visible to ``map_location``, and a
    float64 storage sent to MPS raises TypeError (facts §2, §10); loading to CPU
    and letting ``load_state_dict`` / ``.to(device)`` copy into the model is safe.
    CPU / XPU: the resolved device.
    Off CUDA, ``requested`` is redirected only when it names a CUDA device or the
    resolved one (``porter_runtime.device()`` in ported code); any other location
    ("cpu", a callable, a dict) is returned unchanged.
    """
    kind = _device.device_type()
    if kind == "cuda":
        return requested
    if requested is not None and _device_type_of(requested) not in ("cuda", kind):
        return requested
    if kind == "mps":
        return torch.device("cpu")
    return _device.device()


def _device_type_of(location: Any) -> Optional[str]:
    """The device type a str / torch.device location names, else None."""
    if isinstance(location, (str, torch.device)):
        try:
            return torch.device(location).type
        except RuntimeError:
            return None
    return None


def pin_memory(requested: bool = True) -> bool:
    """``requested`` on CUDA; False elsewhere (MPS pinning warns or fails, facts §6)."""
    return bool(requested) and _device.is_cuda()


def pin_memory_device(requested: str = "cuda") -> str:
    """``requested`` on CUDA; '' elsewhere (the DataLoader's 'no pinning device')."""
    return requested if _device.is_cuda() else ""


def pin_tensor(t: torch.Tensor) -> torch.Tensor:
    """``t.pin_memory()`` on CUDA; ``t`` unchanged elsewhere (pinning needs CUDA)."""
    return t.pin_memory() if _device.is_cuda() else t


def _start_method() -> str:
    """How this process would start a DataLoader worker, without fixing the start method
    (``multiprocessing.get_start_method()`` would, and a later ``set_start_method`` of
    the code's own would then raise)."""
    import multiprocessing

    chosen = multiprocessing.get_start_method(allow_none=True)
    if chosen:
        return chosen
    default = getattr(getattr(multiprocessing.context, "_default_context", None), "_default_context", None)
    name = getattr(default, "_name", None)
    return name if isinstance(name, str) else multiprocessing.get_all_start_methods()[0]


def _spawns_off_cuda(num_workers: Any) -> bool:
    """Whether a DataLoader with ``num_workers`` starts workers, with ``spawn``, off CUDA."""
    return bool(num_workers) and not _device.is_cuda() and _start_method() == "spawn"


def unguarded_workers(num_workers: Any) -> Any:
    """``num_workers`` of a DataLoader that a script starts when it is run, with no
    ``if __name__ == "__main__":`` guard around it (porter's PT403).

    CUDA, and wherever workers start with ``fork`` (Linux): ``num_workers`` as given.
    Where they start with ``spawn`` (macOS's default): 0, with one info line. A spawned
    worker re-imports the script, which would start the training again in every worker
    and fail ("An attempt has been made to start a new process before the current
    process has finished its bootstrapping phase"); with 0 the batches are loaded in the
    main process, the same batches, more slowly.
    """
    if not _spawns_off_cuda(num_workers):
        return num_workers
    _log.info_once("unguarded_workers", f"DataLoader(num_workers={num_workers}) loads in the main process: "
                   "workers start with spawn here and would re-run this unguarded script (put the code under "
                   "`if __name__ == \"__main__\":` to use workers)")
    return 0


#: What MPICH's mpiexec (Hydra) and Intel MPI give each rank: a PMI-1 connection to the
#: launcher, inherited by a spawned worker, which cannot use it.
_PMI_WIRE = ("PMI_FD", "PMI_PORT")


def mpi_workers(num_workers: Any) -> Any:
    """``num_workers`` of a DataLoader in a module that imports mpi4py (porter's PT405).

    CUDA, wherever workers start with ``fork`` (Linux), and wherever a spawned worker
    can initialise MPI: ``num_workers`` as given. Where they start with ``spawn``
    (macOS's default) in a process that MPICH's ``mpiexec`` started (``PMI_FD`` or
    ``PMI_PORT`` set) and that has imported mpi4py: 0, with one info line. A spawned
    worker imports the dataset's module again, and so mpi4py, whose ``MPI_Init`` then
    fails on the rank's PMI connection (``PMI_Init failed``, then "DataLoader worker
    exited unexpectedly"); with 0 the batches are loaded in the rank's main process,
    the same batches, more slowly.
    """
    if (not _spawns_off_cuda(num_workers) or "mpi4py" not in sys.modules
            or not any(os.environ.get(name) for name in _PMI_WIRE)):
        return num_workers
    _log.info_once("mpi_workers", f"DataLoader(num_workers={num_workers}) loads in the main process: workers "
                   "start with spawn here, and each would import mpi4py and fail in MPI_Init on this MPICH "
                   "rank's PMI connection")
    return 0


def dataloader_kwargs(**kwargs: Any) -> dict[str, Any]:
    """DataLoader keyword arguments made valid for this device and worker count.

    CUDA: ``pin_memory`` and ``pin_memory_device`` are kept as given.
    MPS / CPU: ``pin_memory`` becomes False and ``pin_memory_device`` is dropped.
    Everywhere: with ``num_workers == 0`` (the default) ``persistent_workers`` and
    ``prefetch_factor`` are dropped, since DataLoader raises ValueError for them;
    on CUDA that combination would have raised, so no working call changes.
    """
    out = dict(kwargs)
    if "pin_memory" in out:
        out["pin_memory"] = pin_memory(out["pin_memory"])
    if "pin_memory_device" in out and not _device.is_cuda():
        del out["pin_memory_device"]
    if not out.get("num_workers", 0):
        out.pop("persistent_workers", None)
        out.pop("prefetch_factor", None)
    return out
