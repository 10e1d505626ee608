"""The pre-filter and segments only save time: prove it on real code.

    python bench/prefilter_equivalence.py [--corpus transformers|diffusers|timm|all] [--jobs N]

Runs ``porter migrate --diff --report`` twice over each pinned wheel of
``bench/corpus.py``: as shipped, and with ``PORTER_PREFILTER=0 PORTER_SEGMENTS=0``
(every rule sees every file, whole). The diffs and the JSON reports must be byte-
identical. Prints one line per corpus with both times and their ratio; exits 1 on any
difference, naming the first files that differ. The second run parses every file with
LibCST, so it takes minutes per corpus; ``tests/test_prefilter_equivalence.py`` runs
the same comparison on the fixture repositories in CI and on a slice of transformers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

_spec = importlib.util.spec_from_file_location("porter_bench_corpus", Path(__file__).with_name("corpus.py"))
corpus = sys.modules.setdefault("porter_bench_corpus", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(corpus)

FILTERS_OFF = {"PORTER_PREFILTER": "0", "PORTER_SEGMENTS": "0"}


def migrate(tree: Path, out: Path, env_extra: dict, jobs: int) -> tuple[bytes, dict, float]:
    """The diff, the JSON report (run-specific fields dropped) and the wall time."""
    report = out.with_suffix(".json")
    env = {**os.environ, "NO_COLOR": "1", **env_extra}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "porter", "migrate", str(tree), "--diff", "-q", "--no-progress",
         "--report", str(report), "-j", str(jobs)],
        capture_output=True, env=env,
    )
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 2):
        raise RuntimeError(f"porter exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-2000:]}")
    return proc.stdout, json.loads(report.read_text()), seconds


def differences(a: tuple[bytes, dict], b: tuple[bytes, dict]) -> list[str]:
    """Human-readable differences between two (diff, report) pairs."""
    out = []
    files_a = {f["path"]: f for f in a[1]["files"]}
    files_b = {f["path"]: f for f in b[1]["files"]}
    for path in sorted(files_a.keys() | files_b.keys()):
        if files_a.get(path) != files_b.get(path):
            out.append(f"report differs for {path}")
    if a[1]["summary"] != b[1]["summary"]:
        out.append(f"summary differs: {a[1]['summary']} vs {b[1]['summary']}")
    if a[0] != b[0]:
        out.append("diffs differ" + ("" if out else " (reports equal)"))
    return out


def compare(tree: Path, jobs: int) -> tuple[list[str], float, float]:
    with tempfile.TemporaryDirectory() as scratch:
        on = migrate(tree, Path(scratch) / "on", {}, jobs)
        off = migrate(tree, Path(scratch) / "off", FILTERS_OFF, jobs)
    return differences(on[:2], off[:2]), on[2], off[2]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", choices=[n for n, _ in corpus.PINNED] + ["all"], default="all")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    failed = False
    for name, version in corpus.PINNED:
        if args.corpus not in ("all", name):
            continue
        src = corpus.fetch(name, version)
        found, t_on, t_off = compare(src, args.jobs)
        verdict = "identical" if not found else f"{len(found)} differences"
        print(f"{name}=={version}: filters on {t_on:.1f} s, off {t_off:.1f} s "
              f"({t_off / t_on:.1f}x); diffs and reports {verdict}")
        for line in found[:20]:
            print("  " + line)
        failed |= bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
