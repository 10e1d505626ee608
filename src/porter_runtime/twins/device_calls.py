"""Twins of torch.cuda's device, seed and memory functions.

CUDA (and XPU, whose torch.xpu mirrors torch.cuda): the call is forwarded with
the caller's arguments to the same-named function. MPS: the torch.mps twin.
CPU: a documented neutral result. Nothing here can raise "Torch not compiled
with CUDA enabled", because torch.cuda is only touched when CUDA was resolved.
"""
from __future__ import annotations

import contextlib
import os
import platform
from types import ModuleType
from typing import Any, NamedTuple, Optional

import torch

from .. import _compat, _device, _log

Dev = Any  # whatever torch.cuda accepts: None, int, str or torch.device


def _forward() -> Optional[ModuleType]:
    """torch.cuda on CUDA, torch.xpu on XPU, None where no torch.cuda-like module exists."""
    kind = _device.hardware_type()
    if kind == "cuda":
        return torch.cuda
    if kind == "xpu":
        return torch.xpu
    return None


def _on_mps() -> bool:
    """True where torch.mps can be called (not under emulation: no MPS there)."""
    return _device.hardware_type() == "mps"


def synchronize(device: Dev = None) -> None:
    """Wait for queued work. CUDA: torch.cuda.synchronize(device). MPS:
    torch.mps.synchronize() (it takes no device). CPU: no-op (CPU ops are synchronous)."""
    mod = _forward()
    if mod is not None:
        mod.synchronize(device)
    elif _on_mps():
        torch.mps.synchronize()


def empty_cache() -> None:
    """Release cached blocks. CUDA: torch.cuda.empty_cache(). MPS: torch.mps.empty_cache().
    CPU: no-op."""
    mod = _forward()
    if mod is not None:
        mod.empty_cache()
    elif _on_mps():
        torch.mps.empty_cache()


def manual_seed(seed: int) -> None:
    """Seed the device RNG. CUDA: torch.cuda.manual_seed(seed). MPS: torch.mps.manual_seed.
    CPU: torch.manual_seed(seed), because on CPU the device RNG is the CPU generator."""
    mod = _forward()
    if mod is not None:
        mod.manual_seed(seed)
    elif _on_mps():
        torch.mps.manual_seed(seed)
    else:
        torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """Seed every device RNG. CUDA: torch.cuda.manual_seed_all(seed). MPS and CPU:
    as manual_seed (one device)."""
    mod = _forward()
    if mod is not None:
        mod.manual_seed_all(seed)
    else:
        manual_seed(seed)


def get_rng_state(device: Dev = "cuda") -> torch.Tensor:
    """The device generator's state. CUDA: torch.cuda.get_rng_state(device). MPS:
    torch.mps.get_rng_state(). CPU: torch.get_rng_state(), the generator CPU ops draw from."""
    mod = _forward()
    if mod is not None:
        return mod.get_rng_state(device)
    return torch.mps.get_rng_state() if _on_mps() else torch.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device: Dev = "cuda") -> None:
    """Restore the device generator's state. CUDA: torch.cuda.set_rng_state(new_state,
    device). MPS and CPU: the state of their generator (see :func:`get_rng_state`). A state
    another kind of generator saved (a CUDA checkpoint's, resumed on a Mac) can't be
    restored there: it is left, with a warning, as resuming on another device can't
    reproduce the CUDA run's random numbers anyway."""
    mod = _forward()
    if mod is not None:
        mod.set_rng_state(new_state, device)
        return
    try:
        torch.mps.set_rng_state(new_state) if _on_mps() else torch.set_rng_state(new_state)
    except (RuntimeError, ValueError) as exc:
        _log.warn_once("set_rng_state", "porter_runtime: this generator state was saved by another kind of "
                       f"device (a CUDA checkpoint's?) and is not restored here: {exc}")


def get_rng_state_all() -> list:
    """Every device generator's state. CUDA: torch.cuda.get_rng_state_all(). MPS and CPU:
    one device, ``[get_rng_state()]``."""
    mod = _forward()
    return mod.get_rng_state_all() if mod is not None else [get_rng_state()]


def set_rng_state_all(new_states: Any) -> None:
    """Restore every device generator. CUDA: torch.cuda.set_rng_state_all(new_states). MPS
    and CPU: the one device's, from the first state."""
    mod = _forward()
    if mod is not None:
        mod.set_rng_state_all(new_states)
    elif len(new_states):
        set_rng_state(new_states[0])


def device_count() -> int:
    """Number of devices. CUDA: torch.cuda.device_count(). MPS: torch.mps.device_count()
    (1). CPU: 1, so ``nprocs=device_count()`` and ``n_gpu > 1`` checks stay sane.

    Off CUDA in one of several processes a launcher started on this machine
    (``LOCAL_WORLD_SIZE`` above 1, where the runtime runs each on the CPU), the local
    process count: each has a device of its own, as the launch assumed, so
    ``assert device_count() > local_rank`` holds on every rank (yolov7, blind round 5).
    The same for processes the program spawned itself once their group is made (the
    group's size: YOLOX's ``assert num_gpus_per_machine <= device_count()`` in each
    ``mp.start_processes`` worker, blind round 16)."""
    mod = _forward()
    if mod is not None:
        return int(mod.device_count())
    local = _compat.launch_world_size("LOCAL_WORLD_SIZE")
    if local > 1:
        return local
    group = _group_size()
    if group > 1:
        return group
    if _on_mps():
        return int(torch.mps.device_count())
    return 1



def _group_size() -> int:
    """The default process group's size, 1 where there is none (off CUDA one machine
    runs every process of a group the program spawned itself)."""
    return int(torch.distributed.get_world_size()) if _device._group_initialized() else 1


def current_device() -> int:
    """Index of the current device. CUDA: torch.cuda.current_device(). MPS, CPU: 0.

    An index, as on CUDA, for code that means one (``get_device_name(i)``, a rank,
    ``f"cuda:{i}"``). torch reads a bare int device as ``cuda:i``, so where ported
    code passes it as a device, porter wraps it: ``device(current_device())`` is
    ``cuda:i`` on CUDA and the resolved device elsewhere (rule PT901)."""
    mod = _forward()
    return int(mod.current_device()) if mod is not None else 0


def set_device(device: Dev) -> None:
    """Select a device. CUDA: torch.cuda.set_device(device). MPS, CPU: no-op (one device)."""
    mod = _forward()
    if mod is not None:
        mod.set_device(device)


def cuda_device(device: Dev) -> Any:
    """``with torch.cuda.device(d):``, which makes ``d`` the current device for the block.
    CUDA: torch.cuda.device(d) itself (XPU: torch.xpu.device(d)). MPS, CPU: a context
    that does nothing (one device; ``d`` is often ``x.device.index``, None there)."""
    mod = _forward()
    return mod.device(device) if mod is not None else contextlib.nullcontext()


def _cpu_name() -> str:
    return f"CPU ({platform.machine() or 'unknown'})"


def device_name(device: Dev = None) -> str:
    """Twin of torch.cuda.get_device_name(device). MPS: torch.backends.mps.get_name()
    (torch >= 2.9) or 'Apple MPS'. CPU: 'CPU (<machine>)'."""
    mod = _forward()
    if mod is not None:
        return str(mod.get_device_name(device))
    if _on_mps():
        get_name = getattr(torch.backends.mps, "get_name", None)
        return str(get_name()) if get_name is not None else "Apple MPS"
    return _cpu_name()


class DeviceProperties(NamedTuple):
    """What get_device_properties returns off CUDA. Neutral values: major=minor=0
    (no compute capability), total_memory=0 when unknown, multi_processor_count=0
    when unknown (MPS GPU core count on torch >= 2.9, CPU core count on CPU)."""

    name: str
    type: str
    total_memory: int
    multi_processor_count: int
    major: int = 0
    minor: int = 0


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def get_device_properties(device: Dev = None) -> Any:
    """CUDA: torch.cuda.get_device_properties(device). MPS: DeviceProperties with the
    recommended working-set size as total_memory. CPU: DeviceProperties with the
    physical RAM and the CPU count."""
    mod = _forward()
    if mod is not None:
        return mod.get_device_properties(device)
    if _on_mps():
        cores = getattr(torch.backends.mps, "get_core_count", lambda: 0)()
        return DeviceProperties(device_name(), "mps",
                                int(torch.mps.recommended_max_memory()), int(cores))
    return DeviceProperties(_cpu_name(), "cpu", _physical_memory(), os.cpu_count() or 0)


def get_device_capability(device: Dev = None) -> tuple[int, int]:
    """CUDA: torch.cuda.get_device_capability(device). Elsewhere ``(0, 0)``, the
    ``major`` and ``minor`` of :func:`get_device_properties` there: the device has no CUDA
    compute capability, so a test for at least one (``>= (8, 0)``, ``major >= 8``) takes
    the code's path for GPUs older than it asks for, which is the one without a kernel."""
    if _device.hardware_type() == "cuda":
        return torch.cuda.get_device_capability(device)
    return (0, 0)


def fork_rng(*args: Any, **kwargs: Any) -> Any:
    """Twin of ``torch.random.fork_rng(devices=[...])``, a context manager.

    CUDA, or a ``device_type`` other than "cuda" named by the caller: torch's, called
    with the caller's arguments. Elsewhere the device type is the resolved one: on MPS
    the MPS generator is forked beside the CPU's; on the CPU only the CPU generator (which
    ``fork_rng`` always forks). torch's own default there is "cuda" where no accelerator is
    found, and ``devices=[torch.cuda.current_device()]`` then fails on the CPU build."""
    import inspect

    bound = inspect.signature(_fork_rng_parameters).bind(*args, **kwargs)
    if _device.is_cuda() or bound.arguments.get("device_type") not in (None, "cuda"):
        return torch.random.fork_rng(*args, **kwargs)
    kind = _device.device_type()
    bound.arguments["device_type"] = kind
    if kind == "cpu":
        bound.arguments["devices"] = []
    elif bound.arguments.get("devices") is not None:
        bound.arguments["devices"] = [0] if bound.arguments["devices"] else []  # one device
    return torch.random.fork_rng(*bound.args, **bound.kwargs)


def _fork_rng_parameters(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices",
                         device_type=None):  # torch.random.fork_rng's, torch 2.1 to 2.13
    """The parameters of torch.random.fork_rng, to read a call's arguments by name."""
