"""PT706 on a real script: Qwen's finetune_ds.sh counts GPUs with an embedded
`python -c` and hands the count to torchrun (blind round 10). The ported script is run
with bash and this environment's torch (no CUDA here): the count is 1, not 0."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

from porter.engine.process import Options
from porter.engine.registry import all_rules
from porter.engine.run import RunConfig, run

SCRIPT = dedent("""\
    #!/bin/bash
    GPUS_PER_NODE=$(python -c 'import torch; print(torch.cuda.device_count())')  # one process per GPU
    echo "nproc_per_node=$GPUS_PER_NODE"
    """)


def _run(script: Path) -> str:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", CUDA_VISIBLE_DEVICES="")
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, check=True).stdout.strip()


def test_the_ported_script_launches_one_process_without_cuda(tmp_path):
    script = tmp_path / "finetune" / "finetune_ds.sh"
    script.parent.mkdir()
    script.write_text(SCRIPT)
    assert _run(script) == "nproc_per_node=0"  # what torchrun refuses
    done = subprocess.run([sys.executable, "-m", "porter", "migrate", str(tmp_path), "--write", "-q", "--no-progress"],
                          capture_output=True, text=True)
    assert done.returncode in (0, 2), done.stderr
    assert "print(max(torch.cuda.device_count(), 1))" in script.read_text()
    assert script.read_text().endswith('echo "nproc_per_node=$GPUS_PER_NODE"\n')
    assert _run(script) == "nproc_per_node=1"
    again = run(RunConfig([tmp_path], tmp_path, Options(rules=all_rules()), jobs=1))
    assert all(f.new is None for f in again.files)  # nothing left to change
