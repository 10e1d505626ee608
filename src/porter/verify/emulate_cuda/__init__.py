"""``--emulate cuda``: a CUDA machine on this CPU, to show what a port changes on CUDA.

Porter's first promise is that a ported repository behaves on CUDA exactly as the original
did. Checking it needs a GPU, which is rarely at hand; this emulation lets both trees run on
a CPU-only torch *as if* on a CUDA machine, so that their outputs can be compared (porter
verify --against ORIGINAL --emulate cuda, bench/differential.py --emulate cuda):

* ``torch.cuda.is_available()`` is true, with ``device_count()`` devices (1, the local world
  size under torchrun, or PORTER_EMULATE_CUDA_DEVICES); current device, set_device,
  device properties, capability (8, 0), bf16 support, memory queries (0 used), streams,
  events (timed by the clock), NVTX ranges and ``torch.accelerator`` answer as on one;
* a tensor made on or moved to ``"cuda"`` (a string, a ``torch.device``, an integer index,
  ``.cuda()``, ``map_location``, a checkpoint saved from CUDA) lives on the CPU, carries a
  mark with its device index, reports ``device == cuda:N`` and ``is_cuda``, and passes the
  mark to whatever an operator computes from it; ``.cpu()`` / ``.to("cpu")`` are host
  copies, and ``.numpy()`` of a device tensor raises as CUDA does;
* random numbers for device tensors come from per-device generators of their own, seeded by
  ``torch.cuda.manual_seed`` / ``torch.manual_seed`` and read by ``get_rng_state`` as on
  CUDA, so host and device draws stay apart; ``torch.Generator(device="cuda")`` is one;
* autocast on ``"cuda"`` is the CPU's autocast at CUDA's default dtype (float16), a
  GradScaler on ``"cuda"`` stays enabled, pinned memory is a host copy;
* NCCL process groups are carried by Gloo; DistributedDataParallel gets no device ids;
  ``torch.compile`` returns the code it is given (no compiler is involved on either side).

It checks that code takes its CUDA paths and computes the same on both sides; it can't
show CUDA's numerics, kernels (a CUDA-only package is as missing as it is here) or speed.
This file is copied beside a ``sitecustomize.py`` into the runs' ``PYTHONPATH``, so it
imports nothing but torch and the standard library.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

#: porter verify's guard (verify/guard.py, which can't import porter: the same name there)
#: starts the emulation in every interpreter where this is set.
VARIABLE = "PORTER_EMULATE_CUDA"
#: The package's name in a run's site folder (porter itself need not be importable there).
MODULE = "_porter_cuda_emulation"
_SITE = f"""# porter --emulate cuda: this interpreter and every one it starts is a CUDA machine
import {MODULE}
{MODULE}.install()
"""


def install() -> None:
    """Make this process a CUDA machine (once). Imports torch: porter's own process never
    calls it, only the runs' interpreters (through write_site's sitecustomize)."""
    import torch

    from . import machine
    from .tensors import _INSTALLED, _enter_modes

    if getattr(torch, _INSTALLED, False):
        return
    setattr(torch, _INSTALLED, True)
    machine.install()
    _enter_modes()


def copy_package(folder: Any) -> None:
    """This package into ``folder``, as ``_porter_cuda_emulation`` (importable there without porter)."""
    shutil.copytree(Path(__file__).parent, Path(folder) / MODULE, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))


def write_site(folder: Any, then: str = "") -> str:
    """A folder for PYTHONPATH whose ``sitecustomize`` installs the emulation (then runs
    ``then``, code of the caller's own) in every interpreter a run starts; its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    copy_package(folder)
    (folder / "sitecustomize.py").write_text(_SITE + then, encoding="utf-8")
    return str(folder)
