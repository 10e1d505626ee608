"""timm before 0.5: ``Mixup``'s targets are made on ``device='cuda'``.

timm 0.3.2 to 0.4.12 (the versions DeiT, MAE and ConvNeXt pin) define
``mixup_target(target, num_classes, lam=1., smoothing=0.0, device='cuda')`` and
``one_hot(..., device='cuda')`` in ``timm.data.mixup``, and ``Mixup.__call__`` calls
``mixup_target`` without a device: the first training step off CUDA fails with "Torch not
compiled with CUDA enabled". timm 0.5 and later make the targets on the input's device.

:func:`timm_mixup` takes the ``Mixup`` the code built and returns it. On CUDA it changes
nothing. Elsewhere it sets those two functions' ``'cuda'`` default to the resolved device
(once, said once), which is where the code moved its targets: the same one-hot targets,
on the device the batch is on. Newer timm has no such default and is left alone.
"""
from __future__ import annotations

import sys
from typing import Any

from .. import _device, _log

_FUNCTIONS = ("mixup_target", "one_hot")


def timm_mixup(mixup: Any) -> Any:
    """``mixup`` itself; off CUDA, timm's CUDA default for its targets' device made the
    resolved device first."""
    if _device.device().type == "cuda":
        return mixup
    module = sys.modules.get(type(mixup).__module__)
    changed = []
    for name in _FUNCTIONS:
        function = getattr(module, name, None)
        defaults = getattr(function, "__defaults__", None)
        if defaults and "cuda" in defaults:
            function.__defaults__ = tuple(_device.device_str() if d == "cuda" else d for d in defaults)
            changed.append(name)
    if changed:
        _log.info_once("timm_mixup", f"timm's {' and '.join(changed)} default to device='cuda' "
                       f"(timm < 0.5); Mixup's targets are made on {_device.device_str()} instead")
    return mixup
