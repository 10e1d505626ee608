"""Twins of bitsandbytes' 8-bit and paged optimizers (``porter_runtime.bnb_optim``).

``porter_runtime.bnb_optim.AdamW8bit(params, ...)`` is bitsandbytes' own optimizer on
CUDA when bitsandbytes imports. Elsewhere it is the torch optimizer with the same update
rule and 32-bit state (torch.optim.Adam / AdamW / SGD / RMSprop / Adagrad, whose
leading arguments have bitsandbytes' order and defaults); the bitsandbytes-only options
(optim_bits, min_8bit_size, percentile_clipping, block_wise, is_paged, args) are
dropped, and a one-time warning says so. The results differ from 8-bit state by the
quantisation error, which is why porter applies this rewrite only with --unsafe-fixes.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .. import _log
from . import libs as _libs

#: torch optimizer, and the arguments after ``params`` that it shares with bitsandbytes.
_FAMILIES: dict[str, tuple[type, tuple[str, ...]]] = {
    "Adam": (torch.optim.Adam, ("lr", "betas", "eps", "weight_decay", "amsgrad")),
    "AdamW": (torch.optim.AdamW, ("lr", "betas", "eps", "weight_decay", "amsgrad")),
    "SGD": (torch.optim.SGD, ("lr", "momentum", "dampening", "weight_decay", "nesterov")),
    "RMSprop": (torch.optim.RMSprop,
                ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")),
    "Adagrad": (torch.optim.Adagrad,
                ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")),
}


def family(name: str) -> str:
    """``PagedAdamW8bit`` → ``AdamW``; ``''`` when no torch optimizer matches."""
    base = name.removeprefix("Paged").removesuffix("8bit").removesuffix("32bit")
    return base if base in _FAMILIES else ""


def _fallback(name: str, params: Any, args: tuple, kwargs: dict) -> torch.optim.Optimizer:
    torch_cls, shared = _FAMILIES[family(name)]
    options = dict(zip(shared, args))
    dropped = [f"positional {a!r}" for a in args[len(shared):]]
    for key, value in kwargs.items():
        if key in shared:
            options[key] = value
        else:
            dropped.append(key)
    note = f"; ignored {', '.join(dropped)}" if dropped else ""
    _log.warn_once(f"bnb:{name}", f"bitsandbytes.optim.{name} needs bitsandbytes on CUDA; "
                   f"using torch.optim.{torch_cls.__name__} with 32-bit state{note}")
    return torch_cls(params, **options)


def _twin(name: str) -> Callable[..., Any]:
    def make(params: Any, *args: Any, **kwargs: Any) -> Any:
        real = _libs.cuda_attr("bitsandbytes.optim", name)
        if real is not None:
            return real(params, *args, **kwargs)
        return _fallback(name, params, args, kwargs)

    make.__name__ = make.__qualname__ = name
    make.__doc__ = f"bitsandbytes.optim.{name} on CUDA; the matching torch optimizer elsewhere."
    return make


NAMES = tuple(f"{prefix}{base}{suffix}" for base in _FAMILIES
              for prefix in ("", "Paged") for suffix in ("", "8bit", "32bit")
              if not (prefix and base in ("SGD", "Adagrad", "RMSprop")))

for _name in NAMES:
    globals()[_name] = _twin(_name)

__all__ = list(NAMES)
