"""PT913 on latent diffusion's sampler (blind rounds 1, 8, 10): `register_buffer` stores the
float64 DDIM schedule it is given, moved to the device. The port is run on the CPU and
under the MPS emulation: float64 kept on the CPU, float32 (not MPS's TypeError) on MPS."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from textwrap import dedent

SAMPLER = dedent("""\
    import numpy as np
    import torch


    class DDIMSampler(object):
        def __init__(self, alphas_cumprod):
            self.alphas_cumprod = alphas_cumprod

        def register_buffer(self, name, attr):
            if type(attr) == torch.Tensor:
                if attr.device != torch.device("cuda"):
                    attr = attr.to(torch.device("cuda"))
            setattr(self, name, attr)

        def make_schedule(self, eta=0.5):
            alphas = self.alphas_cumprod[[0, 5, 9]]
            alphas_prev = np.asarray([self.alphas_cumprod[0].item()] + alphas[:-1].tolist())
            sigmas = eta * np.sqrt((1 - alphas_prev) / (1 - alphas) * (1 - alphas / alphas_prev))
            self.register_buffer('ddim_sigmas', sigmas)  # float64: a float32 tensor and a NumPy array
            self.register_buffer('ddim_alphas', alphas)


    sampler = DDIMSampler(torch.linspace(0.99, 0.5, 10))
    sampler.make_schedule()
    print(sampler.ddim_sigmas.dtype, sampler.ddim_alphas.dtype)
    """)


def _run(folder: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "PORTER_QUIET": "1", **env}
    return subprocess.run([sys.executable, "sampler.py"], cwd=folder, capture_output=True, text=True, env=environ)


def test_the_ported_sampler_stores_its_float64_schedule_on_a_mac(tmp_path):
    (tmp_path / "sampler.py").write_text(SAMPLER)
    done = subprocess.run([sys.executable, "-m", "porter", "migrate", str(tmp_path), "--write", "--full-runtime", "-q",
                           "--no-progress"],
                          capture_output=True, text=True)
    assert done.returncode in (0, 2), done.stderr
    ported = (tmp_path / "sampler.py").read_text()
    assert "attr = porter_runtime.to_device(attr, device=porter_runtime.device())" in ported
    cpu = _run(tmp_path)
    assert cpu.returncode == 0, cpu.stderr
    assert cpu.stdout.split() == ["torch.float64", "torch.float32"]
    mac = _run(tmp_path, PORTER_EMULATE="mps")
    assert mac.returncode == 0, mac.stderr
    assert mac.stdout.split() == ["torch.float32", "torch.float32"]
    # Without the rule's rewrite the emulation refuses the float64 move, as MPS does.
    (tmp_path / "sampler.py").write_text(ported.replace(
        "porter_runtime.to_device(attr, device=porter_runtime.device())", "attr.to(porter_runtime.device())"))
    refused = _run(tmp_path, PORTER_EMULATE="mps")
    assert refused.returncode != 0 and "float64" in refused.stderr
