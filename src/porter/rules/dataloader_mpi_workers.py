"""DataLoader workers in a module that imports mpi4py: what ``spawn`` under MPICH's ``mpiexec`` breaks."""

from __future__ import annotations

from textwrap import dedent

import libcst as cst

from porter.rulebase.evidence import Imports, InFile, Uses
from porter.rulebase.families.dataloader import DATALOADER, workers, workers_arg
from porter.rulebase.rule import Example, Needs, Rule, Safety, keyword
from porter.rulebase.syntax import is_runtime_call, replace_arg, runtime_call_of

#: DataLoader keywords it refuses without workers: the call is reported instead.
_NEED_WORKERS = ("persistent_workers", "prefetch_factor", "multiprocessing_context")


class DataLoaderMpiWorkers(Rule):
    """A DataLoader with workers in a module that imports mpi4py loads in the main process where workers spawn under MPICH.

    What:
    Finds a `DataLoader(..., num_workers=N)` (N > 0 or not a literal) in a module
    that imports mpi4py at its top level, as OpenAI's diffusion code bases do
    (`image_datasets.py` of improved-diffusion, guided-diffusion and
    consistency-models shards its dataset by `MPI.COMM_WORLD.Get_rank()`). Rewrites
    its `num_workers=N` to `num_workers=porter_runtime.mpi_workers(N)`. A call that
    also passes `persistent_workers`, `prefetch_factor`, `multiprocessing_context`
    (DataLoader refuses them with no workers) or `**kwargs` is reported instead.

    Why:
    macOS starts DataLoader workers with `spawn`. A spawned worker imports the
    dataset's module again, and so mpi4py, whose import calls `MPI_Init`. Under
    MPICH's `mpiexec` (what `conda install mpi4py` and the `mpich` wheel bring) the
    worker inherits its rank's PMI connection (`PMI_FD`), which it cannot use:
    `PMI_Init failed`, then `RuntimeError: DataLoader worker (pid(s) …) exited
    unexpectedly`. Linux forks its workers, which never import mpi4py again.

    Fix safety:
    Safe. On CUDA, wherever workers fork (Linux), and under launchers whose spawned
    workers can initialise MPI (Open MPI), `mpi_workers(N)` is `N`. Where workers
    spawn in a process that MPICH's `mpiexec` started and that has imported mpi4py,
    it is 0: the same batches, loaded in the rank's main process.

    Known limits:
    Only the loader's own module is read: a loader whose module does not import
    mpi4py, but whose dataset class or script does, is not found.
    """

    code = "PT405"
    name = "dataloader-mpi-workers"
    safety = Safety.SAFE
    needs = Needs(targets=DATALOADER, unit=Uses(DATALOADER) & InFile(Imports("mpi4py")))

    valid = [
        # mpi4py imported only where it is used: a spawned worker does not import it
        "from torch.utils.data import DataLoader\n\ndef shard():\n    from mpi4py import MPI\n"
        "    return MPI.COMM_WORLD.Get_rank()\n\nloader = DataLoader(ds, num_workers=4)\n",
        "from mpi4py import MPI\nfrom torch.utils.data import DataLoader\n\n"
        "def load(ds):\n    return DataLoader(ds, batch_size=8, num_workers=0)\n",
        "from mpi4py import MPI\n\ndef load(ds):\n    return DataLoader(ds, num_workers=4)\n",  # not torch's
        # a parameter shadows the imported DataLoader
        "from mpi4py import MPI\nfrom torch.utils.data import DataLoader\n\n"
        "def load(ds, DataLoader=make_loader):\n    return DataLoader(ds, num_workers=4)\n",
    ]
    invalid = [
        Example(  # improved-diffusion's image_datasets.py
            dedent("""\
                from mpi4py import MPI
                import numpy as np
                from torch.utils.data import DataLoader, Dataset


                def load_data(*, data_dir, batch_size, image_size, class_cond=False, deterministic=False):
                    all_files = _list_image_files_recursively(data_dir)
                    dataset = ImageDataset(
                        image_size,
                        all_files,
                        classes=None,
                        shard=MPI.COMM_WORLD.Get_rank(),
                        num_shards=MPI.COMM_WORLD.Get_size(),
                    )
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
                """),
            dedent("""\
                import porter_runtime
                from mpi4py import MPI
                import numpy as np
                from torch.utils.data import DataLoader, Dataset


                def load_data(*, data_dir, batch_size, image_size, class_cond=False, deterministic=False):
                    all_files = _list_image_files_recursively(data_dir)
                    dataset = ImageDataset(
                        image_size,
                        all_files,
                        classes=None,
                        shard=MPI.COMM_WORLD.Get_rank(),
                        num_shards=MPI.COMM_WORLD.Get_size(),
                    )
                    if deterministic:
                        loader = DataLoader(
                            dataset, batch_size=batch_size, shuffle=False, num_workers=porter_runtime.mpi_workers(1), drop_last=True
                        )
                    else:
                        loader = DataLoader(
                            dataset, batch_size=batch_size, shuffle=True, num_workers=porter_runtime.mpi_workers(1), drop_last=True
                        )
                    while True:
                        yield from loader
                """),
        ),
        Example(  # an aliased module, and mpi4py imported in a one-line try
            "import torch.utils.data as tud\ntry: from mpi4py import MPI\nexcept ImportError: MPI = None\n\n"
            "def loader(ds, args):\n    return tud.DataLoader(ds, batch_size=args.batch_size, num_workers=args.workers)\n",
            "import porter_runtime\nimport torch.utils.data as tud\ntry: from mpi4py import MPI\nexcept ImportError: MPI = None\n\n"
            "def loader(ds, args):\n    return tud.DataLoader(ds, batch_size=args.batch_size, "
            "num_workers=porter_runtime.mpi_workers(args.workers))\n",
        ),
        Example(  # persistent workers: DataLoader refuses them without workers, so it is reported
            dedent("""\
                import torch
                from mpi4py import MPI


                def make_loader(dataset, args):
                    sampler = torch.utils.data.DistributedSampler(
                        dataset, num_replicas=MPI.COMM_WORLD.Get_size(), rank=MPI.COMM_WORLD.Get_rank()
                    )
                    return torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler,
                                                       num_workers=args.workers, persistent_workers=True)
                """),
            line=9, message="persistent_workers",
        ),
    ]

    def visit_Module(self, node: cst.Module) -> None:
        # a top-level import (in an `if` or `try` too): a spawned worker that imports this module imports MPI
        self._mpi = self.ctx.resolver.imports_under("mpi4py")

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not getattr(self, "_mpi", False) or not self.matches(original.func) or workers(original) is None:
            return updated
        given, arg = workers_arg(original), workers_arg(updated)
        if given is None or is_runtime_call(self, given.value) or (arg is not None and runtime_call_of(arg.value) == "unguarded_workers"):
            return updated  # ported: by an earlier run, or by PT403 in this one (0 where workers spawn too)
        problem = (f"DataLoader(num_workers={workers(original)}) in a module that imports mpi4py: where workers "
                   "spawn (macOS), each imports mpi4py again, and under MPICH's mpiexec its MPI_Init fails "
                   "(`PMI_Init failed`, then `DataLoader worker exited unexpectedly`)")
        blocked = [k for k in _NEED_WORKERS if keyword(original, k) is not None]
        if arg is None or blocked or any(a.star for a in original.args):
            why = f" ({', '.join(blocked)} needs workers)" if blocked else ""
            self.flag(original, problem + why,
                      suggestion="num_workers=0 on a Mac under MPICH, or import mpi4py inside the functions that use it")
            return updated
        new = replace_arg(updated, arg, self.runtime_call("mpi_workers", arg.value))
        return self.rewrite(original, new, problem + "; the runtime loads in the main process there (num_workers=0, "
                            "the same batches) and keeps the workers on CUDA, where they fork (Linux) and under "
                            "Open MPI")
