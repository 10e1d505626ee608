"""Float32 master weights for an optimizer of half-precision parameters.

DeepSpeed (fp16 or bf16 enabled) and apex's O2 train half-precision parameters through
float32 copies: the optimizer steps the copies and writes them back. Where the runtime
takes DeepSpeed out of a run (it has no MPS support, and accelerate's DeepSpeed path fails
on the CPU), nothing keeps those copies, and AdamW on float16 parameters turns them NaN
within a step or two (its ``eps`` of 1e-8 is 0 in float16). :func:`keep_float32_master`
puts the copies back, on the optimizer torch already built.
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

_HALF = (torch.float16, torch.bfloat16)


def keep_float32_master(optimizer: torch.optim.Optimizer, dtypes: Iterable[torch.dtype] = _HALF) -> int:
    """Make ``optimizer`` step float32 copies of its trainable parameters of ``dtypes``.

    Each such parameter is replaced in its ``param_groups`` by a float32 copy; before each
    ``step()`` the copy takes the parameter's gradient (in float32), after it the
    parameter takes the copy's value (rounded to its own dtype). The model keeps its
    half-precision parameters, so its forward, its ``state_dict()`` and what it saves are
    as before; only the update is computed in float32, as DeepSpeed computes it. Returns
    how many parameters got a copy (0: the optimizer is left as it was). Call it before
    the first ``step()``: optimizer state already made for a parameter stays with it.
    """
    wanted = tuple(dtypes)
    pairs: list[tuple[torch.Tensor, torch.nn.Parameter]] = []
    for group in optimizer.param_groups:
        params = group["params"]
        for index, param in enumerate(params):
            if param.requires_grad and param.dtype in wanted and param not in optimizer.state:
                master = torch.nn.Parameter(param.detach().float())
                params[index] = master
                pairs.append((param, master))
    if not pairs:
        return 0

    def take_gradients(*_: Any) -> None:
        for param, master in pairs:
            master.grad = None if param.grad is None else param.grad.detach().float()

    def write_back(*_: Any) -> None:
        with torch.no_grad():
            for param, master in pairs:
                param.copy_(master)

    optimizer.register_step_pre_hook(take_gradients)
    optimizer.register_step_post_hook(write_back)
    return len(pairs)
