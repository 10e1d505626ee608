"""PORTER_EMULATE=mps: run on the CPU under MPS's rules, to find what fails only on a Mac.

Tensors stay on the CPU; the device resolver answers "mps" to every policy
(_device.py) and a dispatch mode enforces MPS's contract for the installed torch:

* no float64 (or complex128, float8) tensor on the device: MPS's own TypeError;
* an operator with no MPS kernel in that torch version (tools/mps_coverage.py) raises
  MPS's NotImplementedError, or with PYTORCH_ENABLE_MPS_FALLBACK=1 runs and is
  counted, with its first call site, for the summary printed at exit;
* a collective (Gloo: the only backend on macOS) of a device tensor raises as Gloo does;
* multiprocessing starts processes with spawn, as on macOS;
* FlexAttention's forward runs (its backward is refused, as torch refuses it on MPS), and
  ``torch.accelerator.current_accelerator()`` is the emulated device, as MPS is on a Mac;
* the code's own "mps" (``torch.backends.mps.is_available()``, ``.to("mps")``,
  ``torch.mps.synchronize()``) answers as on a Mac (tools/mps_names.py).

Which tensors are "on the device": those made by a factory given the resolved device
(``porter_runtime.device()``, the marked ``cpu:0``), those moved there with
``.to(device)``, and whatever an operator computes from one of them. A tensor made
without a device, or moved with ``.to("cpu")`` / ``.cpu()``, is a host tensor, as on
a Mac (those two copy a device tensor, as they do there). The mark sits on the
tensor's storage, so views, ``param.data = ...`` and in-place ops keep it, and a
marked tensor's ``.device`` is the emulated device, so ``device=x.device`` and
``.to(x.device)`` stay on it; ``torch.as_tensor(x, device="cpu")`` is a host copy too,
and ``torch.tensor(data, device=d)`` / ``torch.as_tensor(data, device=d)`` are on the
device.
Known gaps: threads other than the one that imported the runtime are not checked (the
mode is per thread); numerics and speed are the CPU's, not MPS's.
"""
from __future__ import annotations

import atexit
import json
import os
import sys
import sysconfig
from typing import Any, Optional

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .. import _compat, _device, _log
from . import mps_coverage as _mps_coverage
from . import mps_names

LABEL = _device.EMULATION_LABEL
_MARK = "_porter_emulated_mps"
#: The text MPS raises when it allocates a float64 tensor (facts §2).
FLOAT64 = ("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support "
           "float64. Please use float32 instead.")
_UNSUPPORTED = {torch.complex128: "ComplexDouble", torch.float8_e4m3fn: "Float8_e4m3fn"}
#: Ops MPS always runs on the CPU, fallback variable or not (MPSFallback.mm, facts §9).
ALWAYS_CPU = frozenset({"_linalg_svd", "_linalg_svd.U", "col2im", "upsample_nearest3d.vec",
                        "embedding_renorm_"})
#: Ops the table lists as missing that a CPU run reaches where MPS takes another path:
#: the fast paths of nn.MultiheadAttention / TransformerEncoderLayer (CPU and CUDA only),
#: CPU attention and convolution kernels, and CUDA-only fused kernels.
NOT_REACHED_ON_MPS = frozenset({
    "_native_multi_head_attention", "_transformer_encoder_layer_fwd", "_transform_bias_rescale_qkv",
    "_masked_softmax", "_fused_sdp_choice", "_scaled_dot_product_flash_attention_for_cpu",
    "_slow_conv2d_forward", "slow_conv3d_forward", "slow_conv_dilated2d", "slow_conv_dilated3d",
    "slow_conv_transpose2d", "slow_conv_transpose3d", "_conv_depthwise2d", "conv_depthwise3d",
    "_thnn_fused_gru_cell", "_thnn_fused_lstm_cell", "_add_relu.Tensor", "_add_relu.Scalar",
    "_add_relu_.Tensor", "_add_relu_.Scalar", "_addmm_activation", "_make_dep_token",
    "_functional_assert_async.msg",
})
_ISSUE = "https://github.com/pytorch/pytorch/issues/141287"
_TO_COPY = torch.ops.aten._to_copy.default
_COPY = torch.ops.aten.copy_.default


def _marked(t: torch.Tensor) -> bool:
    try:
        return bool(getattr(t.untyped_storage(), _MARK, False))
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, meta tensors
        return False


def _mark(t: torch.Tensor) -> None:
    try:
        setattr(t.untyped_storage(), _MARK, True)
    except (RuntimeError, NotImplementedError, TypeError, AttributeError):
        pass


def _is_emulated(device: Any) -> bool:
    """The emulated device (``cpu:0``) where this process ran on it: while it does, and
    after a process group moved it to the CPU, since a device object kept from before (a
    default argument, a module constant: edm's) is still MPS on a Mac, and so is what is
    made there (Gloo then refuses it, float64 fails). A process that resolved to the CPU
    from the start (a process-group launch, as on a Mac) has no MPS device: there
    ``cpu:0`` is the CPU (accelerate's device on a multi-CPU launch)."""
    return isinstance(device, torch.device) and device == _device.EMULATED and (
        _device.resolve(announce=False).device == _device.EMULATED or _device.was_emulated())


def op_key(func: Any) -> str:
    """``heaviside`` or ``_ctc_loss.Tensor``: the coverage table's name for an operator."""
    name = func._schema.name.split("::", 1)[-1]
    return name if func._overloadname == "default" else f"{name}.{func._overloadname}"


def fallback_enabled(environ: Any = os.environ) -> bool:
    """PYTORCH_ENABLE_MPS_FALLBACK as torch parses it (std::stoi: "1" on, "0" off)."""
    try:
        return int(environ.get("PYTORCH_ENABLE_MPS_FALLBACK", "0").strip() or "0") != 0
    except ValueError:
        return False


class Fallbacks:
    """The operators that ran on the CPU fallback: calls and the first call site."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.first: dict[str, str] = {}

    def add(self, op: str) -> None:
        if op not in self.calls:
            self.first[op] = call_site()
        self.calls[op] = self.calls.get(op, 0) + 1

    def rows(self) -> list[dict]:
        return [{"op": f"aten::{op}", "calls": n, "first_at": self.first[op], "always": op in ALWAYS_CPU}
                for op, n in sorted(self.calls.items(), key=lambda kv: -kv[1])]


def _library_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    places = {os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)),
              paths.get("stdlib", ""), paths.get("purelib", ""), paths.get("platlib", "")}
    return tuple(os.path.realpath(p) + os.sep for p in places if p)


def call_site() -> str:
    """``file:line`` of the innermost frame in the user's code (not torch, the runtime,
    the standard library or installed packages); relative to the working folder."""
    skip = _library_folders()
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        real = os.path.realpath(name)
        if not name.startswith("<") and not real.startswith(skip):
            try:
                shown = os.path.relpath(real)
            except ValueError:
                shown = real
            return f"{real if shown.startswith('..') else shown}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


class MpsContract(TorchDispatchMode):
    """Enforces MPS's contract on the operators of tensors on the (emulated) device."""

    def __init__(self, version: tuple, fallback: bool) -> None:
        super().__init__()
        self.version = version
        self.fallback = fallback
        self.fallbacks = Fallbacks()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = kwargs.get("device")
        if func is _TO_COPY and target is not None and not _is_emulated(target):
            return func(*args, **kwargs)  # to the host (``.to("cpu")``): no longer on the device
        if func is _COPY and not _marked(args[0]):
            return func(*args, **kwargs)  # into a host tensor (``host.copy_(x)``), as MPS allows
        tensors = [a for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        if not (_is_emulated(target) or any(_marked(t) for t in tensors)):
            return func(*args, **kwargs)
        if func.namespace in ("c10d", "_c10d_functional"):  # Gloo is the only backend on macOS
            raise RuntimeError(_gloo_error(func, tensors))
        self._check_kernel(op_key(func))
        return _on_the_device(func(*args, **kwargs))

    def _check_kernel(self, op: str) -> None:
        if op in ALWAYS_CPU:
            self.fallbacks.add(op)
            return
        if op in NOT_REACHED_ON_MPS or _mps_coverage.missing(op, self.version) != "M":
            return
        if not self.fallback:
            raise NotImplementedError(missing_kernel_message(op))
        if op not in self.fallbacks.calls:
            _log.warn_once(f"emulate:fallback:{op}", f"({LABEL}) The operator 'aten::{op}' is not currently "
                           "supported on the MPS backend and will fall back to run on the CPU. This may have "
                           "performance implications.")
        self.fallbacks.add(op)


def _on_the_device(out: Any) -> Any:
    """What an operator computed on the device: MPS's dtype checks, then the device mark
    on every tensor of it."""
    for t in pytree.tree_leaves(out):
        if isinstance(t, torch.Tensor):
            _check_dtype(t.dtype)
            _mark(t)
    return out


def missing_kernel_message(op: str) -> str:
    """MPS's NotImplementedError text for ``op`` (facts §9), labelled as emulated."""
    return (f"The operator 'aten::{op}' is not currently implemented for the MPS device. If you want "
            f"this op to be considered for addition please comment on {_ISSUE} and mention use-case, "
            "that resulted in missing op as well as commit hash. As a temporary fix, you can set the "
            "environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for this "
            "op. WARNING: this will be slower than running natively on MPS. "
            f"[porter_runtime: {LABEL}; torch {torch.__version__} has no MPS kernel for it]")


def _check_dtype(dtype: torch.dtype) -> None:
    if dtype == torch.float64 and not _torch_branches_on_mps():
        _refuse(TypeError(f"{FLOAT64} [porter_runtime: {LABEL}]"))
    if dtype in _UNSUPPORTED:
        _refuse(TypeError(f"Trying to convert {_UNSUPPORTED[dtype]} to the MPS backend but it does not have "
                          f"support for that dtype. [porter_runtime: {LABEL}]"))


#: torch's own code that takes another path when a tensor's device is ``mps:0`` (which an
#: emulated tensor, on ``cpu:0``, can't be): GradScaler.unscale_ takes the reciprocal of
#: the scale in float64 except on MPS.
_MPS_BRANCHES = (("amp", "grad_scaler.py"),)


def _torch_branches_on_mps() -> bool:
    """Whether the float64 comes from torch code that avoids it on a real Mac."""
    frame = sys._getframe(2)
    while frame is not None:
        parts = frame.f_code.co_filename.replace("\\", "/").split("/")
        if any(tuple(parts[-2:]) == branch and "torch" in parts for branch in _MPS_BRANCHES):
            return True
        frame = frame.f_back
    return False


def _refuse(error: TypeError) -> None:
    """Raise MPS's TypeError, saying where first: an operator (``a + b``) turns a
    TypeError into Python's "unsupported operand type(s)", which names no cause."""
    site = call_site()
    _log.info_once(f"emulate:refused:{site}", f"MPS refuses this at {site}: {error}")
    raise error


def _gloo_error(func: Any, tensors: list) -> str:
    """Gloo's refusal of an MPS tensor (facts §7): macOS builds only Gloo, which takes
    CPU (and CUDA) tensors."""
    name = func._schema.name.split("::", 1)[-1].rstrip("_")
    index = next((i for i, t in enumerate(tensors) if _marked(t)), 0)
    dtype = str(tensors[index].dtype).replace("torch.", "") if tensors else "float"
    options = "layout=Strided, requires_grad=false (default), pinned_memory=false (default), " \
              "memory_format=(nullopt)"
    return (f"ProcessGroupGloo::{name}: invalid tensor type at index {index} (expected TensorOptions("
            f"dtype={dtype}, device=cpu, {options}), got TensorOptions(dtype={dtype}, device=mps:0, {options}))"
            f" [porter_runtime: {LABEL}; Gloo, the only backend on macOS, cannot send MPS tensors]")


def _to_host(tensor: torch.Tensor, moved: torch.Tensor) -> torch.Tensor:
    """``moved`` (the result of ``.cpu()`` / ``.to("cpu")``): on a Mac a device tensor's move to the
    host is a copy; here the CPU returns the tensor itself, so copy it and leave the copy unmarked."""
    if moved is not tensor or not _marked(tensor):
        return moved
    copy = tensor.clone()
    try:
        delattr(copy.untyped_storage(), _MARK)
    except AttributeError:
        pass
    return copy


def _names_host(args: tuple, kwargs: dict) -> bool:
    wanted = kwargs.get("device", args[0] if args and isinstance(args[0], (str, torch.device)) else None)
    try:
        return wanted is not None and torch.device(wanted) == torch.device("cpu")
    except (RuntimeError, TypeError):
        return False


def patch_host_moves() -> None:
    """``x.cpu()`` and ``x.to("cpu")`` of a device tensor copy it to the host, as on MPS;
    a device tensor's ``.device`` is the emulated device (an MPS tensor's is ``mps:0``)."""
    cpu, to = torch.Tensor.cpu, torch.Tensor.to
    real_device = torch._C.TensorBase.device.__get__

    def device(self: torch.Tensor) -> torch.device:
        found = real_device(self)
        return _device.EMULATED if found.type == "cpu" and _marked(self) else found

    def to_cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return _to_host(self, cpu(self, *args, **kwargs))

    def move(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if _marked(self) and mps_names.to_the_same_place(args, kwargs):
            return self  # to the device it is on: the tensor itself, as on MPS
        moved = to(self, *args, **kwargs)
        return _to_host(self, moved) if _names_host(args, kwargs) else moved

    torch.Tensor.cpu, torch.Tensor.to = to_cpu, move
    torch.Tensor.device = property(device, doc=torch._C.TensorBase.device.__doc__)
    as_tensor, tensor = torch.as_tensor, torch.tensor

    def as_tensor_to_host(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        """``torch.as_tensor(device_tensor, device="cpu")`` copies to the host on a Mac
        (segment-anything's ``v[torch.as_tensor(keep, device=v.device)]``); given the
        device, the tensor is on it."""
        out = as_tensor(data, *args, **kwargs)
        wanted = kwargs.get("device", args[1] if len(args) > 1 else None)
        if isinstance(data, torch.Tensor) and wanted is not None and _names_host((wanted,), {}):
            return _to_host(data, out)
        return _made_on(wanted, out)

    def tensor_on_the_device(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        """``torch.tensor(data, device=<the device>)`` is on it (MoBA's ``cu_seqlens``)."""
        return _made_on(kwargs.get("device"), tensor(data, *args, **kwargs))

    torch.as_tensor = _scriptable(as_tensor, as_tensor_to_host)
    torch.tensor = _scriptable(tensor, tensor_on_the_device)


def _made_on(wanted: Any, out: torch.Tensor) -> torch.Tensor:
    """``out`` (``torch.tensor`` / ``as_tensor``, which the dispatch mode never sees with a
    device) marked as on the device where ``wanted`` is it or "mps", after MPS's dtype check."""
    if isinstance(wanted, (str, torch.device)):
        try:
            device = torch.device(mps_names.emulated(wanted))
        except (RuntimeError, TypeError):
            return out
        if _is_emulated(device) and isinstance(out, torch.Tensor):
            _check_dtype(out.dtype)
            _mark(out)
    return out


def _scriptable(original: Any, wrapper: Any) -> Any:
    """``wrapper`` (a Python function standing in for a torch function) registered as the
    same TorchScript operator as ``original``: scripted code (``torch.jit.script`` of
    torchvision's ``Normalize``, which calls ``torch.as_tensor``) compiles as on a Mac,
    where the function is torch's own, instead of failing on a function it cannot
    compile."""
    try:
        from torch.jit import _builtins
        op = _builtins._get_builtin_table().get(id(original))
        if op is not None:
            _builtins._register_builtin(wrapper, op)
    except (ImportError, AttributeError):  # torch's private table moved: scripting is then as before
        pass
    return wrapper


def accelerator_is_the_device() -> None:
    """``torch.accelerator.current_accelerator()`` is ``mps`` on a Mac: torch APIs that
    default their device to it (``create_block_mask(..., device=None)``) must land on the
    emulated device, not the host (attention-gym's paged attention)."""
    accelerator = getattr(torch, "accelerator", None)
    real = getattr(accelerator, "current_accelerator", None)
    if real is None:
        return

    def current_accelerator(check_available: bool = False) -> Optional[torch.device]:
        return _device.EMULATED if _is_emulated(_device.EMULATED) else real(check_available)

    accelerator.current_accelerator = current_accelerator


def dataloader_does_not_pin() -> None:
    """torch's DataLoader turns ``pin_memory=True`` off on MPS with a warning (facts §6);
    with the emulated accelerator it would try to pin for it, which this CPU build can't."""
    import torch.utils.data._utils.pin_memory as pinning

    real_pin = pinning.pin_memory

    def pin_memory(data: Any, device: Any = None) -> Any:
        if device is not None and str(device) == _device.EMULATED.type:
            _log.warn_once("emulate:pin_memory", "'pin_memory' argument is set as true but not supported on MPS "
                           "now, device pinned memory won't be used.")
            return data
        return real_pin(data, device)

    pinning.pin_memory = pin_memory


def flex_attention_rule() -> None:
    """FlexAttention's forward runs on MPS (torch >= 2.8; its backward does not, and torch
    says so before dispatch): give the ``flex_attention`` operator, which the dispatch mode
    otherwise refuses, the dense implementation torch runs outside compiled code, with
    MPS's dtype checks and the device mark on what it returns. torch's eager wrapper
    (``torch.compile(backend="eager")``) can't trace under the mode, so it is skipped, as
    torch's own debug switch does."""
    try:
        from torch._higher_order_ops.flex_attention import flex_attention, sdpa_dense
        import torch.nn.attention.flex_attention as api
    except ImportError:  # a torch without FlexAttention
        return
    api._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True

    @flex_attention.py_impl(MpsContract)
    def _under_contract(mode: MpsContract, *args: Any, **kwargs: Any) -> Any:
        return _on_the_device(sdpa_dense(*args, **kwargs))


def _restore(storage: Any, location: str) -> Any:
    """``torch.load(..., map_location=device)`` with the emulated device (``"cpu:0"``):
    stock torch knows no such location; MPS's own deserializer moves the storage to the
    device, so here it is marked as on the device."""
    if location != str(_device.EMULATED):
        return None
    setattr(storage, _MARK, True)
    return storage


def load_to_the_device() -> None:
    import torch.serialization as serialization

    serialization.register_package(11, lambda obj: None, _restore)


def spawn_by_default() -> None:
    """macOS starts processes with spawn: make it the default start method without
    fixing it, so that the code's own ``set_start_method`` still works as there."""
    import multiprocessing.context as context

    default = context._default_context
    spawn = getattr(context, "_concrete_contexts", {}).get("spawn")
    if spawn is not None and getattr(default, "_actual_context", None) is None:
        default._default_context = spawn


_mode: Optional[MpsContract] = None


#: Where the process's emulation is kept, whichever copy of the runtime started it: a
#: repository can hold two copies (the root one and one in its package) and a script can
#: load both; a second emulation stacked on the first would mark, patch and register
#: everything twice (torch refuses a second checkpoint loader of the same priority).
_PROCESS_KEY = "_porter_runtime_emulation"


def install() -> Optional[MpsContract]:
    """Start the emulation when PORTER_EMULATE=mps (once per process, across copies of
    the runtime; else nothing)."""
    global _mode
    if _mode is None:
        _mode = getattr(sys, _PROCESS_KEY, None)
    if _mode is not None or not _compat.emulated():
        return _mode
    _mode = MpsContract(_compat.torch_version(), fallback_enabled())
    setattr(sys, _PROCESS_KEY, _mode)
    _mode.__enter__()  # stays on for the life of the thread that imported the runtime
    patch_host_moves()
    accelerator_is_the_device()
    dataloader_does_not_pin()
    flex_attention_rule()
    load_to_the_device()
    spawn_by_default()
    mps_names.answer_as_a_mac()
    fallback = "on" if _mode.fallback else "off"
    _log.info_once("emulate", f"{LABEL} (torch {torch.__version__}'s MPS kernels, "
                   f"PYTORCH_ENABLE_MPS_FALLBACK {fallback}, spawn start method)")
    _write_report(started=True)
    atexit.register(_at_exit)
    return _mode


def summary_lines(rows: list[dict]) -> list[str]:
    """The fallback summary printed at exit."""
    if not rows:
        return []
    many = f"{len(rows)} operator{'s' if len(rows) != 1 else ''}"
    lines = [f"porter_runtime: {LABEL}: {many} fell back to the CPU, as on a Mac with torch "
             f"{torch.__version__} (each call copies its tensors to the CPU and back):"]
    width = max(len(r["op"]) for r in rows)
    for r in rows:
        calls = f"{r['calls']} call{'s' if r['calls'] != 1 else ''}"
        note = " (MPS always runs it on the CPU)" if r["always"] else ""
        lines.append(f"  {r['op']:<{width}}  {calls:>10}  first at {r['first_at']}{note}")
    return lines


def _at_exit() -> None:
    if _mode is None:
        return
    lines = summary_lines(_mode.fallbacks.rows())
    if lines:
        print("\n".join(lines), file=sys.stderr)
    _write_report(started=True)


def _write_report(started: bool) -> None:
    """For porter verify: this process's fallbacks as JSON in PORTER_EMULATE_REPORT_DIR."""
    folder = os.environ.get("PORTER_EMULATE_REPORT_DIR")
    if not folder or _mode is None:
        return
    data = {"pid": os.getpid(), "argv": sys.argv, "torch": torch.__version__, "started": started,
            "fallback_enabled": _mode.fallback, "fallbacks": _mode.fallbacks.rows()}
    try:
        with open(os.path.join(folder, f"emulate-{os.getpid()}.json"), "w", encoding="utf-8") as out:
            json.dump(data, out)
    except OSError:
        pass
