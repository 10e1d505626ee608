"""ControlNet (blind round 10): `torch.load(path, map_location=torch.device(location))` in
a loader whose callers pass `location='cuda'`. The device flow makes `torch.device(location)`
the runtime's device, and PT601 wrapped that in `porter_runtime.map_location(...)` only on a
second `--write`: not idempotent, not `--check` clean. One pass now gives the final form,
and the ported loader reads a checkpoint saved on CUDA (its storages tagged `cuda:0`)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from textwrap import dedent

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench" / "gauntlet_repos"))
from _recipe import save_cuda_checkpoint  # noqa: E402

MODEL = dedent("""\
    import torch


    def load_state_dict(ckpt_path, location='cpu'):
        state_dict = torch.load(ckpt_path, map_location=torch.device(location))
        return state_dict.get('state_dict', state_dict)
    """)
DEMO = dedent("""\
    import torch

    from model import load_state_dict

    net = torch.nn.Linear(2, 2)
    net.load_state_dict(load_state_dict('./weights.pth', location='cuda'))
    print(net.weight.device.type)
    """)


def _porter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "porter", "migrate", *args, "-q", "--no-progress"],
                          capture_output=True, text=True)


def test_one_write_reaches_the_fixed_point_and_the_port_loads_a_cuda_checkpoint(tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "demo.py").write_text(DEMO)
    import torch

    save_cuda_checkpoint({"state_dict": torch.nn.Linear(2, 2).state_dict()}, tmp_path / "weights.pth")
    assert _porter(str(tmp_path), "--write").returncode in (0, 2)
    ported = (tmp_path / "model.py").read_text()
    assert "map_location=porter_runtime.map_location(porter_runtime.device(location))" in ported
    first = {p.name: p.read_bytes() for p in tmp_path.rglob("*.py")}
    assert _porter(str(tmp_path), "--write").returncode in (0, 2)
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*.py")} == first
    done = subprocess.run([sys.executable, "demo.py"], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "PORTER_QUIET": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "cpu"


CONVERT = dedent("""\
    import torch


    def weight_load(fp, **kwargs):
        is_safetensors = kwargs.pop('is_safetensors', False)
        if is_safetensors:
            raise NotImplementedError
        return torch.load(fp, **kwargs)


    state = weight_load('./weights.pth', is_safetensors=False)
    mapped = weight_load('./weights.pth', map_location=lambda storage, loc: storage)
    print(state['w'].device.type, mapped['w'].device.type, float(state['w'].sum()))
    """)


def test_a_load_with_unpacked_keywords_gets_a_location_its_callers_can_still_override(tmp_path):
    """InternLM's ``tools/convert2llama.py`` (blind round 18): ``torch.load(fp, **kwargs)``
    whose callers never pass ``map_location``: a checkpoint saved on CUDA failed off CUDA.
    The location goes first in the unpacked dict, so a caller's own still wins."""
    (tmp_path / "convert.py").write_text(CONVERT)
    import torch

    save_cuda_checkpoint({"w": torch.ones(3)}, tmp_path / "weights.pth")
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "PORTER_QUIET": "1"}
    before = subprocess.run([sys.executable, "convert.py"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert before.returncode != 0 and "CUDA" in before.stderr
    assert _porter(str(tmp_path), "--write").returncode in (0, 2)
    assert 'torch.load(fp, **{"map_location": porter_runtime.map_location(), **kwargs})' in (tmp_path / "convert.py").read_text()
    first = (tmp_path / "convert.py").read_bytes()
    assert _porter(str(tmp_path), "--write").returncode in (0, 2)
    assert (tmp_path / "convert.py").read_bytes() == first
    done = subprocess.run([sys.executable, "convert.py"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["cpu", "cpu", "3.0"]
