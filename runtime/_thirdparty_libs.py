"""Which CUDA-only third-party libraries (apex, xformers, adam_atan2, bitsandbytes) to use.

A library is used exactly where the original code would have run: on CUDA, when it
imports. Each import is tried once per process; ``_reset()`` forgets the answers (for
tests that install fake modules or simulate another machine).
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Optional

from . import _device

_modules: dict[str, Optional[ModuleType]] = {}


def module(name: str) -> Optional[ModuleType]:
    """``name`` imported (checked once), or None when it does not import."""
    if name not in _modules:
        try:
            _modules[name] = importlib.import_module(name)
        except Exception:  # ImportError, or a broken CUDA extension (OSError, ...)
            _modules[name] = None
    return _modules[name]


def cuda_attr(module_name: str, attr: str) -> Optional[Any]:
    """``module_name.attr`` when the runtime resolved to CUDA and the module imports."""
    if not _device.is_cuda():
        return None
    found = module(module_name)
    return getattr(found, attr, None) if found is not None else None


def _reset() -> None:
    _modules.clear()
