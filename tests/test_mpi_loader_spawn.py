"""PT405 on a data module in improved-diffusion's style (mpi4py imported at the top, the
dataset sharded by MPI rank, a DataLoader with one worker). Where workers start with
spawn (macOS's default; here set with ``multiprocessing.set_start_method("spawn")``) in
a rank that MPICH's ``mpiexec`` started, each worker imports mpi4py again and its
``MPI_Init`` fails on the rank's inherited PMI connection. After one ``--write`` the
same batches load in the main process there, and the workers stay where they fork and
under Open MPI.

MPICH is not a test dependency: ``mpi4py`` here is a small stand-in, outside the
repository, that does what MPICH's does in such a worker (it exits with "PMI_Init
failed" when imported in a spawned child that inherited ``PMI_FD``) and answers rank 0
of 1 otherwise. The gauntlet runs the real MPICH (improved-diffusion and
consistency-models, ``--emulate mps``).
"""

import os
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import pytest

from porter_test_utils import run_porter

DATASETS = dedent("""\
    import numpy as np
    from mpi4py import MPI
    from torch.utils.data import DataLoader, Dataset


    def load_data(*, batch_size, deterministic=False):
        dataset = SquaresDataset(8, shard=MPI.COMM_WORLD.Get_rank(), num_shards=MPI.COMM_WORLD.Get_size())
        if deterministic:
            loader = DataLoader(
                dataset, batch_size=batch_size, shuffle=False, num_workers=1, drop_last=True
            )
        else:
            loader = DataLoader(
                dataset, batch_size=batch_size, shuffle=True, num_workers=1, drop_last=True
            )
        while True:
            yield from loader


    class SquaresDataset(Dataset):
        def __init__(self, n, shard=0, num_shards=1):
            super().__init__()
            self.values = list(range(n))[shard::num_shards]

        def __len__(self):
            return len(self.values)

        def __getitem__(self, idx):
            return np.array([float(self.values[idx] ** 2)], dtype=np.float32)
    """)

TRAIN = dedent("""\
    from image_datasets import load_data


    def main():
        data = load_data(batch_size=4, deterministic=True)
        for step in range(2):
            print(step, next(data).flatten().tolist())


    if __name__ == "__main__":
        main()
    """)

#: mpi4py as MPICH's behaves in a spawned DataLoader worker of an mpiexec rank.
STAND_IN = dedent("""\
    import os
    import sys

    # The rank's PMI connection (PMI_FD) belongs to the process mpiexec started; a process
    # that inherited it (a spawned worker importing this again) fails in MPI_Init.
    if os.environ.get("PMI_FD"):
        owner = os.environ.setdefault("STAND_IN_PMI_OWNER", str(os.getpid()))
        if owner != str(os.getpid()):
            sys.stderr.write("[cli_1]: PMIU_write error; fd=11\\nAbort: PMI_Init failed\\n")
            os._exit(1)


    class _World:
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 1


    COMM_WORLD = _World()
    """)

#: runs train.py as the main script after choosing the start method
LAUNCH = ("import multiprocessing, runpy, sys; multiprocessing.set_start_method(sys.argv[1]); "
          "sys.argv = ['train.py']; runpy.run_path('train.py', run_name='__main__')")
EXPECTED = ["0 [0.0, 1.0, 4.0, 9.0]", "1 [16.0, 25.0, 36.0, 49.0]"]


def _run(repo: Path, site: Path, method: str, mpich: bool = True):
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": os.pathsep.join([str(repo), str(site)])}
    env.pop("PORTER_EMULATE", None)
    env.pop("PMI_FD", None)
    if mpich:
        env.update({"PMI_FD": "11", "PMI_RANK": "0", "PMI_SIZE": "1"})  # what Hydra's mpiexec sets
    return subprocess.run([sys.executable, "-c", LAUNCH, method], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_a_loader_in_an_mpi_module_runs_where_workers_spawn_once_ported(tmp_path):
    repo, site = tmp_path / "repo", tmp_path / "site"
    repo.mkdir()
    (site / "mpi4py").mkdir(parents=True)
    (site / "mpi4py" / "__init__.py").write_text("")
    (site / "mpi4py" / "MPI.py").write_text(STAND_IN)
    (repo / "image_datasets.py").write_text(DATASETS)
    (repo / "train.py").write_text(TRAIN)
    forked = _run(repo, site, "fork")
    assert forked.returncode == 0, forked.stderr[-2000:]
    assert forked.stdout.splitlines() == EXPECTED
    spawned = _run(repo, site, "spawn")
    assert spawned.returncode != 0 and "PMI_Init failed" in spawned.stderr
    assert "exited unexpectedly" in spawned.stderr

    proc = run_porter("migrate", repo, "--write")
    assert proc.returncode in (0, 1), proc.stderr.decode()
    ported = (repo / "image_datasets.py").read_text()
    assert ported.count("num_workers=porter_runtime.mpi_workers(1)") == 2
    assert (repo / "train.py").read_text() == TRAIN  # nothing to port there

    spawned = _run(repo, site, "spawn")
    assert spawned.returncode == 0, spawned.stderr[-3000:]
    assert spawned.stdout.splitlines() == EXPECTED
    assert "loads in the main process" in spawned.stderr
    for method, mpich in (("fork", True), ("spawn", False)):  # Linux; Open MPI (no PMI_FD): the workers, as before
        kept = _run(repo, site, method, mpich)
        assert kept.returncode == 0 and kept.stdout.splitlines() == EXPECTED, kept.stderr[-2000:]
        assert "loads in the main process" not in kept.stderr
    check = run_porter("migrate", repo, "--check", "--fail-on", "changes")
    assert check.returncode == 0, check.stdout.decode()[-2000:]


def test_an_unguarded_loader_in_an_mpi_module_is_ported_once():
    """PT403 and PT405 both apply; PT403's ``unguarded_workers`` already gives 0 where
    workers spawn, so the call is not wrapped twice, and a second run changes nothing."""
    from porter.engine.process import Options, migrate_source
    from porter.engine.registry import all_rules

    code = ("from mpi4py import MPI\nfrom torch.utils.data import DataLoader\n\n"
            "loader = DataLoader(ds, num_workers=4)\nfor batch in loader:\n    step(batch)\n")
    options = Options(rules=all_rules())
    result = migrate_source(code.encode(), options, path="train.py")
    new = result.new.decode()
    assert "loader = DataLoader(ds, num_workers=porter_runtime.unguarded_workers(4))\n" in new
    assert [f.code for f in result.rewrites] == ["PT403"]
    assert migrate_source(result.new, options, path="train.py").new == result.new
