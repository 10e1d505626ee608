"""``python -m porter_runtime [--json] [--no-bench]``: the doctor without porter installed."""
from __future__ import annotations

import argparse
import json
import sys

from .tools.doctor import collect


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m porter_runtime",
                                     description="Report what porter_runtime does here.")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--no-bench", action="store_true", help="skip the micro-benchmark")
    args = parser.parse_args(argv)
    report = collect(bench=not args.no_bench)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for check in report["checks"]:
            print(f"[{'ok' if check['ok'] else 'FAIL'}] {check['name']}: {check['detail']}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
