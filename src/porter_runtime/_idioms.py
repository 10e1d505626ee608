"""What research code says about CUDA in its own idioms: "this needs a GPU",
"new tensors go to CUDA", "load this DataParallel/compiled checkpoint".

Each function is the original call on CUDA; elsewhere it does what the code meant
on the resolved device, and says so once.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Callable, Optional, Union

import torch
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

from . import _device, _dtypes, _log

#: Key prefixes that wrappers add to a state dict: DataParallel / DDP and torch.compile.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def require_device(message: Union[str, Callable[[], Any], None] = None) -> torch.device:
    """What ``assert torch.cuda.is_available()`` becomes: a requirement the resolved
    device satisfies. Returns that device.

    CUDA: nothing happens (the original assertion held), and a callable ``message``
    (a formatted message, which the original evaluated only on failure) is not
    called. Elsewhere the code runs on the resolved device (MPS, XPU or CPU, or
    PORTER_DEVICE) and one info line says so, quoting the original's message. It
    never raises: a machine always has a device the ported code can run on.
    """
    resolved = _device.device()
    if resolved.type != "cuda":
        if callable(message):
            try:
                message = str(message())
            except Exception:  # the message itself is broken: say nothing of it
                message = None
        why = f" ({message})" if message else ""
        _log.info_once("require_device",
                       f"this code required CUDA{why}; it runs on {resolved} instead")
    return resolved


# -- default device and tensor type --------------------------------------------

_default_device_set = False


#: What off_device met already on the device (a module or tensor, weakly: it stays collectable).
_met: "weakref.WeakSet[Any]" = weakref.WeakSet()


def off_device(obj: Any, device: Any) -> bool:
    """What ``if self._model.device != self.device:`` becomes where that branch moves the
    model to the device and then does more (LAVIS's runner, and MiniGPT-4's copy of it:
    the DistributedDataParallel wrap, the wrapped model it returns).

    CUDA: exactly ``obj.device != device``. The model starts on the host and the branch
    runs once. Elsewhere the port builds it on the device it runs on (the CPU, or MPS
    where a model is made there), so the test as written never holds and the rest of
    the branch never runs (LAVIS's ``runner.model`` is None). So the first time an object
    is met already on ``device`` the test holds, as on CUDA for a model built on the
    host, and after that it is the test as written.
    """
    differs = bool(obj.device != device)
    if _device.is_cuda():
        return differs
    if differs:
        _remember(obj)
        return True
    try:
        if obj in _met:
            return False
    except TypeError:  # not hashable: the test as written
        return False
    _remember(obj)
    return True


def _remember(obj: Any) -> None:
    try:
        _met.add(obj)
    except TypeError:  # no weak reference to it: met again, it is the test as written
        pass


def set_default_tensor_type(t: Any) -> None:
    """``torch.set_default_tensor_type(t)``, on the resolved device.

    CUDA: forwarded unchanged. Elsewhere a CUDA type (``torch.cuda.FloatTensor`` or
    its name) becomes what torch itself recommends instead:
    ``torch.set_default_dtype(dtype)`` and ``torch.set_default_device(device)``
    with the resolved device (float64 becomes float32 on MPS, with a warning). A CPU
    type (``torch.FloatTensor``) is forwarded, and also undoes a default device set
    here before, as it undoes a CUDA default type on CUDA.
    """
    global _default_device_set
    if _device.is_cuda():
        torch.set_default_tensor_type(t)
        return
    name = t if isinstance(t, str) else f"{getattr(t, '__module__', '')}.{getattr(t, '__name__', '')}"
    if not name.startswith("torch.cuda."):
        torch.set_default_tensor_type(t)
        if _default_device_set:
            torch.set_default_device(None)
            _default_device_set = False
        return
    dtype = getattr(torch, name.rsplit(".", 1)[1]).dtype  # torch.cuda.FloatTensor -> torch.FloatTensor
    torch.set_default_dtype(_dtypes.supported_dtype(dtype))
    torch.set_default_device(_device.device())
    _default_device_set = True


class _LegacyType(type):
    """A legacy CUDA tensor type off CUDA, on the resolved device: ``T(2, 3)`` is
    ``torch.empty(2, 3)`` and ``T(data)`` is ``torch.tensor(data)``, both of its dtype on the
    device, and ``isinstance(x, T)`` asks for that dtype on that device."""

    dtype: torch.dtype

    def __call__(cls, *args: Any, **kwargs: Any) -> torch.Tensor:
        dtype, device = _dtypes.supported_dtype(cls.dtype), _device.device()
        sizes = args[0] if len(args) == 1 and isinstance(args[0], torch.Size) else args
        if all(isinstance(a, int) and not isinstance(a, bool) for a in sizes):
            return torch.empty(*sizes, dtype=dtype, device=device, **kwargs) if sizes else \
                torch.empty(0, dtype=dtype, device=device, **kwargs)
        if len(args) != 1:
            raise TypeError(f"{cls.__module__}.{cls.__name__}() takes sizes or one sequence of data")
        if isinstance(args[0], torch.Tensor):
            return args[0].to(device=device, dtype=dtype)
        return torch.tensor(args[0], dtype=dtype, device=device, **kwargs)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, torch.Tensor) and instance.dtype == _dtypes.supported_dtype(cls.dtype) \
            and instance.device.type == _device.device().type


_legacy_types: dict = {}


def legacy_tensor_type(t: Any) -> Any:
    """``torch.cuda.FloatTensor`` (any legacy CUDA tensor type) kept as a value:
    ``self.FloatTensor = torch.cuda.FloatTensor if use_gpu else torch.FloatTensor``, then
    ``self.FloatTensor(bs, nc, h, w)`` (pix2pixHD, SPADE).

    CUDA: the type itself. Elsewhere a stand-in of the same name that builds its tensors on
    the resolved device and answers ``isinstance`` for tensors of its dtype there; its
    float64 is MPS's float32, as ``supported_dtype`` says. Any other type is returned as it is."""
    name = getattr(t, "__name__", "")
    if _device.is_cuda() or getattr(t, "__module__", "") != "torch.cuda" or not name.endswith("Tensor"):
        return t
    if name not in _legacy_types:
        _legacy_types[name] = _LegacyType(name, (), {"dtype": getattr(torch, name).dtype, "__module__": "torch.cuda"})
    return _legacy_types[name]


def tensor_type(t: Any) -> str:
    """``t.type()`` as a CUDA machine names it: compared with ``"torch.cuda.FloatTensor"``
    (Megatron-LM's ``assert param.grad.type() == 'torch.cuda.FloatTensor'``).

    CUDA: ``t.type()``. Elsewhere the same, except that a tensor on the resolved device is
    named as the CUDA type of its dtype (``torch.cuda.FloatTensor`` for float32 on MPS, or
    on the CPU where the CPU is the device)."""
    name = t.type()
    if _device.is_cuda() or not isinstance(t, torch.Tensor) or t.device.type != _device.device().type:
        return name
    return f"torch.cuda.{name.rsplit('.', 1)[-1]}"


# -- checkpoints of wrapped models ----------------------------------------------

def load_state_dict(obj: Any, *args: Any, **kwargs: Any) -> Any:
    """``obj.load_state_dict(*args, **kwargs)``, also for checkpoints of wrapped models.

    The call is made exactly as written, and its result returned. Only when ``obj``
    is an ``nn.Module``, the call raises ``RuntimeError``, and the failure is
    exactly explained by a wrapper's key prefix (every key starts with ``module.``
    (DataParallel / DDP) and/or ``_orig_mod.`` (torch.compile), the model's own
    keys don't, and without the prefix the keys are the model's), the call is made
    again with the prefix removed, with one warning. Optimizers, schedulers and
    anything else get the plain call. Every call that works as written is
    unchanged, on every device.
    """
    load = obj.load_state_dict
    if not isinstance(obj, torch.nn.Module):
        return load(*args, **kwargs)
    try:
        return load(*args, **kwargs)
    except RuntimeError:
        state_dict = args[0] if args else kwargs.get("state_dict")
        found = _unwrapped(obj, state_dict)
        if found is None:
            raise
    prefix, stripped = found
    _log.warn_once(f"load_state_dict:{prefix}",
                   f"the checkpoint's keys start with {prefix!r} (saved from a "
                   f"{_wrapper_names(prefix)} model) and {type(obj).__name__} is not wrapped: "
                   "loading it with the prefix removed")
    if args:
        return load(stripped, *args[1:], **kwargs)
    return load(**{**kwargs, "state_dict": stripped})


def _wrapper_prefix(keys: list[str]) -> str:
    """The longest chain of wrapper prefixes that every key starts with."""
    prefix = ""
    while True:
        step = next((p for p in WRAPPER_PREFIXES if all(k.startswith(prefix + p) for k in keys)), None)
        if step is None:
            return prefix
        prefix += step


def _unwrapped(module: torch.nn.Module, state_dict: Any) -> Optional[tuple[str, Mapping]]:
    """(prefix, the state dict without it) when the prefix alone made loading fail."""
    if not isinstance(state_dict, Mapping) or not state_dict:
        return None
    keys = list(state_dict)
    if not all(isinstance(k, str) for k in keys):
        return None
    prefix = _wrapper_prefix(keys)
    expected = set(module.state_dict())
    if not prefix or any(k.startswith(prefix) for k in expected):
        return None
    names = {k[len(prefix):] for k in keys}
    # BatchNorm fills in num_batches_tracked for old checkpoints: not a real gap.
    missing = {k for k in expected - names if not k.endswith("num_batches_tracked")}
    if names - expected or missing:
        return None
    stripped: Any = OrderedDict(state_dict)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        stripped._metadata = OrderedDict(metadata)  # consume_prefix edits it in place
    remaining = prefix
    while remaining:
        step = next(p for p in WRAPPER_PREFIXES if remaining.startswith(p))
        consume_prefix_in_state_dict_if_present(stripped, step)
        remaining = remaining[len(step):]
    return prefix, stripped


def _wrapper_names(prefix: str) -> str:
    names = {"module.": "DataParallel/DDP", "_orig_mod.": "torch.compile"}
    parts, rest = [], prefix
    while rest:
        step = next(p for p in WRAPPER_PREFIXES if rest.startswith(p))
        parts.append(names[step])
        rest = rest[len(step):]
    return " + ".join(parts)
