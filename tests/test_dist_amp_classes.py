"""Issue 13's distributed, integer-device and AMP classes under every rule at once: what
the rules do together (one rewrite per construct, no finding for what is ported, a second
run that changes nothing), with and without the pre-filter's unit reduction."""
from textwrap import dedent

import pytest

from porter.engine.process import Options, migrate_source
from porter.engine.registry import all_rules

OPTIONS = Options(rules=all_rules())

CASES = {
    "guard": (
        """\
        import os
        import torch
        import torch.distributed as dist

        def init_distributed():
            if not torch.cuda.is_available():
                print("no CUDA: single process")
                return 0, 1
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            dist.init_process_group("nccl")
            return dist.get_rank(), dist.get_world_size()
        """,
        """\
        import porter_runtime
        import os
        import torch
        import torch.distributed as dist

        def init_distributed():
            if not torch.cuda.is_available() and not porter_runtime.is_multiprocess_launch():
                print("no CUDA: single process")
                return 0, 1
            porter_runtime.set_device(int(os.environ["LOCAL_RANK"]))
            porter_runtime.init_process_group("nccl")
            return dist.get_rank(), dist.get_world_size()
        """,
    ),
    "fsdp and ddp": (
        """\
        import torch
        import torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.nn.parallel import DistributedDataParallel as DDP

        def wrap(model, rank, fsdp):
            if fsdp:
                return FSDP(model, device_id=torch.cuda.current_device(), sync_module_states=True)
            return (DDP if dist.is_initialized() else NullDDP)(model, device_ids=[rank])
        """,
        """\
        import porter_runtime
        import torch.distributed as dist
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.nn.parallel import DistributedDataParallel as DDP

        def wrap(model, rank, fsdp):
            if fsdp:
                return FSDP(model, device_id=porter_runtime.device(porter_runtime.current_device()), sync_module_states=porter_runtime.fsdp_sync_module_states(model, True))
            return (DDP if dist.is_initialized() else NullDDP)(model, device_ids=porter_runtime.ddp_device_ids(rank))
        """,
    ),
    "integer device": (
        """\
        import torch

        def setup(local_rank):
            device = local_rank % torch.cuda.device_count()
            return device

        def step(model, x, device):
            x = x.to(device)
            ones = torch.ones(2, device=device)
            return model(x).to(torch.cuda.current_device()) + ones
        """,
        """\
        import porter_runtime
        import torch

        def setup(local_rank):
            device = local_rank % porter_runtime.device_count()
            return device

        def step(model, x, device):
            x = x.to(porter_runtime.device(device))
            ones = torch.ones(2, device=porter_runtime.device(device))
            return model(x).to(porter_runtime.device(porter_runtime.current_device())) + ones
        """,
    ),
    "amp": (
        """\
        from contextlib import nullcontext
        from functools import partial

        import torch
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        class Trainer:
            def __init__(self, amp, fsdp):
                self.ctx = partial(torch.cuda.amp.autocast, dtype=torch.float16) if amp else nullcontext
                self.scaler = ShardedGradScaler(enabled=amp) if fsdp else torch.cuda.amp.GradScaler(enabled=amp)

            def log(self):
                return {"scale": self.scaler.state_dict()["scale"], "also": self.scaler.get_scale()}
        """,
        """\
        import porter_runtime
        from contextlib import nullcontext
        from functools import partial

        import torch

        class Trainer:
            def __init__(self, amp, fsdp):
                self.ctx = partial(porter_runtime.cuda_amp_autocast, dtype=torch.float16) if amp else nullcontext
                self.scaler = porter_runtime.ShardedGradScaler(enabled=amp) if fsdp else porter_runtime.GradScaler(enabled=amp)

            def log(self):
                return {"scale": self.scaler.get_scale(), "also": self.scaler.get_scale()}
        """,
    ),
}


@pytest.mark.parametrize("segments", [True, False], ids=["units", "whole"])
@pytest.mark.parametrize("name", CASES)
def test_ported_together_with_no_finding(name, segments):
    before, after = (dedent(c) for c in CASES[name])
    result = migrate_source(before.encode(), OPTIONS, path="train.py", segments=segments)
    assert result.new.decode() == after
    assert [f for f in result.findings if f.action == "review"] == []
    again = migrate_source(result.new, OPTIONS, path="train.py", segments=segments)
    assert again.new == result.new and again.findings == []


@pytest.mark.parametrize("segments", [True, False], ids=["units", "whole"])
def test_index_assigned_in_another_unit(segments):
    before = dedent("""\
        import os

        dev = int(os.environ["LOCAL_RANK"])

        def step(x):
            return x.to(dev)
        """)
    result = migrate_source(before.encode(), OPTIONS, path="train.py", segments=segments)
    assert "x.to(porter_runtime.device(dev))" in result.new.decode()
