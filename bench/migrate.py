"""How fast is porter on a large real repository? Ratios measured in one run.

    python bench/migrate.py [--corpus transformers|diffusers|timm|NAME==VERSION] [--sample 61] [--rounds 3]
                            [--no-torchfix]

Over the pinned corpus (downloaded and cached by ``bench/corpus.py``'s ``fetch``):

(a) the naive floor: bare LibCST read + parse + code generation of every file that
    contains a CUDA-ish token (raw text ``cuda``/``nccl``/``flash_attn``/...), one process;
(b) ``porter migrate --diff -j 1`` over the whole tree;
(c) ``porter migrate --diff -j 2``;
(e) the project model alone (``porter.project.model.build`` over every file, the
    whole-repository pass every ``-j`` run makes first), timed inside its own process,
    with the number of files it parses (``ast.parse`` calls);
(d) TorchFix (pinned, in its own virtual environment: it pins an older libcst), one job,
    over a seeded random sample of the corpus's files, with porter ``-j 1`` (b') timed on
    the very same sample for the ratio.

Each measurement runs in its own process; the peak memory is that process's maximum
resident set (for ``-j 2`` the largest of the main process and its workers). (a), (b)
and (c) run in ``--rounds`` rounds (default 3), one after the other in each, and the
ratios compare their medians: the machines are shared and a single run can be off by a
third. Prints files/s, lines/s, peak memory, the ratios (b)/(a), (b)/(c), (d)/(b'), and
whether every ``-j`` printed the same diff. Goals (issues 7, 16): (b)/(a) <= 0.5,
(b)/(c) >= 1.7 on 2 cores, (d)/(b') >= 20, peak < 1 GiB, identical output for any ``-j``;
goal (issue 27): (e)/(b) <= 0.25, the project model costs at most a quarter of a ``-j 1`` run.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import PINNED, cache_dir, fetch  # noqa: E402  (the one downloader of pinned corpora)

TORCHFIX = "torchfix==0.7.0"
CUDA_ISH = re.compile(rb"cuda|nccl|flash_attn|xformers|apex|bitsandbytes|adam_atan2")

_FLOOR = """
import sys, time, libcst
paths = [line.rstrip("\\n") for line in open(sys.argv[1])]
start = time.perf_counter()
for path in paths:
    with open(path, "rb") as handle:
        libcst.parse_module(handle.read()).bytes
print(time.perf_counter() - start)
"""

_MODEL = """
import ast, sys, time
from pathlib import Path
from porter.project import model
parses = 0
_parse = ast.parse
def counted(*args, **kwargs):  # the files the model parses: the cost it should keep small
    global parses
    parses += 1
    return _parse(*args, **kwargs)
ast.parse = counted
root = Path(sys.argv[1])
rels = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if p.is_file())
start = time.perf_counter()
built = model.build(root, rels)
print(time.perf_counter() - start, len(built.modules), parses)
"""

_MEASURE = """
import hashlib, json, resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"seconds": elapsed, "peak": peak, "rc": proc.returncode,
                  "stdout": hashlib.sha256(proc.stdout).hexdigest(),
                  "stderr": proc.stderr.decode(errors="replace")[-400:]}))
"""


def measure(cmd: list[str]) -> dict:
    """Wall time and peak RSS of ``cmd``, measured from a fresh parent process."""
    out = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def py_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.is_file())


def line_count(paths: list[Path]) -> int:
    return sum(p.read_bytes().count(b"\n") for p in paths)


def torchfix_env() -> Path:
    venv = cache_dir() / "torchfix-venv"
    exe = venv / "bin" / "torchfix"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", TORCHFIX], check=True)
    return exe


def floor(paths: list[Path]) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        listing.write("\n".join(map(str, paths)))
    result = measure([sys.executable, "-c", _FLOOR, listing.name])
    Path(listing.name).unlink()
    return result


def porter(tree: Path, jobs: int) -> dict:
    return measure([sys.executable, "-m", "porter", "migrate", str(tree), "--diff", "-q", "-j", str(jobs)])


def project_model(tree: Path) -> dict:
    """Seconds the project model takes to build over ``tree``, measured inside the process."""
    out = subprocess.run([sys.executable, "-c", _MODEL, str(tree)], capture_output=True, text=True, check=True)
    seconds, modules, parses = out.stdout.split()
    return {"seconds": float(seconds), "modules": int(modules), "parses": int(parses)}


def sample_tree(files: list[Path], root: Path, size: int, seed: int = 7) -> Path:
    """A copy of ``size`` randomly chosen files (same relative paths) in a scratch folder."""
    chosen = random.Random(seed).sample(files, min(size, len(files)))
    dest = Path(tempfile.mkdtemp(prefix="porter-bench-sample-"))
    for path in chosen:
        target = dest / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return dest


def _median(results: list[dict]) -> dict:
    """The median time of several measurements, with the largest peak memory."""
    seconds = sorted(r["seconds"] for r in results)
    middle = len(seconds) // 2
    median = seconds[middle] if len(seconds) % 2 else (seconds[middle - 1] + seconds[middle]) / 2
    return {"seconds": median, "peak": max(r["peak"] for r in results)}


def row(name: str, result: dict, files: int, lines: int) -> str:
    s = result["seconds"]
    return (f"{name:<34} {s:8.2f} s {files / s:9.1f} files/s {lines / s:11.0f} lines/s "
            f"{result['peak'] / 2**20:8.0f} MiB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="transformers",
                        help="a pinned corpus by name (transformers, diffusers, timm) or NAME==VERSION")
    parser.add_argument("--sample", type=int, default=61, help="files in the TorchFix sample")
    parser.add_argument("--no-torchfix", action="store_true")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of (a), (b), (c); medians are compared")
    args = parser.parse_args(argv)
    name, _, version = args.corpus.partition("==")
    version = version or dict(PINNED)[name]
    root = fetch(name, version)
    files = py_files(root)
    cudaish = [p for p in files if CUDA_ISH.search(p.read_bytes())]
    lines, cuda_lines = line_count(files), line_count(cudaish)
    print(f"corpus {name}=={version}: {len(files)} files, {lines} lines; "
          f"{len(cudaish)} CUDA-ish files, {cuda_lines} lines")

    rounds, models = [], []
    for number in range(1, args.rounds + 1):
        # (a), (b), (c) one after the other in each round: a slow spell of a shared
        # machine then weighs on all three, and the medians of the rounds are compared.
        a, b, c = floor(cudaish), porter(root, 1), porter(root, 2)
        e = project_model(root)
        for result in (b, c):
            if result["rc"] not in (0, 2):
                print("porter failed:", result["stderr"], file=sys.stderr)
                return 1
        rounds.append((a, b, c))
        models.append(e)
        print(f"round {number}: (a) {a['seconds']:.2f} s  (b) {b['seconds']:.2f} s  (c) {c['seconds']:.2f} s  "
              f"(e) {e['seconds']:.2f} s, {e['parses']} ast parses  (b)/(a) = {b['seconds'] / a['seconds']:.2f}  "
              f"(b)/(c) = {b['seconds'] / c['seconds']:.2f}  (e)/(b) = {e['seconds'] / b['seconds']:.2f}")
    a, b, c = (_median([r[i] for r in rounds]) for i in range(3))
    print(f"medians of {len(rounds)} round(s):")
    print(row("(a) LibCST parse+codegen, CUDA-ish", a, len(cudaish), cuda_lines))
    print(row("(b) porter migrate --diff -j 1", b, len(files), lines))
    print(row("(c) porter migrate --diff -j 2", c, len(files), lines))
    e_seconds = sorted(m["seconds"] for m in models)[len(models) // 2]
    print(f"(e) project model alone, {len(files)} files      {e_seconds:8.2f} s (in-process, median; "
          f"{models[0]['parses']} files parsed)")
    ratios = {"(b)/(a)": b["seconds"] / a["seconds"], "(b)/(c)": b["seconds"] / c["seconds"],
              "(e)/(b)": e_seconds / b["seconds"]}

    if not args.no_torchfix:
        sample = sample_tree(files, root, args.sample)
        sample_files = py_files(sample)
        sample_lines = line_count(sample_files)
        d = measure([str(torchfix_env()), "-j", "1", str(sample)])
        b_sample = porter(sample, 1)
        print(f"sample: {len(sample_files)} files, {sample_lines} lines (seed 7)")
        print(row("(d) TorchFix 0.7.0 -j 1, sample", d, len(sample_files), sample_lines))
        print(row("(b') porter -j 1, same sample", b_sample, len(sample_files), sample_lines))
        ratios["(d)/(b')"] = d["seconds"] / b_sample["seconds"]
        shutil.rmtree(sample)
    print("ratios: " + "  ".join(f"{k} = {v:.2f}" for k, v in ratios.items()))
    peak = max(b["peak"], c["peak"])
    print(f"peak memory of the corpus run: {peak / 2**20:.0f} MiB")
    diffs = {r[i]["stdout"] for r in rounds for i in (1, 2)}
    print(f"same diff for -j 1 and -j 2 in every round: {'yes' if len(diffs) == 1 else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
