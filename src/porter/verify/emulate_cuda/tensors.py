"""The emulation's tensors: device marks on storages, per-device generators, and the two
modes (torch functions, aten operators) that keep them; see the package's docstring."""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

#: The storage attribute that holds an emulated tensor's CUDA device index.
_MARK = "_porter_emulated_cuda"
_PINNED = "_porter_emulated_pinned"
_INSTALLED = "_porter_cuda_emulation"
NAME = "NVIDIA A100-SXM4-80GB (emulated by porter)"
_state = threading.local()


def device_count() -> int:
    for name in ("PORTER_EMULATE_CUDA_DEVICES", "LOCAL_WORLD_SIZE"):
        try:
            return max(1, int(os.environ[name]))
        except (KeyError, ValueError):
            pass
    return 1


def current_device() -> int:
    return getattr(_state, "device", None) or _process.device


class _Process:
    device = 0


_process = _Process()


# -- marks ---------------------------------------------------------------------------------

def index_of(t: Any) -> int | None:
    """The CUDA index of an emulated device tensor (or storage), else None."""
    try:
        storage = t.untyped_storage() if isinstance(t, torch.Tensor) else t
        return getattr(storage, _MARK, None)
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):  # sparse, nested, meta
        return None


def _set(t: Any, index: int | None) -> None:
    try:
        storage = t.untyped_storage() if isinstance(t, torch.Tensor) else t
        setattr(storage, _MARK, index)
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        pass


def _mark_all(out: Any, index: int | None) -> Any:
    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            _set(leaf, index)
    return out


def cuda_index(device: Any) -> int | None:
    """The CUDA index ``device`` names ("cuda", "cuda:1", torch.device, an int), else None."""
    if isinstance(device, bool):
        return None
    if isinstance(device, int):
        return device  # an integer device is an accelerator index
    if isinstance(device, str):
        if device == "cuda":
            return current_device()
        if device.startswith("cuda:"):
            return int(device[5:])
        return None
    if isinstance(device, torch.device) and device.type == "cuda":
        return current_device() if device.index is None else device.index
    return None


def _is_host(device: Any) -> bool:
    return (isinstance(device, str) and device.split(":")[0] == "cpu") or (
        isinstance(device, torch.device) and device.type == "cpu")


@contextlib.contextmanager
def _setting(name: str, value: Any):
    """This thread's ``_state.<name>`` is ``value`` inside."""
    before = getattr(_state, name, None)
    setattr(_state, name, value)
    try:
        yield
    finally:
        setattr(_state, name, before)


def _target(index: int | None):
    """Inside, the dispatch mode marks every fresh tensor with ``index`` (-1: the host)."""
    return _setting("target", index)


# -- random numbers --------------------------------------------------------------------------

class Generator(torch._C.Generator):
    """``torch.Generator``: a CPU generator that says it is on ``cuda:N`` when made so."""

    def __new__(cls, device: Any = "cpu"):
        index = cuda_index(device)
        gen = super().__new__(cls)  # the CPU's own Mersenne Twister
        gen._cuda = index
        return gen

    def __init__(self, device: Any = "cpu") -> None:
        pass

    @property
    def device(self) -> torch.device:  # type: ignore[override]
        return torch.device("cpu") if self._cuda is None else torch.device("cuda", self._cuda)


_generators: dict[int, Generator] = {}


def generator(index: int) -> Generator:
    if index not in _generators:
        gen = Generator(f"cuda:{index}")
        gen.manual_seed(torch.initial_seed())
        _generators[index] = gen
    return _generators[index]


def _seeded(index: int, func: Any, args: tuple, kwargs: dict) -> Any:
    """Run a random op on device ``index``'s generator (swapped into the CPU's default)."""
    default, gen = torch.default_generator, generator(index)
    host = default.get_state()
    default.set_state(gen.get_state())
    try:
        return func(*args, **kwargs)
    finally:
        gen.set_state(default.get_state())
        default.set_state(host)


# -- the two modes ---------------------------------------------------------------------------

_SEEDED = torch.Tag.nondeterministic_seeded


class Marks(TorchDispatchMode):
    """Every operator: a fresh output of an op with a device input is a device tensor; a
    random op on the device draws from the device's generator."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        index = getattr(_state, "target", None)
        inputs = [leaf for leaf in pytree.tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        if index is None:
            index = next((i for i in map(index_of, inputs) if i is not None), None)
        if index is None or index < 0:
            return func(*args, **kwargs)
        if _SEEDED in func.tags and kwargs.get("generator") is None:
            out = _seeded(index, func, args, kwargs)
        else:
            out = func(*args, **kwargs)
        shared = set()
        for t in inputs:
            with contextlib.suppress(RuntimeError, NotImplementedError):
                shared.add(t.untyped_storage().data_ptr())
        for leaf in pytree.tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                try:
                    if leaf.untyped_storage().data_ptr() in shared:
                        continue  # an in-place op or a view keeps its tensor's device
                except (RuntimeError, NotImplementedError):
                    continue
                _set(leaf, index)
        return out


def _getter(name: str) -> Any:
    return torch._C.TensorBase.__dict__[name]


class Devices(TorchFunctionMode):
    """Every torch function: "cuda" devices become the CPU with a mark."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        special = _SPECIAL.get(getattr(func, "__self__", None) if type(func).__name__ == "method-wrapper"
                               else func)
        if special is not None:
            return special(func, args, kwargs)
        device = kwargs.get("device")
        if device is None:
            return func(*args, **kwargs)
        index = cuda_index(device)
        if index is not None:
            kwargs = {**kwargs, "device": "cpu"}
            with _target(index):
                return _mark_all(func(*args, **kwargs), index)
        if _is_host(device):
            with _target(-1):
                return _mark_all(func(*args, **kwargs), None)
        return func(*args, **kwargs)


def _device_get(func, args, kwargs):
    index = None if getattr(_state, "real", False) else index_of(args[0])
    return func(*args, **kwargs) if index is None else torch.device("cuda", index)


def _is_cuda_get(func, args, kwargs):
    return (index_of(args[0]) is not None and not getattr(_state, "real", False)) or func(*args, **kwargs)


def _get_device(func, args, kwargs):
    index = index_of(args[0])
    return func(*args, **kwargs) if index is None else index


def _host_copy(t: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    with _target(-1):
        out = t.to("cpu", copy=True, **kwargs)
    _set(out, None)
    return out


def _device_copy(t: torch.Tensor, index: int, **kwargs: Any) -> torch.Tensor:
    with _target(index):
        out = t.to("cpu", copy=True, **kwargs)
    _set(out, index)
    return out


def _to(func, args, kwargs):
    self, device, dtype, other = args[0], kwargs.get("device"), kwargs.get("dtype"), None
    flags = [a for a in args[1:] if isinstance(a, bool)]
    for a in args[1:]:
        if isinstance(a, torch.Tensor):
            other = a
        elif isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (str, torch.device)) or (isinstance(a, int) and not isinstance(a, bool)):
            device = a
    if other is not None:
        index = index_of(other)
        device, dtype = other.device if index is None else torch.device("cuda", index), other.dtype
    rest = {k: v for k, v in kwargs.items() if k in ("memory_format",)}
    non_blocking = kwargs.get("non_blocking", flags[0] if flags else False)
    copy = kwargs.get("copy", flags[1] if len(flags) > 1 else False)
    source, index = index_of(self), cuda_index(device) if device is not None else None
    if device is None or (index is None and source is None and not copy) or (index is not None and index == source):
        if device is not None:
            rest["device"] = "cpu"
        return self.to(dtype=dtype, non_blocking=non_blocking, copy=copy, **rest) if dtype is not None else \
            self.to(non_blocking=non_blocking, copy=copy, **rest)
    if index is None:
        return _host_copy(self, dtype=dtype, **rest)
    return _device_copy(self, index, dtype=dtype, **rest)


def _cuda(func, args, kwargs):
    self = args[0]
    device = kwargs.get("device", args[1] if len(args) > 1 else None)
    index = current_device() if device is None else cuda_index(device)
    if index_of(self) == index:
        return self
    return _device_copy(self, index, **{k: v for k, v in kwargs.items() if k == "memory_format"})


def _cpu(func, args, kwargs):
    self = args[0]
    if index_of(self) is None:
        return func(*args, **kwargs)
    return _host_copy(self, **kwargs)


def _numpy(func, args, kwargs):
    self = args[0]
    index = index_of(self)
    if index is not None:
        if kwargs.get("force") or (len(args) > 1 and args[1]):
            return _host_copy(self.detach()).numpy()
        raise TypeError(f"can't convert cuda:{index} device type tensor to numpy. Use Tensor.cpu() to copy the "
                        "tensor to host memory first.")
    return func(*args, **kwargs)


def _pin_memory(func, args, kwargs):
    self = args[0]
    if index_of(self) is not None:
        raise RuntimeError(f"cannot pin '{self.type().replace('torch.', 'torch.cuda.')}' only dense CPU tensors "
                           "can be pinned")
    if getattr(self.untyped_storage(), _PINNED, False):
        return self
    out = _host_copy(self)
    setattr(out.untyped_storage(), _PINNED, True)
    return out


def _is_pinned(func, args, kwargs):
    return bool(getattr(args[0].untyped_storage(), _PINNED, False))


def _repr(func, args, kwargs):
    """A device tensor prints as CUDA's do (``device='cuda:0'``)."""
    if index_of(args[0]) is None:
        return func(*args, **kwargs)
    with Devices():
        return torch._tensor_str._str(args[0], tensor_contents=kwargs.get("tensor_contents"))


def _new_device(func, args, kwargs):
    """``torch.device(0)``: an index alone names the current accelerator, CUDA here
    (torch itself refuses it on a machine without one; accelerate's ``device_map="auto"``
    makes one for each GPU it counts)."""
    if len(args) == 1 and not kwargs and isinstance(args[0], int) and not isinstance(args[0], bool):
        return torch.device("cuda", args[0])
    return func(*args, **kwargs)


_SPECIAL: dict = {
    torch.device: _new_device,
    _getter("device"): _device_get, _getter("is_cuda"): _is_cuda_get,
    torch._C.TensorBase.get_device: _get_device, torch._C.TensorBase.to: _to, torch._C.TensorBase.cuda: _cuda,
    torch._C.TensorBase.cpu: _cpu, torch._C.TensorBase.numpy: _numpy,
    torch._C.TensorBase.pin_memory: _pin_memory, torch._C.TensorBase.is_pinned: _is_pinned,
    torch.Tensor.__repr__: _repr,
}


def _real_devices():
    """Inside, tensors tell the CPU they are on (torch's own code that must run there)."""
    return _setting("real", True)


def _enter_modes() -> None:
    for mode in (Devices(), Marks()):
        mode.__enter__()
