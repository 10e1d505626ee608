"""``torch.nn.parallel.data_parallel``, the function (PT307; its twin in porter_runtime)."""

from __future__ import annotations

from textwrap import dedent

from porter.rulebase.families.devices.twin_calls import TwinCall
from porter.rulebase.rule import Example, Needs, Rule, Safety

_TABLE = {"torch.nn.parallel.data_parallel": "data_parallel",
          "torch.nn.parallel.data_parallel.data_parallel": "data_parallel"}


class DataParallelFunction(TwinCall, Rule):
    """`nn.parallel.data_parallel(module, inputs, ...)` becomes `porter_runtime.data_parallel(...)`.

    What:
    Rewrites a call of torch's functional data parallelism,
    `torch.nn.parallel.data_parallel(module, inputs, device_ids, output_device, dim,
    module_kwargs)`, to `porter_runtime.data_parallel(...)` with the same arguments.

    Why:
    Without CUDA torch's function raises `RuntimeError: device type could not be
    determined` (on a CPU) before it runs the module, where the `nn.DataParallel`
    class just calls it. BigGAN samples with it during training (`--parallel`, in
    every launch script), so training stopped at its first save.

    Fix safety:
    Safe. On CUDA `porter_runtime.data_parallel` is torch's function, called with the
    same arguments. Elsewhere it calls `module(*inputs, **module_kwargs)` (a lone
    input as a one-element tuple, as torch does): one device, no scatter.

    Known limits:
    A call with `*args` or `**kwargs` is rewritten too: the twin takes torch's
    parameters, by position and by name.
    """

    code = "PT307"
    name = "data-parallel-function"
    safety = Safety.SAFE
    table = _TABLE
    needs = Needs(calls_only=True, targets=frozenset(_TABLE))

    valid = [
        "import torch.nn as nn\nmodel = nn.DataParallel(model)\n",
        "def sample(nn):\n    return nn.parallel.data_parallel(G, (z,))\n",
    ]
    invalid = [
        Example(  # BigGAN's train_fns.save_and_sample
            dedent("""\
                import torch.nn as nn


                def sample(G, fixed_z, fixed_y, parallel):
                    if parallel:
                        return nn.parallel.data_parallel(G, (fixed_z, G.shared(fixed_y)))
                    return G(fixed_z, G.shared(fixed_y))
                """),
            dedent("""\
                import porter_runtime


                def sample(G, fixed_z, fixed_y, parallel):
                    if parallel:
                        return porter_runtime.data_parallel(G, (fixed_z, G.shared(fixed_y)))
                    return G(fixed_z, G.shared(fixed_y))
                """),
        ),
        Example(
            "from torch.nn.parallel import data_parallel\ny = data_parallel(net, x, device_ids=[0, 1])\n",
            "import porter_runtime\ny = porter_runtime.data_parallel(net, x, device_ids=[0, 1])\n",
        ),
    ]
