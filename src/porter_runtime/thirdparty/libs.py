"""Which CUDA-only third-party libraries (apex, xformers, adam_atan2, bitsandbytes) to use.

A library is used exactly where the original code would have run: on CUDA, when it
imports. Each import is tried once per process; ``_reset()`` forgets the answers (for
tests that install fake modules or simulate another machine).
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Optional

from .. import _device, _log

_modules: dict[str, Optional[ModuleType]] = {}
_errors: dict[str, str] = {}


def module(name: str) -> Optional[ModuleType]:
    """``name`` imported (checked once), or None when it does not import."""
    if name not in _modules:
        try:
            _modules[name] = importlib.import_module(name)
        except Exception as exc:  # ImportError, or a broken CUDA extension (OSError, ...)
            _modules[name] = None
            _errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return _modules[name]


def cuda_attr(module_name: str, attr: str) -> Optional[Any]:
    """``module_name.attr`` when the runtime resolved to CUDA and the module imports.

    On CUDA, where the original code would have called it, a missing module or name
    is a departure: one warning names it and says that PyTorch code runs instead."""
    if not _device.is_cuda():
        return None
    found = module(module_name)
    value = getattr(found, attr, None) if found is not None else None
    if value is None:
        why = f"it failed to import ({_errors.get(module_name, '')})" if found is None \
            else f"the installed {module_name} has no {attr}"
        departed(f"{module_name}.{attr}", why)
    return value


def departed(name: str, why: str) -> None:
    """Warn once that ``name`` is not used on this CUDA machine, and why."""
    _log.warn_once(f"cuda-departure:{name}", f"{name} is not used on CUDA: {why}; running "
                   "porter_runtime's PyTorch implementation of it instead")


def _reset() -> None:
    _modules.clear()
    _errors.clear()


def twins_stand_in(library: str) -> bool:
    """Whether porter_runtime's twins of ``library`` stand in for it: True off CUDA, where
    the original could not use the library and the ported calls run the twins; False on
    CUDA, where the original's own answer stands (a module's availability flag that
    porter sets to this in its ``except ImportError:`` keeps False there)."""
    return not _device.is_cuda()
