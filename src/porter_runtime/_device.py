"""Device resolution: CUDA > MPS > XPU > CPU, with the PORTER_DEVICE override.

The resolution is computed on first use (never at import) and cached, because
user code asks for the device in hot loops. ``_reset()`` clears the cache.

PORTER_EMULATE=mps resolves to ``EMULATED`` (``cpu:0``): tensors live on the CPU,
while :func:`device_type` says "mps" so that every policy (dtypes, autocast,
compile, DataLoader, distributed) chooses as on a Mac; :func:`hardware_type` is
what calls into torch's device modules use. The index marks the emulated device:
``x.to(device)`` and factories given it are seen by the dispatch-level check
(tools/emulate.py) as "on the device", while an explicit ``"cpu"`` is the host.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch

from . import _compat, _log

DeviceLike = Union[None, int, str, torch.device]


#: The emulated device: a CPU device with an index, so that it can be told from "cpu".
EMULATED = torch.device("cpu", 0)
EMULATION_LABEL = "emulating MPS on the CPU: checks MPS's rules, not its numerics or speed"


@dataclass(frozen=True)
class Resolution:
    """The device the runtime chose and the reason, for the info line and doctor."""

    device: torch.device
    reason: str
    #: the device type the runtime's policies follow ("mps" under PORTER_EMULATE=mps)
    policy: str = ""

    @property
    def kind(self) -> str:
        return self.policy or self.device.type


_resolution: Optional[Resolution] = None
#: Whether a call at run time has made the announcing pass (said what it had to, or nothing on CUDA).
_announced = False


def _from_env(value: str) -> Resolution:
    """Honour PORTER_DEVICE, refusing a device that is not there (never fake it)."""
    try:
        dev = torch.device(value)
    except RuntimeError as exc:
        raise ValueError(f"PORTER_DEVICE={value!r} is not a torch device: {exc}") from None
    checks = {"cuda": torch.cuda.is_available, "mps": _compat.mps_available,
              "xpu": _compat.xpu_available}
    if dev.type in checks and not checks[dev.type]():
        raise RuntimeError(
            f"PORTER_DEVICE={value!r} but {dev.type} is not available on this machine; "
            "unset PORTER_DEVICE or choose cpu")
    return Resolution(dev, f"PORTER_DEVICE={value}")


def _probe() -> Resolution:
    """Check every backend explicitly: torch.accelerator knows only the build's one."""
    if torch.cuda.is_available():
        return Resolution(torch.device("cuda"), "torch.cuda.is_available() is True")
    if _compat.mps_available():
        return _distributed_on_a_mac() or Resolution(
            torch.device("mps"), "torch.backends.mps.is_available() is True, CUDA is not")
    if _compat.xpu_available():
        return Resolution(torch.device("xpu"), "torch.xpu.is_available() is True, CUDA is not")
    return Resolution(torch.device("cpu"), "no CUDA, MPS or XPU device is available")


#: Set by the runtime's init_process_group off CUDA: a process group is being made.
_group_started = False
#: This process resolved to the emulated device at some point: what it made there (a
#: device object kept from before a process group) stays the emulated MPS device.
_was_emulated = False


def _distributed_on_a_mac(note: str = "") -> Optional[Resolution]:
    """The CPU, for a process on a Mac that uses a process group, or that a launcher
    (torchrun) started for one: Gloo, the only backend macOS builds, cannot communicate
    MPS tensors (``ProcessGroupGloo::broadcast: invalid tensor type``), not even in a
    group of one process, where DDP still broadcasts the model. The run then works, on
    the CPU, as it would with PORTER_DEVICE=cpu (which PORTER_DEVICE=mps overrides: a
    multi-process launch is then refused, _dist.check_launch). Only the Mac branches of
    the resolution ask: CUDA is chosen before this is read."""
    world = _compat.launch_world_size()
    if world > 1:
        why = f"a {world}-process launch"
    elif "WORLD_SIZE" in os.environ:
        why = "a launch for a process group (WORLD_SIZE=1)"
    elif _group_started or _group_initialized():
        why = "a process group"
    else:
        return None
    return Resolution(torch.device("cpu"), f"{why}: Gloo, macOS's only distributed backend, "
                      f"cannot communicate MPS tensors, so this process runs on the CPU{note}")


def _group_initialized() -> bool:
    """A default process group exists (one the code made with torch.distributed itself)."""
    dist = getattr(torch, "distributed", None)
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def note_process_group() -> None:
    """Called by the runtime's ``init_process_group`` off CUDA, before the group is made.

    From then on a Mac resolves to the CPU (:func:`_distributed_on_a_mac`). Where the
    device had already resolved to MPS (a device asked for before the group was made,
    with no launcher's WORLD_SIZE to tell), it is resolved again, with a line saying so:
    what the code makes from now on (the model DDP wraps, the batches) goes to the CPU,
    and a tensor it put on MPS before must be moved by hand. PORTER_DEVICE is kept."""
    global _group_started, _resolution
    _group_started = True
    previous = _resolution
    if previous is None or previous.kind != "mps" or _overridden(previous):
        return
    _resolution = None
    now = resolve(announce=False)
    message = (f"a process group is being made after the device resolved to {previous.device}; "
               f"using {now.device} from now on ({now.reason})")
    if previous.device.type == "mps" and _mps_in_use():
        _log.warn_once("device:process-group", message + "; tensors already on mps must be moved to it")
    else:
        _log.info_once("device:process-group", message)


def was_emulated() -> bool:
    """Whether this process resolved to the emulated device before (a process group made
    since has moved it to the CPU, but not what it had made on MPS: tools/emulate.py)."""
    return _was_emulated


def _mps_in_use() -> bool:
    """Tensors live on MPS now (a real Mac; the emulated device holds none)."""
    try:
        return torch.mps.current_allocated_memory() > 0
    except (AttributeError, RuntimeError):
        return False


def _overridden(resolution: Resolution) -> bool:
    return resolution.reason.startswith("PORTER_DEVICE=")


def resolve(announce: bool = True) -> Resolution:
    """The cached resolution. The first announcing call prints one info line where the
    device is not CUDA (PORTER_QUIET=1 mutes; on CUDA the ported code does what the
    original did, and says nothing more); ``announce=False``, and any call made while a
    module is imported (a default argument), resolves without a word (see :func:`device_str`)."""
    global _resolution
    if _resolution is not None and _resolution.kind == "mps" and not _group_started \
            and not _overridden(_resolution) and _group_initialized():
        note_process_group()  # a group the code made itself, after the device resolved to MPS
    if _resolution is None:
        override = os.environ.get("PORTER_DEVICE", "").strip()
        if _compat.emulated():
            _resolution = _distributed_on_a_mac(f"; {EMULATION_LABEL}") or Resolution(
                EMULATED, f"PORTER_EMULATE=mps; {EMULATION_LABEL}", "mps")
            global _was_emulated
            _was_emulated = _was_emulated or _resolution.device == EMULATED
        else:
            _resolution = _from_env(override) if override else _probe()
    global _announced
    if announce and _announced:
        return _resolution  # every later call is the cached answer: no stack walk in a training loop
    if announce and _importing():
        announce = False  # a default argument or module constant: the line waits for a call at run time
    if announce:
        _announced = True
        if _resolution.kind != "cuda" or _overridden(_resolution):  # on CUDA the code does what it did: nothing to say
            _log.info_once("device", f"using {_resolution.device} ({_resolution.reason})")
        if _resolution.policy and os.environ.get("PORTER_DEVICE", "").strip():
            _log.info_once("device:emulated", "PORTER_DEVICE is ignored while PORTER_EMULATE is set")
        if _resolution.kind == "mps" and not _compat.at_least(2, 5):
            _log.warn_once("device:old-torch", f"torch {torch.__version__} on MPS: porter_runtime needs torch 2.5 "
                           "or newer there (autocast and memory queries on MPS); `pip install -U torch`")
        if _resolution.kind == "mps" and os.environ.get("PYTORCH_ENABLE_MPS_FALLBACK") is None:
            # torch was imported before porter_runtime (the usual import order), so the
            # runtime could not set the variable: torch reads it once, at import.
            _log.info_once("mps-fallback", "PYTORCH_ENABLE_MPS_FALLBACK is not set, so ops MPS lacks raise "
                           "NotImplementedError; export PYTORCH_ENABLE_MPS_FALLBACK=1 to run them on the CPU")
    return _resolution


def _importing() -> bool:
    """Whether this call comes from a module body that the import system is running (a
    default argument, ``def f(device=porter_runtime.device())``, evaluated at import):
    the nearest module body up the stack, and the frame that runs it is importlib's."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    if frame is None or "porter_runtime" in str(frame.f_globals.get("__name__", "")).split("."):
        return False
    caller = frame.f_back
    return caller is not None and "importlib" in caller.f_code.co_filename


def _reset() -> None:
    """Forget the cached resolution and one-time messages (for tests)."""
    global _resolution, _group_started, _announced, _was_emulated
    _resolution = None
    _group_started = False
    _announced = False
    _was_emulated = False
    _log.reset()


def _cuda_request(index: Optional[int], announce: bool = True) -> torch.device:
    """Map a request for CUDA (optionally indexed) to the resolved device."""
    resolution = resolve(announce)
    resolved = resolution.device
    if resolution.policy:  # the emulated device keeps its marking index
        return resolved
    if resolved.type == "cuda":
        return resolved if index is None else torch.device("cuda", index)
    if resolved.type == "xpu" and index is not None:
        return torch.device("xpu", index)
    # MPS has a single device, mps:0, and a tensor there says so: an indexed request
    # ("cuda:0", 1) is mps:0, so that `tensor.device == device` holds as it did on
    # CUDA (H2O's FlexGen asserts it); an index-less one stays "mps". CPU tensors
    # have no index: drop it.
    if resolved.type == "mps":
        return torch.device("mps") if index is None else torch.device("mps", 0)
    return torch.device(resolved.type) if resolved.type == "cpu" else resolved


def device(index: DeviceLike = None) -> torch.device:
    """The device the original CUDA code meant, on this machine.

    CUDA: ``device()`` is ``torch.device("cuda")`` (no index, as the original),
    ``device(1)`` and ``device("cuda:1")`` are ``cuda:1``.
    MPS / XPU / CPU: CUDA requests map to the resolved device; on MPS an indexed
    request is ``mps:0`` (the index a tensor there reports), an index-less one
    ``mps``; on the CPU the index is dropped. An explicit non-CUDA request (``"cpu"``, ``"mps"``) is returned as is
    on every machine. PORTER_DEVICE overrides the resolution of CUDA requests;
    an explicit index in the request is kept when the override is CUDA.
    """
    return _device(index, announce=True)


def _device(index: DeviceLike, announce: bool) -> torch.device:
    if index is None:
        return _cuda_request(None, announce)
    if isinstance(index, int) and not isinstance(index, bool):
        return _cuda_request(index, announce)
    requested = torch.device(index)
    if (requested.type == "mps" or requested == EMULATED) and _compat.emulated():
        return _cuda_request(None, announce)  # an explicit "mps" (or its mark, cpu:0) is the emulated device
    if requested.type == "mps" and resolve(announce).kind == "cpu" and _distributed_on_a_mac() is not None \
            and not os.environ.get("PORTER_DEVICE", "").strip() and torch.backends.mps.is_available():
        # "mps" made earlier by device_str() (a config default read at import, before the
        # process group existed): the group's process runs on the CPU, as the resolution says
        return _cuda_request(None, announce)
    if requested.type != "cuda":
        return requested
    return _cuda_request(requested.index, announce)


def device_str(index: DeviceLike = None) -> str:
    """``str(device(index))``, quietly: for a setting that said ``"cuda"`` and is
    evaluated when its module is imported (a parameter default, a module constant,
    an argparse default, a dataclass field).

    On CUDA it is ``"cuda"`` (``"cuda:1"`` for index 1): the original string, so
    comparisons, argparse defaults and f-strings behave as before. Elsewhere it
    names the resolved device (``"mps"``, ``"cpu"``). The value has to exist when
    the default is evaluated, so the device is resolved then (the cached check of
    each backend, as ``torch.cuda.is_available()`` does; PORTER_DEVICE is read
    then); but importing prints nothing: the info line waits for the first
    :func:`device` call.
    """
    return str(_device(index, announce=False))


def device_option(value: Any) -> Any:
    """The ``type=`` of a command-line device option the repository's own commands give
    ``"cuda"`` (``--device "cuda"`` in its README): a CUDA device (``"cuda"``,
    ``"cuda:1"``) becomes :func:`device_str` of it, anything else is returned as given.
    On CUDA that is the same string; on a Mac the README's command runs on MPS."""
    if not isinstance(value, str) or not value.lower().startswith("cuda"):
        return value
    try:
        requested = torch.device(value)
    except (RuntimeError, ValueError):
        return value  # not a device ("cuda_graphs"): argparse hands it on as before
    if requested.type != "cuda":
        return value
    return device_str(value)


def device_type() -> str:
    """'cuda', 'mps', 'xpu' or 'cpu': the type of the resolved device ('mps' when emulated)."""
    return resolve().kind


def hardware_type() -> str:
    """The type of the device tensors really live on: ``device_type()`` except under
    emulation ('cpu'). Calls into torch.mps / torch.cuda follow this one."""
    return resolve().device.type


def kind_of(dev: torch.device) -> str:
    """The device type the runtime's policies apply to ``dev``: 'mps' for the emulated
    device, else ``dev.type``."""
    resolution = resolve(announce=False)
    return resolution.policy if resolution.policy and dev == resolution.device else dev.type


def is_cuda() -> bool:
    """True when the runtime resolved to CUDA: every twin then forwards to torch.cuda."""
    return device_type() == "cuda"


def is_accelerator_available() -> bool:
    """True when the resolved device is an accelerator (CUDA, MPS or XPU).

    Unlike a faked ``torch.cuda.is_available()``, this says what is true: on a Mac
    it is True because MPS is there, and PORTER_DEVICE=cpu makes it False.
    """
    return device_type() != "cpu"
