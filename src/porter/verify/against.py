"""``porter verify --against ORIGINAL --run CMD``: the port computes what the original
computes on CUDA.

Both trees are copied to a scratch folder (the user's trees are never written), CMD runs in
each copy with the same environment (on ``--emulate cuda``: an emulated CUDA machine, the
check without a GPU; on a machine with one, CUDA itself), and everything the two runs
wrote in their trees is compared: tensors in checkpoints by value, JSON numbers, other
files byte for byte, and the numbers the two printed, line by line (timings left out).
Where they differ, the original runs a second time: a difference no larger than the
original's own run-to-run spread (CUDA's atomics, cuDNN's choices) is not the port's.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from porter.verify.emulate_cuda import MODULE
from porter.verify.emulate_cuda.text import compare_text
from porter.verify.records import RunCommandResult, VerifyOptions
from porter.verify.run_command import run_command

#: Folders no run's output is read from (tools' caches, version control).
_SKIP = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".ipynb_checkpoints"}


@dataclass
class Side:
    returncode: Optional[int]
    status: str
    output: str
    written: dict[str, Path] = field(default_factory=dict)  # what the run wrote: tree path -> file
    run: Optional[RunCommandResult] = None  # the run itself (frames relative to its tree)


@dataclass
class Differential:
    original: Path
    command: str
    emulated: bool
    original_status: str = ""
    port_status: str = ""
    #: (what, largest relative difference or None when incomparable, why)
    rows: list[tuple[str, Optional[float], str]] = field(default_factory=list)
    spread: Optional[float] = None  # the original against itself, where the two differed
    error: str = ""
    #: the port's run, which is verify's run of CMD too (it is not run a third time)
    port_run: Optional[RunCommandResult] = None

    @property
    def worst(self) -> float:
        return max((math.inf if d is None else d for _, d, _ in self.rows), default=0.0)

    @property
    def verdict(self) -> str:
        if self.error:
            return "not compared"
        if self.original_status != self.port_status:
            return "differs"
        if self.worst == 0.0:
            return "identical"
        if self.spread is not None and math.isfinite(self.worst) and self.worst <= max(1e-6, 2 * self.spread):
            return "within the original's own spread"
        return "differs"

    @property
    def same(self) -> bool:
        return self.verdict in ("identical", "within the original's own spread")


def _snapshot(tree: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for folder, dirs, files in os.walk(tree):
        dirs[:] = [d for d in dirs if d not in _SKIP]
        for name in files:
            path = Path(folder) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            found[path.relative_to(tree).as_posix()] = (st.st_size, st.st_mtime_ns)
    return found


def _copy(tree: Path, dest: Path) -> Path:
    shutil.copytree(tree, dest, symlinks=True, ignore=shutil.ignore_patterns(*_SKIP))
    return dest


def _run(tree: Path, options: VerifyOptions, env: dict) -> Side:
    before = _snapshot(tree)
    result = run_command(options.run, dataclasses.replace(options, root=tree, echo=None), env)
    after = _snapshot(tree)
    written = {rel: tree / rel for rel, stamp in after.items() if before.get(rel) != stamp}
    return Side(result.returncode, result.status, result.full_output, written, result)


def _compare_files(a: Side, b: Side, roots: tuple[Path, Path], options: VerifyOptions,
                   env: dict) -> list[tuple[str, Optional[float], str]]:
    rows: list[tuple[str, Optional[float], str]] = []
    for name in sorted(set(a.written) ^ set(b.written)):
        rows.append((name, None, "written by the " + ("original" if name in a.written else "port") + " only"))
    both = sorted(set(a.written) & set(b.written))
    if both:  # read in the code's own interpreter: it has torch, porter's may not
        done = subprocess.run([options.python, "-m", f"{MODULE}.compare", str(roots[0]), str(roots[1]), *both],
                              env=env, capture_output=True, text=True, check=False)
        try:
            for row in json.loads(done.stdout.strip().splitlines()[-1]):
                rows.append((row["file"], row["difference"], row["why"]))
        except (ValueError, IndexError, KeyError):
            rows += [(name, None, "not compared: " + (done.stderr.strip().splitlines() or ["no answer"])[-1])
                     for name in both]
    return rows


def _compare(a: Side, b: Side, roots: tuple[Path, Path], options: VerifyOptions,
             env: dict) -> list[tuple[str, Optional[float], str]]:
    worst, where = compare_text(a.output.replace(str(roots[0]), "{tree}"), b.output.replace(str(roots[1]), "{tree}"))
    rows = [("printed numbers", None if math.isinf(worst) else worst, where)]
    return rows + _compare_files(a, b, roots, options, env)


def _seeded(env: dict) -> dict:
    """The same seeds on both sides (verify's guard seeds every interpreter; guard.py)."""
    return {**env, "PORTER_VERIFY_SEED": "0", "PYTHONHASHSEED": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def against(options: VerifyOptions, env_for: Callable[[Path], dict]) -> Differential:
    """Run ``options.run`` on copies of ``options.against`` and of the port; compare."""
    original = Path(options.against).absolute()
    result = Differential(original, options.run or "", options.emulate == "cuda")
    work = Path(tempfile.mkdtemp(prefix="porter-against-"))
    try:
        trees = (_copy(original, work / "original"), _copy(options.root, work / "port"))
        envs = [_seeded(env_for(tree)) for tree in trees]
        a, b = (_run(tree, options, env) for tree, env in zip(trees, envs))
        result.original_status, result.port_status = a.status, b.status
        result.port_run = b.run
        result.rows = sorted(_compare(a, b, trees, options, envs[1]),
                             key=lambda r: -(math.inf if r[1] is None else r[1]))
        if result.worst > 0.0 and a.status == b.status:
            again = _copy(original, work / "original-2")
            a2 = _run(again, options, _seeded(env_for(again)))
            spread = [d for _, d, _ in _compare(a, a2, (trees[0], again), options, envs[0])]
            result.spread = max((math.inf if d is None else d for d in spread), default=0.0)
    except OSError as exc:
        result.error = str(exc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result
