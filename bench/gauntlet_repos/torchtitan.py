"""torchtitan's llama3 debug model, tiny: the repo's own launcher (run_train.sh: torchrun, NGPU processes)
with --module llama3 --config llama3_debugmodel (the repo's test tokenizer under tests/assets, FlexAttention
compiled as the model defines it), scaled down by its own CLI flags: 2 steps with a DCP checkpoint, a resume
from it to step 4, and a 2-process run (FSDP2 over a 1-D device mesh, the default data_parallel_shard_degree
-1). The c4_test data set (tests/assets/c4_test/data.json) is a blob too large for the snapshot: the recipe
writes a synthetic one in its place, JSON lines with a "text" field as the repo's HF "json" source reads.

HEAD is written against a torch nightly; torch 2.13.0 lacks two things it uses, neither about CUDA:
- ``torch.distributed.set_timeout`` (trainer.py calls distributed/utils.py:set_pg_timeouts after the first
  step of every run): the recipe puts a ``sitecustomize`` on PYTHONPATH that aliases it to torch's own
  ``distributed_c10d._set_pg_timeout`` when it is missing (same on the original and the port);
- fully_shard with ``dp_mesh_dims`` (the default ``parallelism.spmd_backend spmd_types``) wants DTensor
  parameters, and spmd_types' local-SPMD parameters are plain tensors there: the 2-process step uses the
  repo's other backend, ``--parallelism.spmd_backend partial_dtensor`` (DTensor parameters)."""

import json
from pathlib import Path

from _recipe import Step, synthetic_text

SHIM = "_gauntlet/torch_compat"
ENV = {"PYTHONPATH": "{tree}/" + SHIM, "HF_HOME": "{tree}/_gauntlet/hf", "HF_DATASETS_OFFLINE": "1",
       "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "MODULE": "llama3", "CONFIG": "llama3_debugmodel"}
TINY = ("--training.max_context_length 128 --training.num_tokens_per_microbatch_per_dp_rank 256 "
        "--metrics.log_freq 1 --checkpoint.enable --checkpoint.interval 2")


def prepare(tree: Path) -> None:
    shim = tree / SHIM / "sitecustomize.py"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(
        "# gauntlet: torch 2.13.0 has no torch.distributed.set_timeout, which torchtitan HEAD (nightly) calls\n"
        "try:\n"
        "    import torch.distributed as _dist\n"
        "    if _dist.is_available() and not hasattr(_dist, 'set_timeout'):\n"
        "        from torch.distributed.distributed_c10d import _set_pg_timeout\n"
        "        _dist.set_timeout = _set_pg_timeout\n"
        "except ImportError:\n"
        "    pass\n")
    target = tree / "tests" / "assets" / "c4_test" / "data.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = synthetic_text(words=6000).splitlines()
    with target.open("w") as out:
        for i in range(0, len(lines), 4):
            out.write(json.dumps({"text": " ".join(lines[i:i + 4]), "timestamp": "2019-04-25T12:57:54Z",
                                  "url": f"https://example.com/{i}"}) + "\n")


STEPS = [
    Step("train", f"NGPU=1 bash run_train.sh --dump_folder _gauntlet/out --training.steps 2 {TINY}",
         outputs=["_gauntlet/out/checkpoint/step-2/.metadata"], env=ENV, timeout=300),
    Step("resume", f"NGPU=1 bash run_train.sh --dump_folder _gauntlet/out --training.steps 4 {TINY}",
         outputs=["_gauntlet/out/checkpoint/step-4/.metadata"], env=ENV, timeout=300),
    Step("fsdp2", f"NGPU=2 LOG_RANK=0,1 bash run_train.sh --dump_folder _gauntlet/out-fsdp "
                  f"--training.steps 2 --parallelism.spmd_backend partial_dtensor {TINY}",
         outputs=["_gauntlet/out-fsdp/checkpoint/step-2/.metadata"], env=ENV, timeout=300),
]
