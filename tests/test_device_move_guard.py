"""PT914 on a runner written as LAVIS's (and MiniGPT-4's) is: ported with the real CLI,
then run on the CPU with real torch. Before the port, ``runner.model`` needs CUDA; ported
as written (the device test alone), it returned None off CUDA (blind round 11, silent)."""

import os
import subprocess
import textwrap
from pathlib import Path

from porter_test_utils import python_without_porter, run_porter

RUNNER = textwrap.dedent('''\
    import torch
    from torch import nn


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 1)

        @property
        def device(self):
            return list(self.parameters())[0].device

        def forward(self, x):
            return self.lin(x)


    class RunnerBase:
        def __init__(self, model, use_distributed=False):
            self._model = model
            self._wrapped_model = None
            self._device = None
            self.use_distributed = use_distributed
            self.wraps = 0

        @property
        def device(self):
            if self._device is None:
                self._device = torch.device("cuda")
            return self._device

        @property
        def model(self):
            # move model to device
            if self._model.device != self.device:
                self._model = self._model.to(self.device)

                # distributed training wrapper
                if self.use_distributed:
                    if self._wrapped_model is None:
                        self._wrapped_model = torch.nn.parallel.DistributedDataParallel(self._model)
                else:
                    self.wraps += 1
                    self._wrapped_model = self._model

            return self._wrapped_model


    if __name__ == "__main__":
        runner = RunnerBase(Model())
        for _ in range(3):
            loss = runner.model(torch.randn(8, 4, device=runner.device)).pow(2).mean()
            loss.backward()
        print("steps ok, wrapped", runner.wraps)
    ''')


def _run(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(python_without_porter("runner.py"), cwd=repo, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": "", "PORTER_QUIET": "1"})


def test_a_runner_that_moves_then_wraps_runs_on_the_cpu_once_ported(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "runner.py").write_text(RUNNER)
    original = _run(repo)
    assert original.returncode != 0  # torch.device("cuda") on a machine without it
    assert run_porter("migrate", repo, "--write", "-q").returncode == 0
    text = (repo / "runner.py").read_text()
    assert "if porter_runtime.off_device(self._model, self.device):" in text
    ported = _run(repo)
    assert ported.returncode == 0, ported.stderr
    assert "steps ok, wrapped 1" in ported.stdout  # the branch ran once, as on CUDA
    again = run_porter("migrate", repo, "--diff", "-q")
    assert again.returncode == 0 and again.stdout == b""


def test_without_the_rewrite_the_runner_returns_none_off_cuda(tmp_path):
    """The test as written: the port's other rewrites alone leave ``runner.model`` None."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "runner.py").write_text(RUNNER)
    assert run_porter("migrate", repo, "--write", "-q", "--ignore", "PT914").returncode == 0
    ported = _run(repo)
    assert ported.returncode != 0 and "'NoneType' object is not callable" in ported.stderr
