"""Lightning's ``Fabric(...)`` / ``Trainer(...)``: the accelerator and strategy a CUDA
machine was told to use, chosen for the machine the code runs on.

``accelerator="cuda"`` (or ``"gpu"``) makes Lightning raise off CUDA ("CUDAAccelerator can
not run on your system"), and its FSDP and DeepSpeed strategies are GPU-only ("FSDP is only
available on GPU"). On CUDA both functions return what they are given. Elsewhere:

* :func:`lightning_accelerator` answers ``"mps"`` on a Mac whose MPS Lightning can use, and
  ``"cpu"`` otherwise (also under ``--emulate mps``: Lightning checks the real hardware, and
  the emulated device lives on the CPU);
* :func:`lightning_strategy` replaces an FSDP or DeepSpeed strategy (an instance or its
  name) with ``"auto"``: Lightning then takes one device, or DDP over Gloo for several
  processes on the CPU, and the model is trained unsharded. Other strategies are kept;
* :func:`lightning_args` does both to the options ``Trainer.from_argparse_args(args)``
  reads (``--accelerator gpu --strategy deepspeed_stage_2`` on a command line).
"""
from __future__ import annotations

from typing import Any

from .. import _device, _log

#: Strategies that need CUDA (Lightning's own names and classes, lower case).
_GPU_ONLY = ("fsdp", "deepspeed")


def lightning_accelerator(name: Any) -> Any:
    """``name`` on CUDA; off CUDA the accelerator Lightning can use here."""
    if _device.is_cuda() or str(name).lower() not in ("cuda", "gpu"):
        return name
    chosen = "mps" if _device.hardware_type() == "mps" else "cpu"
    _log.info_once("lightning_accelerator", f"Lightning's accelerator={name!r} needs CUDA; "
                   f"using accelerator={chosen!r} here")
    return chosen


def lightning_strategy(strategy: Any) -> Any:
    """``strategy`` on CUDA, or where it runs without CUDA; an FSDP or DeepSpeed strategy
    becomes ``"auto"`` elsewhere."""
    if _device.is_cuda():
        return strategy
    name = strategy if isinstance(strategy, str) else type(strategy).__name__
    if not any(word in name.lower() for word in _GPU_ONLY):
        return strategy
    _log.warn_once("lightning_strategy", f"Lightning's {name} strategy runs on CUDA only; "
                   "using strategy='auto' here (one device, or DDP over Gloo): the model is not sharded")
    return "auto"


def lightning_args(args: Any) -> Any:
    """``Trainer.from_argparse_args(args)``: ``args`` itself, changed off CUDA where the
    command line asked for CUDA: its ``accelerator`` and ``strategy`` as the two functions
    above choose them, and Lightning 1.x's ``gpus`` count unset. The namespace is changed
    in place, so the script's own later tests (``if "deepspeed" in args.strategy:``) see
    what Lightning was given. On CUDA nothing changes."""
    if _device.is_cuda():
        return args
    for name, choose in (("accelerator", lightning_accelerator), ("strategy", lightning_strategy)):
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, choose(value))
    if getattr(args, "gpus", None) not in (None, 0, "0", ""):
        _log.info_once("lightning_gpus", f"Lightning's gpus={args.gpus!r} needs CUDA; unset here")
        args.gpus = None
    return args


def lightning_options(options: Any) -> Any:
    """``Trainer(**options)`` / ``Fabric(**options)``: ``options`` itself on CUDA; elsewhere
    a plain dict copy (a Hydra / OmegaConf trainer config stays as it was) whose
    ``accelerator`` and ``strategy`` the two functions above choose, without Lightning 1.x's
    ``gpus`` count where it asked for GPUs."""
    if _device.is_cuda():
        return options
    chosen = dict(options)
    for name, choose in (("accelerator", lightning_accelerator), ("strategy", lightning_strategy)):
        if name in chosen and chosen[name] is not None:
            chosen[name] = choose(chosen[name])
    if chosen.get("gpus") not in (None, 0, "0", ""):
        _log.info_once("lightning_gpus", f"Lightning's gpus={chosen['gpus']!r} needs CUDA; unset here")
        chosen["gpus"] = None
    return chosen
