"""detectron2's config, whose defaults name CUDA where the repository's code never does.

A project built on detectron2 (Mask2Former, MaskFormer, Detic: blind round 18) starts
from ``get_cfg()``, whose ``MODEL.DEVICE`` default is ``"cuda"``, and merges its YAML
files into it, which often switch on ``SOLVER.AMP.ENABLED``. Neither value is in the
repository's Python, so no rule sees it: off CUDA ``build_model`` fails with "Torch not
compiled with CUDA enabled" and ``AMPTrainer`` asserts "CUDA is required for AMP
training". :func:`detectron2_config` fixes both where the config is read: TP710 wraps
``get_cfg()`` in it, and the config the code freezes after its merges.
"""
from __future__ import annotations

import warnings
from typing import Any, TypeVar

from .. import _device

T = TypeVar("T")


def detectron2_config(cfg: T) -> T:
    """detectron2's config, as detectron2 would use it on this machine.

    On CUDA it is ``cfg`` itself, untouched. Elsewhere a ``"cuda"`` ``MODEL.DEVICE`` (the
    default, or ``"cuda:1"``) becomes the resolved device (``"mps"``, ``"cpu"``), and
    ``SOLVER.AMP.ENABLED`` is turned off with a warning (detectron2's ``AMPTrainer``
    runs only on CUDA; the run trains in float32). TP710 calls it on ``get_cfg()`` and
    again on the config the code freezes, after its YAML files and command line were
    merged in. A frozen config, or anything else, is returned as it is."""
    if not _device.is_cuda() and isinstance(cfg, dict):
        _off_cuda(cfg)
    return cfg


def _off_cuda(cfg: Any) -> None:
    if callable(getattr(cfg, "is_frozen", None)) and cfg.is_frozen():
        return
    model = cfg.get("MODEL")
    device = model.get("DEVICE") if isinstance(model, dict) else None
    if isinstance(device, str) and device.split(":")[0] == "cuda":
        model["DEVICE"] = _device.device_str(device)
    solver = cfg.get("SOLVER")
    amp = solver.get("AMP") if isinstance(solver, dict) else None
    if isinstance(amp, dict) and amp.get("ENABLED"):
        amp["ENABLED"] = False
        warnings.warn("porter_runtime: SOLVER.AMP.ENABLED is off: detectron2's AMPTrainer runs only on CUDA, "
                      "so this run trains in float32", stacklevel=3)
