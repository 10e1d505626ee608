"""The emulation's machine: torch.cuda's functions, streams and events, checkpoints,
autocast, distributed and compile, as on a CUDA machine; see the package's docstring."""
from __future__ import annotations

import contextlib
import threading
import time
import types
from typing import Any, Self

import torch
from torch.utils import _pytree as pytree

from .tensors import (
    NAME,
    Generator,
    _enter_modes,
    _process,
    _real_devices,
    _set,
    cuda_index,
    current_device,
    device_count,
    generator,
    index_of,
)

# -- torch.cuda and friends ------------------------------------------------------------------

class Stream:
    """A CUDA stream: work on it is done when it is queued (the CPU runs it in order)."""

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = torch.device("cuda", current_device() if device is None else cuda_index(device))
        self.priority = priority

    def wait_stream(self, stream: Any) -> None: ...
    def wait_event(self, event: Any) -> None: ...
    def synchronize(self) -> None: ...

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:  # no CUDA graph is ever being captured
        return False

    def record_event(self, event: Any = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None: ...


class Event:
    """A CUDA event: recorded at the moment it is queued; ``elapsed_time`` in milliseconds."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 **kwargs: Any) -> None:
        self.enable_timing, self._at = enable_timing, None

    def record(self, stream: Any = None) -> None:
        self._at = time.perf_counter()

    def wait(self, stream: Any = None) -> None: ...
    def synchronize(self) -> None: ...

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: Event) -> float:
        if not (self.enable_timing and end.enable_timing) or self._at is None or end._at is None:
            raise RuntimeError("Both events must be recorded with enable_timing=True before elapsed_time")
        return (end._at - self._at) * 1000.0


_default_streams: dict[int, Stream] = {}


def _stream_of(device: Any = None) -> Stream:
    index = current_device() if device is None else cuda_index(device)
    return _default_streams.setdefault(index, Stream(index))


class _DeviceContext:
    """``torch.cuda.device(i)``: the current device inside."""

    def __init__(self, device: Any) -> None:
        self.index = None if device is None else cuda_index(device)
        self.before: int | None = None

    def __enter__(self) -> None:
        if self.index is not None and self.index >= 0:
            self.before, _process.device = _process.device, self.index

    def __exit__(self, *exc: object) -> None:
        if self.before is not None:
            _process.device = self.before


def set_device(device: Any) -> None:
    index = cuda_index(device)
    if index is not None and index >= 0:
        if index >= device_count():
            raise RuntimeError("CUDA error: invalid device ordinal")
        _process.device = index


def _properties(device: Any = None) -> Any:
    return types.SimpleNamespace(name=NAME, major=8, minor=0, total_memory=80 * 2**30, multi_processor_count=108,
                                 is_integrated=False, is_multi_gpu_board=False, L2_cache_size=40 * 2**20,
                                 warp_size=32, gcnArchName="", uuid="emulated")


def _seed_all(seed: int) -> None:
    for index in range(device_count()):
        generator(index).manual_seed(seed)


def _cuda_namespace() -> dict[str, Any]:
    nothing = lambda *args, **kwargs: None
    zero = lambda *args, **kwargs: 0
    return {
        "is_available": lambda: True, "device_count": device_count, "current_device": current_device,
        "set_device": set_device, "device": _DeviceContext, "device_of": lambda t: _DeviceContext(t.get_device()),
        "get_device_name": lambda device=None: NAME, "get_device_capability": lambda device=None: (8, 0),
        "get_device_properties": _properties, "get_arch_list": lambda: ["sm_80", "sm_90"],
        "is_bf16_supported": lambda including_emulation=True: True, "is_initialized": lambda: True,
        "init": nothing, "_lazy_init": nothing, "synchronize": nothing, "empty_cache": nothing,
        "ipc_collect": nothing, "set_per_process_memory_fraction": nothing,
        "memory_allocated": zero, "max_memory_allocated": zero, "memory_reserved": zero,
        "max_memory_reserved": zero, "memory_cached": zero, "max_memory_cached": zero,
        "reset_peak_memory_stats": nothing, "reset_max_memory_allocated": nothing,
        "reset_max_memory_cached": nothing, "reset_accumulated_memory_stats": nothing,
        "memory_stats": lambda device=None: {}, "memory_summary": lambda *a, **k: "",
        "mem_get_info": lambda device=None: (80 * 2**30, 80 * 2**30), "utilization": zero,
        "manual_seed": lambda seed: generator(current_device()).manual_seed(int(seed)),
        "manual_seed_all": lambda seed: _seed_all(int(seed)),
        "seed": lambda: generator(current_device()).seed(), "seed_all": lambda: _seed_all(torch.seed()),
        "initial_seed": lambda: generator(current_device()).initial_seed(),
        "get_rng_state": lambda device="cuda": generator(_rng_index(device)).get_state(),
        "set_rng_state": lambda state, device="cuda": generator(_rng_index(device)).set_state(state),
        "get_rng_state_all": lambda: [generator(i).get_state() for i in range(device_count())],
        "set_rng_state_all": lambda states: [generator(i).set_state(s) for i, s in enumerate(states)],
        "Stream": Stream, "Event": Event, "current_stream": _stream_of, "default_stream": _stream_of,
        "stream": lambda stream=None: contextlib.nullcontext(stream), "StreamContext": contextlib.nullcontext,
        "set_stream": nothing,
    }


def _rng_index(device: Any) -> int:
    return cuda_index(device) or 0


def _patch_cuda() -> None:
    for name, value in _cuda_namespace().items():
        setattr(torch.cuda, name, value)
    torch.cuda.default_generators = tuple(generator(i) for i in range(device_count()))
    for name in ("range_push", "range_pop", "mark"):
        setattr(torch.cuda.nvtx, name, lambda *args, **kwargs: 0)
    torch.cuda.nvtx.range = lambda *args, **kwargs: contextlib.nullcontext()
    torch.version.cuda = torch.version.cuda or "12.8"
    torch.backends.cuda.is_built = lambda: True
    torch.backends.cudnn.is_available = lambda: True
    torch.backends.cudnn.version = lambda: 90100
    torch.Generator = Generator
    torch.Tensor.record_stream = lambda self, stream: None  # its argument is checked before any mode sees it
    acc = torch.accelerator
    acc.current_accelerator = lambda check_available=False: torch.device("cuda", current_device())
    acc.is_available = lambda: True
    acc.device_count = device_count
    for name in ("current_device_index", "current_device_idx"):
        setattr(acc, name, current_device)
    for name in ("set_device_index", "set_device_idx"):
        setattr(acc, name, set_device)
    acc.synchronize = lambda device=None: None
    acc.current_stream = _stream_of
    acc.set_stream = lambda stream: None
    torch.cuda.is_current_stream_capturing = lambda: False


def _patch_storage() -> None:
    def cuda(self: Any, device: Any = None, non_blocking: bool = False) -> Any:
        index = current_device() if device is None else cuda_index(device)
        if isinstance(self, torch.storage.TypedStorage):
            return torch.storage.TypedStorage(wrap_storage=cuda(self._untyped_storage, device), dtype=self.dtype,
                                              _internal=True)
        if index_of(self) == index:
            return self
        out = self.clone()
        _set(out, index)
        return out

    torch.UntypedStorage.cuda = cuda
    torch.storage.TypedStorage.cuda = cuda

    def tag(storage: Any) -> str | None:
        storage = getattr(storage, "_untyped_storage", storage)
        index = index_of(storage)
        return None if index is None else f"cuda:{index}"

    def restore(storage: Any, location: str) -> Any:
        if not location.startswith("cuda"):
            return None
        index = cuda_index(location)
        if index is not None and index >= device_count():
            raise RuntimeError(f"Attempting to deserialize object on CUDA device {index} but "
                               f"torch.cuda.device_count() is {device_count()}. Please use torch.load with "
                               "map_location to map your storages to an existing device.")
        _set(getattr(storage, "_untyped_storage", storage), index)
        return storage

    torch.serialization.register_package(1, tag, restore)


def _patch_autocast() -> None:
    autocast = torch.amp.autocast_mode.autocast
    original = autocast.__init__

    def __init__(self: Any, device_type: str, dtype: Any = None, enabled: bool = True, cache_enabled: Any = None):
        if device_type == "cuda":
            device_type, dtype = "cpu", dtype or torch.float16
        original(self, device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    autocast.__init__ = __init__
    for name in ("is_autocast_enabled", "get_autocast_dtype", "set_autocast_enabled", "set_autocast_dtype"):
        _translate(name)


def _translate(name: str) -> None:
    original = getattr(torch, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        if name == "is_autocast_enabled" and not args and not kwargs:
            args = ("cuda",)
        if args and args[0] == "cuda":
            args = ("cpu", *args[1:])
        return original(*args, **kwargs)

    setattr(torch, name, call)


def _patch_distributed() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        return
    init = dist.init_process_group

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        backend = "gloo" if backend is None or "nccl" in str(backend) else backend
        if cuda_index(kwargs.get("device_id")) is not None:
            kwargs.pop("device_id")
        return init(backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    dist.is_nccl_available = lambda: True
    barrier = dist.barrier

    def no_device_ids(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("device_ids", None)
        return barrier(*args, **kwargs)

    dist.barrier = no_device_ids
    from torch.nn.parallel import DistributedDataParallel

    ddp_init = DistributedDataParallel.__init__

    def __init__(self: Any, module: Any, device_ids: Any = None, output_device: Any = None, *args: Any,
                 **kwargs: Any) -> None:
        with _real_devices():  # Gloo's DDP of a CPU module: no device ids
            ddp_init(self, module, None, None, *args, **kwargs)

    DistributedDataParallel.__init__ = __init__
    from torch.nn import DataParallel

    def forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        move = lambda t: t.to(f"cuda:{self.device_ids[0]}") if isinstance(t, torch.Tensor) else t
        return self.module(*pytree.tree_map(move, inputs), **pytree.tree_map(move, kwargs))

    DataParallel.forward = forward


def _patch_compile() -> None:
    def compile(model: Any = None, **kwargs: Any) -> Any:
        return (lambda fn: fn) if model is None else model

    torch.compile = compile


def _patch_threads() -> None:
    """Modes are per thread: every new thread (a DataLoader's pin-memory thread) gets them."""
    original = threading.Thread._bootstrap_inner

    def _bootstrap_inner(self: Any) -> None:
        _enter_modes()
        original(self)

    threading.Thread._bootstrap_inner = _bootstrap_inner


def install() -> None:
    _patch_cuda()
    _patch_storage()
    _patch_autocast()
    _patch_distributed()
    _patch_compile()
    _patch_threads()
