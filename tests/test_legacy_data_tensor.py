"""PT912 on a real tree: nerf-pytorch (blind round 10) sets a CUDA default tensor type in
run_nerf.py's __main__ and builds `torch.Tensor([10.])` in another module. Off CUDA the
port sets a default device, which the legacy constructor ignores. The ported helper is
run with torch's "meta" device standing in for MPS as the default device (it is a device
the CPU build has, and mixes with CPU tensors as MPS does: an error)."""
from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest
import torch

from porter.engine.process import Options
from porter.engine.registry import all_rules
from porter.engine.run import RunConfig, run

HELPERS = dedent("""\
    import torch

    mse2psnr = lambda x: -10. * torch.log(x) / torch.log(torch.Tensor([10.]))
    buffer = lambda n: torch.Tensor(n)
    """)
MAIN = dedent("""\
    import torch

    from helpers import mse2psnr

    if __name__ == "__main__":
        torch.set_default_tensor_type('torch.cuda.FloatTensor')
        print(mse2psnr(torch.tensor(0.01)))
    """)


def _port(tmp_path: Path, files: dict[str, str]) -> dict[str, str]:
    for rel, code in files.items():
        (tmp_path / rel).write_text(code)
    result = run(RunConfig([tmp_path], tmp_path, Options(rules=all_rules()), jobs=1))
    assert not result.errors
    return {f.path: (f.new or (tmp_path / f.path).read_bytes()).decode() for f in result.files}


def _psnr(code: str):
    namespace: dict = {}
    exec(compile(code, "helpers.py", "exec"), namespace)
    torch.set_default_device("meta")
    try:
        return namespace["mse2psnr"](torch.tensor(0.01)), namespace["buffer"](3)
    finally:
        torch.set_default_device(None)


def test_a_tree_with_a_cuda_default_type_gets_constructors_that_follow_the_default_device(tmp_path):
    ported = _port(tmp_path, {"helpers.py": HELPERS, "main.py": MAIN})
    helpers = ported["helpers.py"]
    assert "torch.tensor([10.], dtype=torch.get_default_dtype())" in helpers
    assert "torch.Tensor(n)" in helpers  # a size stays as written
    with pytest.raises(RuntimeError):
        _psnr(HELPERS)  # the original mixes a CPU tensor with the default device's
    psnr, buffer = _psnr(helpers)
    assert psnr.device.type == "meta" and psnr.dtype == torch.float32
    assert buffer.shape == (3,)


def test_without_a_cuda_default_type_the_constructor_stays(tmp_path):
    ported = _port(tmp_path, {"helpers.py": HELPERS, "main.py": MAIN.replace("torch.cuda.FloatTensor", "torch.FloatTensor")})
    assert ported.get("helpers.py", HELPERS) == HELPERS
