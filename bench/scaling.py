"""Scaling check: porter's time grows at most linearly with the size of its input.

    python bench/scaling.py                         # every series at its default sizes
    python bench/scaling.py --rewrites 500,2000 --files 1000,5000 --functions 500,2000 --depth 100,400

Four series, each measured in this one run (in process, one worker, a dry run with a
diff sink as ``porter migrate --diff`` does it, or a write for the deep tree), and the
start-up of the command:

- rewrites per file: one generated file with N ``x.cuda()`` lines (N rewrites);
- functions per file: one file of N functions, one rewrite in each (the diff's matcher
  was quadratic there: porter.files.linediff);
- files per tree: N small files, one in ten with a CUDA call, the rest plain Python;
- depth: a chain of N nested folders, a module in each, one in ten with a CUDA call,
  written with ``--write`` (a ``resolve()`` per folder made discovery quadratic in depth);
- start-up: ``porter --version`` as a process, the fastest of five (goal: under 1 s).

Each series' time of its smallest size, less a run over one small file (what any run
costs: the rule catalogue's import and set-up), is the base of its ratio.

For each series it prints the time of every size and the growth ratio: (time of the
largest / time of the smallest) / (largest / smallest). 1.0 is linear; quadratic
bookkeeping shows as a ratio near the size factor (16 for 500 -> 8,000). Each size is
timed --repeat times and the fastest kept. The exit status is 1 when a ratio exceeds
--max-ratio (default 2: room for a shared machine and a larger heap; quadratic is 16).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from porter.files.apply import apply_changes, unified_diff
from porter.engine.options import Options
from porter.engine.registry import all_rules
from porter.engine.run import RunConfig, run


def _rewrites_file(folder: Path, count: int) -> Path:
    path = folder / f"gen_{count}.py"
    lines = ["import torch\n", "x = torch.ones(1)\n"] + [f"y{i} = x.cuda()\n" for i in range(count)]
    path.write_text("".join(lines))
    return path


def _tree(folder: Path, count: int) -> Path:
    root = folder / f"tree_{count}"
    for i in range(count):
        sub = root / f"pkg{i // 500:03d}"
        if i % 500 == 0:
            sub.mkdir(parents=True)
            (sub / "__init__.py").write_text("")
        body = "import torch\n\n\ndef f(x):\n    return x.cuda()\n" if i % 10 == 0 else \
            f"import os\n\n\ndef f{i}(x):\n    return os.path.join(x, '{i}')\n"
        (sub / f"m{i:05d}.py").write_text(body)
    (root / "requirements.txt").write_text("torch\n")
    return root


def _functions_file(folder: Path, count: int) -> Path:
    path = folder / f"funcs_{count}.py"
    body = "".join(f"def f{i}(x):\n    return x.cuda()\n\n\n" for i in range(count))
    path.write_text("import torch\n\n\n" + body)
    return path


def _deep_tree(folder: Path, depth: int) -> Path:
    root = folder / f"deep_{depth}"
    shutil.rmtree(root, ignore_errors=True)  # written by the last measure
    here = root
    here.mkdir(parents=True)
    (root / "requirements.txt").write_text("torch\n")
    for i in range(depth):
        here = here / "d"
        here.mkdir()
        (here / "m.py").write_text("import torch\nx = torch.ones(1).cuda()\n" if i % 10 == 0 else "import os\n")
    return root


def _time_run(root: Path, paths: list[Path], write: bool = False) -> float:
    config = RunConfig(paths=paths, root=root, options=Options(rules=all_rules()), jobs=1, write=write)
    if write:
        def sink(changes):
            failed = apply_changes(root, changes)
            return failed[0][1] if failed else None
    else:
        def sink(changes):
            return [unified_diff(c) for c in changes] and None
    start = time.perf_counter()
    run(config, sink=sink)
    return time.perf_counter() - start


def _start_up() -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "porter", "--version"], check=True, capture_output=True)
        best = min(best, time.perf_counter() - start)
    return best


def _series(name: str, sizes: list[int], measure, repeat: int, base: float = 0.0) -> float:
    times = []
    for size in sizes:
        seconds = min(measure(size) for _ in range(repeat))
        times.append(max(seconds - base, 1e-3))
        print(f"  {name} {size:>7,}: {seconds:8.2f} s  ({seconds / size * 1e3:.3f} ms each)", flush=True)
    ratio = (times[-1] / times[0]) / (sizes[-1] / sizes[0])
    print(f"  {name}: growth ratio {ratio:.2f} (1.0 linear, {sizes[-1] / sizes[0]:.0f} quadratic)", flush=True)
    return ratio


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rewrites", default="500,1000,2000,4000,8000")
    parser.add_argument("--files", default="1000,5000,20000,50000")
    parser.add_argument("--functions", default="500,2000,8000")
    parser.add_argument("--depth", default="120,1200")
    parser.add_argument("--max-ratio", type=float, default=1.3)
    parser.add_argument("--max-start-up", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    rewrites = [int(n) for n in args.rewrites.split(",") if n]
    files = [int(n) for n in args.files.split(",") if n]
    functions = [int(n) for n in args.functions.split(",") if n]
    depths = [int(n) for n in args.depth.split(",") if n]
    ratios = {}
    start_up = _start_up()
    print(f"start-up: porter --version {start_up:.2f} s (goal {args.max_start_up:g} s)")
    with tempfile.TemporaryDirectory(prefix="porter-scaling-") as tmp:
        folder = Path(tmp)
        base = min(_time_run(folder, [_rewrites_file(folder, 1)]) for _ in range(2))
        print(f"a run over one small file: {base:.2f} s (subtracted)")
        if rewrites:
            print("rewrites per file:")
            ratios["rewrites per file"] = _series(
                "rewrites", rewrites, lambda n: _time_run(folder, [_rewrites_file(folder, n)]), args.repeat, base)
        if functions:
            print("functions per file, one rewrite each:")
            ratios["functions per file"] = _series(
                "functions", functions, lambda n: _time_run(folder, [_functions_file(folder, n)]), args.repeat, base)
        if depths:
            print("depth of the tree (--write):")

            def deep(n: int) -> float:
                root = _deep_tree(folder, n)
                return _time_run(root, [root], write=True)

            ratios["depth"] = _series("depth", depths, deep, args.repeat, base)
        if files:
            print("files per tree:")

            def per_tree(n: int) -> float:
                root = folder / f"tree_{n}"
                if not root.exists():
                    _tree(folder, n)
                return _time_run(root, [root])

            ratios["files per tree"] = _series("files", files, per_tree, args.repeat, base)
    bad = {k: r for k, r in ratios.items() if r > args.max_ratio}
    for name, ratio in bad.items():
        print(f"FAIL: {name} grows faster than linear (ratio {ratio:.2f} > {args.max_ratio})")
    if start_up > args.max_start_up:
        print(f"FAIL: start-up {start_up:.2f} s > {args.max_start_up:g} s")
    return 1 if bad or start_up > args.max_start_up else 0


if __name__ == "__main__":
    sys.exit(main())
