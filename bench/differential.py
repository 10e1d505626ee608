"""Differential check: each fixture repository's original and ported code, same device,
same seeds, compared output by output.

    python bench/differential.py [--repos cifar_cnn,chat_lm] [--keep DIR] [--json]

For each repository in fixtures/repos (its porter_fixture.json lists the entry points
and the files they write), the tree is copied twice: one copy stays as it is, the
other is ported with ``porter migrate --write``. Every entry point runs on both, in
order (the trainer's checkpoint feeds the evaluation), with Python's, NumPy's and
torch's global generators seeded first, PYTHONHASHSEED=0 and CUBLAS_WORKSPACE_CONFIG
set, and everything the runs write is compared: JSON numbers
and tensors in ``.pt`` files (bitwise, else the largest difference against the
tolerance), other files byte for byte, and the numbers on the ``loss`` lines of their
output.

On a CUDA machine side A is the original code and side B the port: the port must
change nothing there. Where they differ, the original runs a second time, and the
verdict compares the port's difference with the original's own run-to-run spread
(cuDNN and atomics are not deterministic even with deterministic algorithms asked for). Without CUDA the original cannot run (that is why it is being
ported), so side A and side B are both the port, run twice on this machine: that
checks the harness and that the port is deterministic here, and the report says
that the real check needs a GPU.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

try:  # the comparison and the emulation are porter's; a GPU machine may run this without porter installed
    import porter  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
from porter.verify.emulate_cuda import write_site  # noqa: E402
from porter.verify.emulate_cuda.compare import comparable as _comparable  # noqa: E402,F401  (tests use it)
from porter.verify.emulate_cuda.compare import compare_outputs  # noqa: E402
from porter.verify.emulate_cuda.compare import difference as _difference  # noqa: E402
from porter.verify.emulate_cuda.compare import leaves as _leaves  # noqa: E402,F401  (recipe_differential's)

ROOT = Path(__file__).resolve().parent.parent
REPOS = ROOT / "fixtures" / "repos"
WITHOUT_PORTER = ROOT / "tests" / "without_porter.py"
TOLERANCE = 1e-4  # relative, where kernels are not deterministic (atomics in cuDNN/cuBLAS)
#: A sitecustomize that seeds Python's, NumPy's and torch's global generators
#: (torch.manual_seed seeds CUDA's too) in every interpreter of a run, worker
#: processes (mp.spawn, DataLoader) included: code that draws from an unseeded
#: global generator still gets the same numbers on both sides.
_SITE = """import random
random.seed(0)
try:
    import numpy
    numpy.random.seed(0)
except ImportError:
    pass
import torch
torch.manual_seed(0)
torch.use_deterministic_algorithms(True, warn_only=True)  # cuDNN's choice too, on both sides
"""
#: Runs the script as without_porter.py does (an installed porter hidden: harmless
#: for the original, which does not import it).
_WRAPPER = """import sys
sys.path.insert(0, {tests!r})
import without_porter
without_porter.main()
"""
_LOSS = re.compile(r"loss[^0-9+-]*([-+]?\d+\.\d+(?:e[-+]?\d+)?)", re.IGNORECASE)


def _entry_points(repo: Path) -> list[dict]:
    return json.loads((repo / "porter_fixture.json").read_text())["entry_points"]


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _run_all(repo: Path, out: Path, emulate: bool = False) -> tuple[int, list[float], str]:
    """Run the entry points in order, seeded, until one fails; (how many ran, loss
    numbers printed, the failing one's stderr).

    Both sides run through _WRAPPER, with _SITE seeding every interpreter."""
    losses: list[float] = []
    out.mkdir(parents=True, exist_ok=True)  # some scripts save into it without creating it
    wrapper = out.parent / f"_run_{out.name}.py"
    wrapper.write_text(_WRAPPER.format(tests=str(WITHOUT_PORTER.parent)))
    site = out.parent / f"_site_{out.name}"
    site.mkdir(exist_ok=True)
    if emulate:  # --emulate cuda: every interpreter a CUDA machine, then seeded
        write_site(site, then=_SITE)
    else:
        (site / "sitecustomize.py").write_text(_SITE)
    for ran, entry in enumerate(_entry_points(repo)):
        port = _free_port()
        args = [c.replace("{out}", str(out)).replace("{port}", port) for c in entry["cmd"]][1:]
        cmd = [sys.executable, str(wrapper), *args]
        env = {**os.environ, **entry.get("env", {}), "PYTHONHASHSEED": "0",
               "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PORTER_QUIET": "1",
               "PYTHONDONTWRITEBYTECODE": "1"}
        env["PYTHONPATH"] = str(site)
        proc = subprocess.run(cmd, cwd=repo / entry.get("cwd", "."), env=env, text=True,
                              capture_output=True, timeout=900)
        if proc.returncode != 0:
            return ran, losses, proc.stderr[-1500:]
        losses += [float(m) for m in _LOSS.findall(proc.stdout + proc.stderr)]
    return len(_entry_points(repo)), losses, ""


def _port(tree: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "porter", "migrate", str(tree), "--write"],
                          capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
    # 1 means "changed" unless porter died (a traceback also exits 1): then side B
    # would silently be the original.
    if done.returncode not in (0, 1) or "Traceback (most recent call last)" in done.stderr:
        raise RuntimeError(f"porter migrate failed on {tree}:\n{done.stderr[-1500:]}")


def check_repo(name: str, work: Path, cuda: bool, emulate: bool = False) -> dict[str, Any]:
    source = REPOS / name
    side_a, side_b = work / name / "a", work / name / "b"
    shutil.copytree(source, side_a)
    shutil.copytree(source, side_b)
    _port(side_b)
    if not (cuda or emulate):
        _port(side_a)  # no CUDA: the original cannot run here; the port against itself
    ok_a, loss_a, err_a = _run_all(side_a, work / name / "out-a", emulate)
    ok_b, loss_b, err_b = _run_all(side_b, work / name / "out-b", emulate)
    total = len(_entry_points(source))
    # Entry points that need inputs a test fabricates (a GPU checkpoint) stop both
    # sides alike: what ran before them is still compared.
    result: dict[str, Any] = {"repo": name, "ran": f"{min(ok_a, ok_b)}/{total}",
                              "error": err_a or err_b}
    if ok_a != ok_b or ok_a == 0:
        result["ran"] = f"{ok_a}/{total} vs {ok_b}/{total}"
        return result
    rows = _compared(work / name, "a", "b", loss_a, loss_b)
    worst = max((r[1] for r in rows), default=0.0)
    result.update({"files": rows, "worst": worst, "bitwise": worst == 0.0,
                   "within_tolerance": worst <= TOLERANCE, "losses": len(loss_b)})
    if (cuda or emulate) and worst > 0.0:
        result.update(_noise_floor(source, work / name, loss_a, worst, emulate))
    return result


def _compared(work: Path, a: str, b: str, loss_a: list[float], loss_b: list[float]) -> list:
    rows = compare_outputs(work / f"out-{a}", work / f"out-{b}")
    if loss_a or loss_b:
        rows.append(("printed losses", max((_difference(x, y) for x, y in zip(loss_a, loss_b)),
                                           default=0.0) if len(loss_a) == len(loss_b)
                     else math.inf))
    return rows


def _noise_floor(source: Path, work: Path, loss_a: list[float], worst: float,
                 emulate: bool = False) -> dict[str, Any]:
    """The original run a second time: CUDA kernels that are not deterministic (atomics,
    cuDNN algorithm choice) make the original differ from itself. The port is as good
    as the original when it differs from it no more than twice the original's own
    spread, with the same structure (no incomparable file)."""
    side = work / "a2"
    shutil.copytree(source, side)
    ok, loss_a2, err = _run_all(side, work / "out-a2", emulate)
    if err:
        return {"spread": math.inf}
    spread = max((r[1] for r in _compared(work, "a", "a2", loss_a, loss_a2)), default=0.0)
    return {"spread": spread, "within_spread": math.isfinite(worst) and worst <= max(TOLERANCE, 2 * spread)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = ",".join(sorted(p.parent.name for p in REPOS.glob("*/porter_fixture.json")))
    parser.add_argument("--repos", default=default)
    parser.add_argument("--keep", type=Path, help="keep the trees and outputs here")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--emulate", choices=["cuda"],
                        help="without a GPU: original vs port, both on an emulated CUDA machine "
                             "(porter/verify/cuda_emulation.py)")
    args = parser.parse_args()
    emulate = args.emulate == "cuda"
    cuda = torch.cuda.is_available() and not emulate
    work = args.keep or Path(tempfile.mkdtemp(prefix="porter-differential-"))
    results = [check_repo(name, work, cuda, emulate) for name in args.repos.split(",") if name]
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({"cuda": cuda, "emulated_cuda": emulate, "results": results}, indent=2, default=str))
        return
    device = torch.cuda.get_device_name() if cuda else "emulated CUDA" if emulate else "no CUDA"
    print(f"differential check, torch {torch.__version__}, {device}: "
          + ("original vs ported on CUDA" if cuda else
             "original vs ported, both on an emulated CUDA machine (the check without a GPU)" if emulate else
             "ported vs ported on this machine (the original needs CUDA); "
             "the real check needs a GPU"))
    print(f"{'repo':15s} {'ran':>5s} {'files':>5s} {'losses':>6s} {'worst diff':>10s}  verdict")
    for r in results:
        last = r["error"].strip().splitlines()[-1:] if r["error"] else []
        if "worst" not in r:
            print(f"{r['repo']:15s} {r['ran']:>5s}  failed: {last}")
            continue
        verdict = "bitwise" if r["bitwise"] else \
            f"within {TOLERANCE:g}" if r["within_tolerance"] else \
            f"within the original's own spread ({r['spread']:.2e})" if r.get("within_spread") else \
            f"DIFFERS (the original's own spread: {r.get('spread', math.nan):.2e})"
        stop = f" (then stopped on both sides: {last})" if last else ""
        print(f"{r['repo']:15s} {r['ran']:>5s} {len(r['files']):5d} {r['losses']:6d} "
              f"{r['worst']:10.2e}  {verdict}{stop}")
        if not r["within_tolerance"] and not r.get("within_spread"):
            for name, diff in r["files"][:5]:
                print(f"    {name}: {diff:.2e}")


if __name__ == "__main__":
    main()
