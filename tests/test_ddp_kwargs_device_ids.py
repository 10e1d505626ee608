"""PT302 through a dictionary (detectron2's `create_ddp_model`, blind round 9): the ids a
function sets in the kwargs it passes to DDP with `**` are ported as the keyword is, and
the port then wraps a CPU model in a real one-process Gloo group, where the original raises
DDP's "device_ids ... only work with ... GPU modules"."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import porter_runtime
from porter.engine.process import Options, migrate_source
from porter.engine.registry import all_rules

SRC = str(Path(porter_runtime.__file__).resolve().parents[1])

DEFAULTS = dedent("""\
    import os

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel


    def get_local_rank():
        return int(os.environ.get("LOCAL_RANK", 0))


    def create_ddp_model(model, *, fp16_compression=False, **kwargs):
        if "device_ids" not in kwargs:
            kwargs["device_ids"] = [get_local_rank()]
        ddp = DistributedDataParallel(model, **kwargs)
        return ddp


    if __name__ == "__main__":
        dist.init_process_group("gloo", init_method="file://" + os.path.abspath("ddp_store"), rank=0, world_size=1)
        model = create_ddp_model(torch.nn.Linear(4, 2), broadcast_buffers=False)
        print(tuple(model(torch.ones(3, 4)).shape))
        dist.destroy_process_group()
    """)


def _run(tmp_path: Path, code: bytes) -> subprocess.CompletedProcess:
    (tmp_path / "defaults.py").write_bytes(code)
    env = {**os.environ, "PYTHONPATH": SRC, "PORTER_QUIET": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "defaults.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=180)


def test_ids_set_in_ddps_kwargs_are_ported_and_run_on_the_cpu(tmp_path):
    result = migrate_source(DEFAULTS.encode(), Options(rules=list(all_rules())), path="defaults.py")
    assert b'kwargs["device_ids"] = porter_runtime.ddp_device_ids(get_local_rank())' in result.new
    assert [f.code for f in result.findings if f.action == "rewrite"] == ["PT302"]
    original = _run(tmp_path, DEFAULTS.encode())
    assert original.returncode != 0 and "device_ids" in original.stderr
    ported = _run(tmp_path, result.new)
    assert ported.returncode == 0, ported.stderr
    assert ported.stdout.strip() == "(3, 2)"


def test_a_dictionary_never_given_to_ddp_is_left_alone():
    code = dedent("""\
        from torch.nn.parallel import DistributedDataParallel


        def settings(rank):
            kwargs = {}
            kwargs["device_ids"] = [rank]
            return kwargs


        def wrap(model, options):
            return DistributedDataParallel(model, **options)
        """)
    result = migrate_source(code.encode(), Options(rules=list(all_rules())), path="defaults.py")
    assert result.new == code.encode() and not [f for f in result.findings if f.code == "PT302"]
