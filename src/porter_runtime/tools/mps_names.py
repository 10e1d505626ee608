"""Under PORTER_EMULATE=mps, the code's own "mps" answers as on a Mac.

A Mac's torch says ``torch.backends.mps.is_available()``; code and libraries then pick
the device by name (``torch.device("mps")``, ``model.to("mps")``,
``device_map={"": "mps"}``) and call ``torch.mps`` (``synchronize``, ``empty_cache``,
``current_allocated_memory``). This CPU build of torch answers False and refuses the
name, so before this the emulation took every such branch the CPU way: a repository's
own bf16 check refused the emulated device (torchtune), and accelerate's
``device_map="auto"`` kept a model on the CPU that a Mac puts on MPS (streaming-llm).

Here, while the emulation runs:

* ``torch.backends.mps.is_available()`` / ``is_built()`` / ``is_macos_or_newer(...)``
  answer as on a recent Mac;
* a device named "mps" (a string or a ``torch.device``, given to any torch function or
  tensor method) is the emulated device, so what is made or moved there is on the device
  and MPS's rules apply to it;
* ``torch.mps``'s functions answer as on a Mac with one device: synchronising and
  emptying the cache do nothing, seeding seeds the generator, memory queries count
  what this process holds; its generator is the CPU's (the numerics are the CPU's anyway).

And a library that reads the device's name itself gets one it knows: safetensors'
``load_file(path, device=...)`` / ``safe_open`` given the emulated device (``"cpu:0"``,
which it refuses, or "mps") load on the CPU and move the tensors to the device, as a Mac
loads them on MPS (flux, blind round 12).

And tracing (``torch.jit.trace`` / ``trace_module``, ``torch.onnx.export``) runs as on a
Mac, where no Python mode stands between the tracer and the operators: the emulation's
modes step aside while the tracer records and checks (they replayed its graph with
Python numbers as tensors: edm2's ``count_flops.py``, MobileSAM's ONNX export, blind
round 13), and apply again when the traced module runs.

And an old-style Tensor subclass (``class Distribution(torch.Tensor)`` with no ``__new__``
of its own) is built from a tensor or sizes as on a Mac: torch's legacy constructor,
``Distribution(torch.randn(...))``, aliases its argument through the dispatcher, and
under any Python dispatch mode the alias comes back already bound to a plain Tensor,
which torch refuses to rebind ("the raw Tensor object is already associated to a python
object"). Those constructors run with the modes off; the alias shares the storage, so a
tensor made from one on the device stays on it (BigGAN's ``prepare_z_y``, blind round 14).

Left as it is: a device tensor's ``.device`` stays the emulated ``cpu:0`` (torch's own
Python takes MPS-only paths on ``mps``), and ``torch.Generator(device="mps")`` fails.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

import torch
from torch.overrides import TorchFunctionMode

from .. import _device

#: The newest macOS a probe is told it runs on (``is_macos_or_newer(major, minor)``).
_MACOS = (15, 0)


def emulated(value: Any) -> Any:
    """``value`` with an "mps" device put as the emulated device."""
    if isinstance(value, torch.device):
        return _device.EMULATED if value.type == "mps" else value
    if isinstance(value, str) and value.split(":", 1)[0].strip() == "mps":
        return _device.EMULATED
    return value


class MpsNames(TorchFunctionMode):
    """Every torch function and tensor method: a device named "mps" is the emulated one."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.device:  # the object stays "mps" (`device.type == "mps"` as on a Mac); its uses move
            return func(*args, **kwargs)
        if any(isinstance(a, (str, torch.device)) for a in args):
            args = tuple(emulated(a) for a in args)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": emulated(kwargs["device"])}
        return func(*args, **kwargs)


def _allocated() -> int:
    """Bytes of tensor storage the process holds: what ``current_allocated_memory`` counts
    on a Mac is MPS's, here the CPU's (numbers, not limits, as the emulation's label says)."""
    import gc

    seen, total = set(), 0
    for obj in gc.get_objects():
        if issubclass(type(obj), torch.Tensor):  # not isinstance: it reads lazy modules' __class__
            try:
                storage = obj.untyped_storage()
                if storage.data_ptr() not in seen:
                    seen.add(storage.data_ptr())
                    total += storage.nbytes()
            except (RuntimeError, NotImplementedError, TypeError):
                continue
    return total


def answer_as_a_mac() -> None:
    """Install the probes, the ``torch.mps`` functions and the name routing (the mode
    stays on for the thread that imported the runtime, as the emulation's own does)."""
    backends = torch.backends.mps
    backends.is_available = lambda: True
    backends.is_built = lambda: True
    backends.is_macos13_or_newer = lambda minor=0: True
    backends.is_macos_or_newer = lambda major, minor: (major, minor) <= _MACOS
    mps = torch.mps
    mps.device_count = lambda: 1
    mps.synchronize = lambda: None
    mps.empty_cache = lambda: None
    # torch.manual_seed / torch.seed call these once MPS is available: the device's
    # tensors draw from the CPU's generator here, which those seed themselves
    mps.manual_seed = lambda seed: None
    mps.seed = lambda: None
    mps.get_rng_state = lambda device="mps": torch.get_rng_state()
    mps.set_rng_state = lambda new_state, device="mps": None
    mps.current_allocated_memory = _allocated
    mps.driver_allocated_memory = _allocated
    mps.recommended_max_memory = lambda: 16 * 2 ** 30
    mps.set_per_process_memory_fraction = lambda fraction: None
    safetensors_take_the_device()
    trace_without_the_modes()
    subclasses_build_as_on_a_mac()
    MpsNames().__enter__()


def _names_the_device(device: Any) -> bool:
    """Whether ``device`` (a string, an index, a torch.device) is the emulated device."""
    device = emulated(device)
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            return False
    return isinstance(device, torch.device) and device == _device.EMULATED


def to_the_same_place(args: tuple, kwargs: dict) -> bool:
    """Whether ``.to(*args, **kwargs)`` only names the emulated device (``non_blocking`` aside):
    for a tensor already there, MPS returns the tensor itself, where torch takes ``cpu:0`` for
    another place than a CPU tensor's ``cpu`` and copies (accelerate's ``param_cls(value.to(d)).to(d)``
    then loses the Parameter: PixArt-alpha's T5 load with a device_map)."""
    if set(kwargs) - {"device", "non_blocking"} or len(args) + ("device" in kwargs) != 1:
        return False
    return _names_the_device(kwargs["device"] if "device" in kwargs else args[0])


class _OnTheDevice:
    """A safetensors file opened on the CPU whose tensors come out on the emulated device."""

    def __init__(self, opened: Any) -> None:
        self._opened = opened

    def __enter__(self) -> "_OnTheDevice":
        self._opened.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._opened.__exit__(*exc)

    def get_tensor(self, name: str) -> torch.Tensor:
        return self._opened.get_tensor(name).to(_device.EMULATED)

    def get_tensors(self) -> dict:
        return {k: v.to(_device.EMULATED) for k, v in self._opened.get_tensors().items()}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._opened, name)


def safetensors_take_the_device() -> None:
    """safetensors.torch's ``safe_open`` (which its ``load_file`` calls by name) given the
    emulated device: open on the CPU, hand the tensors out on the device."""
    try:
        import safetensors.torch as st
    except Exception:  # not installed (or broken): nothing reads the name
        return
    real = st.safe_open

    def safe_open(filename: Any, framework: str, device: Any = "cpu", **kwargs: Any) -> Any:
        if _names_the_device(device):
            return _OnTheDevice(real(filename, framework, device="cpu", **kwargs))
        return real(filename, framework, device=device, **kwargs)

    st.safe_open = safe_open


@contextlib.contextmanager
def _no_modes() -> Iterator[None]:
    """Neither the emulation's torch-function modes nor its dispatch mode, for a while."""
    try:  # torch's private helpers (2.0 and later); without them tracing runs as before
        from torch.overrides import _pop_mode_temporarily
        from torch.utils._python_dispatch import _disable_current_modes
        depth = torch._C._len_torch_function_stack
    except (ImportError, AttributeError):
        yield
        return
    with contextlib.ExitStack() as stack:
        while depth() > 0:
            stack.enter_context(_pop_mode_temporarily())
        stack.enter_context(_disable_current_modes())
        yield


def _stepping_aside(real: Any) -> Any:
    @functools.wraps(real)
    def traced(*args: Any, **kwargs: Any) -> Any:
        with _no_modes():
            return real(*args, **kwargs)
    traced._porter_emulation = True  # type: ignore[attr-defined]
    return traced


def _legacy_construct(cls: type, *args: Any, **kwargs: Any) -> torch.Tensor:
    with _no_modes():
        return torch._C.TensorBase.__new__(cls, *args, **kwargs)


def _build_without_the_modes(cls: type) -> None:
    """``cls`` and its subclasses, where they take torch's legacy constructor (no ``__new__``
    of their own: a wrapper subclass or ``nn.Parameter`` has one), build with the modes off."""
    for sub in (cls, *cls.__subclasses__()):
        if sub is not cls:
            _build_without_the_modes(sub)
        elif cls is not torch.Tensor and cls.__new__ is torch._C.TensorBase.__new__ \
                and not cls.__module__.startswith("torch."):
            cls.__new__ = staticmethod(_legacy_construct)  # type: ignore[assignment]


def subclasses_build_as_on_a_mac() -> None:
    """Old-style Tensor subclasses build as on a Mac (see the module's docstring): those
    defined so far, and, through ``__init_subclass__``, those defined later."""
    if getattr(torch.Tensor.__dict__.get("__init_subclass__"), "_porter_emulation", False):
        return
    previous = torch.Tensor.__dict__.get("__init_subclass__")  # a hook of the program's own, kept

    def __init_subclass__(cls: type, **kwargs: Any) -> None:
        if isinstance(previous, classmethod):
            previous.__func__(cls, **kwargs)
        else:
            super(torch.Tensor, cls).__init_subclass__(**kwargs)
        _build_without_the_modes(cls)

    __init_subclass__._porter_emulation = True  # type: ignore[attr-defined]
    torch.Tensor.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
    _build_without_the_modes(torch.Tensor)


def trace_without_the_modes() -> None:
    """The tracers run with the emulation's modes off (see the module's docstring)."""
    jit = torch.jit
    for name in ("trace", "trace_module"):
        if hasattr(jit, name) and not getattr(getattr(jit, name), "_porter_emulation", False):
            setattr(jit, name, _stepping_aside(getattr(jit, name)))
    onnx = getattr(torch, "onnx", None)
    export = getattr(onnx, "export", None)
    if export is not None and not getattr(export, "_porter_emulation", False):
        onnx.export = _stepping_aside(export)
