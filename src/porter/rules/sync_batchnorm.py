"""``nn.SyncBatchNorm`` and its ``convert_sync_batchnorm`` (PT308; twins in porter_runtime)."""

from __future__ import annotations

from textwrap import dedent

from porter.rulebase.families.devices.twin_calls import TwinCall
from porter.rulebase.rule import Example, Needs, Rule, Safety

_TABLE = {
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm": "convert_sync_batchnorm",
    "torch.nn.modules.SyncBatchNorm.convert_sync_batchnorm": "convert_sync_batchnorm",
    "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm": "convert_sync_batchnorm",
    "torch.nn.SyncBatchNorm": "SyncBatchNorm",
    "torch.nn.modules.SyncBatchNorm": "SyncBatchNorm",
    "torch.nn.modules.batchnorm.SyncBatchNorm": "SyncBatchNorm",
}


class SyncBatchNormTwin(TwinCall, Rule):
    """`nn.SyncBatchNorm.convert_sync_batchnorm(model)` and `nn.SyncBatchNorm(...)` become runtime calls.

    What:
    Rewrites `nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)` to
    `porter_runtime.convert_sync_batchnorm(...)` and a construction
    `nn.SyncBatchNorm(num_features, ...)` to `porter_runtime.SyncBatchNorm(...)`, with
    the same arguments.

    Why:
    SyncBatchNorm synchronises its statistics with NCCL-era CUDA kernels only: in a
    process group off CUDA its forward raises "SyncBatchNorm expected input tensor to
    be on GPU", and DDP refuses a CPU model that holds one ("SyncBatchNorm layers only
    work with GPU modules"). SwAV's pretraining converts its ResNet under the default
    `--sync_bn pytorch` before wrapping it in DDP, so it stopped there (blind round 15).

    Fix safety:
    Safe. On CUDA both are torch's own, called with the same arguments. Elsewhere
    `convert_sync_batchnorm` returns the module as it is and `SyncBatchNorm` builds a
    SyncBatchNorm (same parameters, buffers and state-dict keys) whose forward is
    BatchNorm's: each process normalises with its own batch, which is what one device
    does anyway; with several processes on Gloo the statistics are per process (an info
    line says so once).

    Known limits:
    `isinstance(m, nn.SyncBatchNorm)` checks keep their meaning for constructed layers,
    not for modules `convert_sync_batchnorm` left as BatchNorm off CUDA.
    """

    code = "PT308"
    name = "sync-batchnorm"
    safety = Safety.SAFE
    table = _TABLE
    needs = Needs(calls_only=True, targets=frozenset(_TABLE))

    valid = [
        "import torch.nn as nn\nbn = nn.BatchNorm2d(64)\n",
        "if isinstance(m, nn.SyncBatchNorm):\n    pass\n",
    ]
    invalid = [
        Example(  # SwAV's main_swav.py
            dedent("""\
                import torch.nn as nn

                import src.resnet50 as resnet_models


                def build(args):
                    model = resnet_models.__dict__[args.arch](normalize=True, hidden_mlp=args.hidden_mlp,
                                                              output_dim=args.feat_dim, nmb_prototypes=args.nmb_prototypes)
                    # synchronize batch norm layers
                    if args.sync_bn == "pytorch":
                        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
                    return nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
                """),
            dedent("""\
                import porter_runtime
                import torch.nn as nn

                import src.resnet50 as resnet_models


                def build(args):
                    model = resnet_models.__dict__[args.arch](normalize=True, hidden_mlp=args.hidden_mlp,
                                                              output_dim=args.feat_dim, nmb_prototypes=args.nmb_prototypes)
                    # synchronize batch norm layers
                    if args.sync_bn == "pytorch":
                        model = porter_runtime.convert_sync_batchnorm(model)
                    return nn.parallel.DistributedDataParallel(model, find_unused_parameters=True)
                """),
        ),
        Example(
            "import torch\nnorm = torch.nn.SyncBatchNorm(256, eps=1e-3, momentum=0.03)\nact = torch.nn.SiLU()\n",
            "import porter_runtime\nimport torch\nnorm = porter_runtime.SyncBatchNorm(256, eps=1e-3, momentum=0.03)\n"
            "act = torch.nn.SiLU()\n",
        ),
    ]
