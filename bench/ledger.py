"""Does the ledger add up on real code? Every CUDA touchpoint in exactly one state.

    python bench/ledger.py [--corpus transformers==5.23.0 ...] [--jobs N] [--show N]

Over the pinned wheels of ``bench/corpus.py`` (downloaded and cached by its ``fetch``),
runs porter's dry run (``porter.engine.run``: every rule, the ledger, nothing written) and
checks that each file's counts add up to its touchpoints, that every unaccounted
touchpoint has its PT999 finding at its line, and prints the counts per state, the
unaccounted ones by kind, and ``--show`` examples of them. Exits 1 if it doesn't add up.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import PINNED, fetch  # noqa: E402  (the one downloader of pinned corpora)

from porter.project import known_modules, ledger  # noqa: E402
from porter.engine.process import Options  # noqa: E402
from porter.engine.registry import all_rules  # noqa: E402
from porter.engine.run import RunConfig, run  # noqa: E402


def check(files) -> list[str]:
    """What doesn't add up, one line each (empty: the ledger adds up)."""
    problems = []
    for item in files:
        counts = ledger.counts(item.ledger)
        if sum(counts.values()) != len(item.ledger) or any(t.state not in ledger.STATES for t in item.ledger):
            problems.append(f"{item.path}: counts {counts} for {len(item.ledger)} touchpoints")
        named = Counter((f.line, f.column) for f in item.findings if f.code == ledger.CODE)
        for t in item.ledger:
            if t.state == "unaccounted" and not named[(t.line, t.column)]:
                problems.append(f"{item.path}:{t.line}:{t.column}: unaccounted {t.what} has no {ledger.CODE} finding")
    return problems


def ledger_seconds(src: Path, result) -> float:
    """CPU time of the ledger alone over the run's Python files (gate, parse, accounting)."""
    items = [(item, (src / item.path).read_bytes()) for item in result.files if item.path.endswith(".py")]
    context = ledger.TreeContext(known_modules.local([f.path for f in result.files]), known_modules.declared(src))
    started = time.process_time()
    for item, data in items:
        ledger.account(data, item.path, item.findings, context)
    return time.process_time() - started


def measure(name: str, version: str, jobs: int, show: int) -> bool:
    src = fetch(name, version)
    package = next(p for p in src.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", ".data")))
    started, cpu = time.perf_counter(), time.process_time()
    result = run(RunConfig([package], src, Options(rules=list(all_rules())), jobs=jobs))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    counts = ledger.counts(t for item in result.files for t in item.ledger)
    problems = check(result.files)
    unaccounted = [(item.path, t) for item in result.files for t in item.ledger if t.state == "unaccounted"]
    total = sum(counts.values())
    print(f"{name}=={version}: {len(result.files)} files, {total} touchpoints in "
          f"{sum(1 for f in result.files if f.ledger)} files ({seconds:.1f} s): "
          + ", ".join(f"{counts[s]} {s}" for s in ledger.STATES)
          + ("; adds up" if not problems else f"; {len(problems)} PROBLEMS"))
    own = f"{cpu:.1f} s CPU in this process" if jobs == 1 else f"{seconds:.1f} s"
    print(f"  the ledger's own cost: {ledger_seconds(src, result):.2f} s CPU of the run's {own}")
    kinds = Counter(t.kind for _, t in unaccounted)
    if kinds:
        print("  unaccounted by kind: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    for path, t in unaccounted[:show]:
        print(f"    {path}:{t.line}:{t.column} {t.kind} {t.what}")
    for problem in problems[:20]:
        print("  PROBLEM", problem)
    return not problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", action="append", help="name==version (default: every pinned wheel)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--show", type=int, default=0, help="print this many unaccounted touchpoints")
    args = parser.parse_args(argv)
    corpora = [tuple(c.split("==")) for c in args.corpus] if args.corpus else list(PINNED)
    ok = all([measure(name, version, args.jobs, args.show) for name, version in corpora])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
