"""Scaling check: porter's time grows at most linearly with rewrites per file and files per tree.

    python bench/scaling.py                         # rewrites 500..8,000, files 1,000..50,000
    python bench/scaling.py --rewrites 500,2000 --files 1000,5000   # a quick look

Two series, each measured in this one run (in process, one worker, a dry run with a
diff sink, as ``porter migrate --diff`` does it):

- rewrites per file: one generated file with N ``x.cuda()`` lines (N rewrites);
- files per tree: N small files, one in ten with a CUDA call, the rest plain Python.

For each series it prints the time of every size and the growth ratio: (time of the
largest / time of the smallest) / (largest / smallest). 1.0 is linear; quadratic
bookkeeping shows as a ratio near the size factor (16 for 500 -> 8,000). Each size is
timed --repeat times and the fastest kept. The exit status is 1 when a ratio exceeds
--max-ratio (default 2: room for a shared machine and a larger heap; quadratic is 16).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from porter.files.apply import unified_diff
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


def _time_run(root: Path, paths: list[Path]) -> float:
    config = RunConfig(paths=paths, root=root, options=Options(rules=all_rules()), jobs=1)
    start = time.perf_counter()
    run(config, sink=lambda changes: [unified_diff(c) for c in changes] and None)
    return time.perf_counter() - start


def _series(name: str, sizes: list[int], measure, repeat: int) -> float:
    times = []
    for size in sizes:
        seconds = min(measure(size) for _ in range(repeat))
        times.append(seconds)
        print(f"  {name} {size:>7,}: {seconds:8.2f} s  ({seconds / size * 1e3:.3f} ms each)", flush=True)
    ratio = (times[-1] / times[0]) / (sizes[-1] / sizes[0])
    print(f"  {name}: growth ratio {ratio:.2f} (1.0 linear, {sizes[-1] / sizes[0]:.0f} quadratic)", flush=True)
    return ratio


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rewrites", default="500,1000,2000,4000,8000")
    parser.add_argument("--files", default="1000,5000,20000,50000")
    parser.add_argument("--max-ratio", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    rewrites = [int(n) for n in args.rewrites.split(",") if n]
    files = [int(n) for n in args.files.split(",") if n]
    ratios = {}
    with tempfile.TemporaryDirectory(prefix="porter-scaling-") as tmp:
        folder = Path(tmp)
        if rewrites:
            print("rewrites per file:")
            ratios["rewrites per file"] = _series(
                "rewrites", rewrites, lambda n: _time_run(folder, [_rewrites_file(folder, n)]), args.repeat)
        if files:
            print("files per tree:")

            def per_tree(n: int) -> float:
                root = folder / f"tree_{n}"
                if not root.exists():
                    _tree(folder, n)
                return _time_run(root, [root])

            ratios["files per tree"] = _series("files", files, per_tree, args.repeat)
    bad = {k: r for k, r in ratios.items() if r > args.max_ratio}
    for name, ratio in bad.items():
        print(f"FAIL: {name} grows faster than linear (ratio {ratio:.2f} > {args.max_ratio})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
