"""How much of a corpus the rules see in part, and what makes them read files whole.

    python bench/segments.py [--corpus diffusers|transformers|timm|NAME==VERSION]

The engine parses only the definitions some candidate rule wants (porter/engine/stages/
segments.py) unless a candidate rule declares ``Needs.whole_file`` or asks for the whole
file while it runs (``ctx.see_whole_file`` / ``ctx.see_all_uses_of``: the pass then runs
again on the whole file). A whole-file pass costs what its file's size does, so these
counts are where porter's time on a large repository goes (issue 46). One ``porter migrate
--diff`` over the pinned corpus (``bench/corpus.py``), in this process, prints:

- files migrated in part and whole, their lines, and the CPU seconds of each kind of pass;
- for the files read whole from the start, the candidate rules that declare ``whole_file``;
- for the files a rule sent back to a whole pass, what it asked for.

Counts, not speed: they don't depend on the machine's load. A rule change that makes
fewer files go whole, with the same diff, is a speed-up on every machine.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import PINNED, fetch  # noqa: E402  (the one downloader of pinned corpora)


def measure(root: Path) -> dict:
    import porter.engine.stages.python_stage as stage
    from porter.cli.entry import main as porter_main
    from porter.rulebase.rule import WholeFile

    counts: collections.Counter = collections.Counter()
    declared: collections.Counter = collections.Counter()
    asked: collections.Counter = collections.Counter()
    reduce, migrate = stage.reduce, stage._migrate

    def counting_reduce(data, facts, rules):
        reduced = reduce(data, facts, rules)
        lines = data.count(b"\n")
        if reduced is None:
            counts["whole files"] += 1
            counts["whole lines"] += lines
            declared.update(r.code for r in rules if r.needs.whole_file)
        else:
            counts["files in part"] += 1
            counts["their lines"] += lines
            counts["lines parsed of them"] += reduced.data.count(b"\n")
        return reduced

    def timed_migrate(*args, **kwargs):
        kind = "part" if args[-1] is not None else "whole"
        started = time.process_time()
        try:
            return migrate(*args, **kwargs)
        except WholeFile as asking:
            asked[str(asking)[:80]] += 1
            raise
        finally:
            counts[f"{kind} passes"] += 1
            counts[f"{kind} passes, CPU s"] += time.process_time() - started

    stage.reduce, stage._migrate = counting_reduce, timed_migrate
    argv = sys.argv
    try:
        sys.argv = ["porter", "migrate", str(root), "--diff", "-j", "1", "--quiet"]  # one process: the hooks see it all
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                contextlib.suppress(SystemExit):
            porter_main()  # the diff goes to stdout's buffer, the findings to stderr
    finally:
        sys.argv = argv
        stage.reduce, stage._migrate = reduce, migrate
    return {"counts": dict(counts), "declared": declared.most_common(), "asked": asked.most_common()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="diffusers")
    args = parser.parse_args(argv)
    name, _, version = args.corpus.partition("==")
    root = fetch(name, version or dict(PINNED)[name])
    found = measure(root)
    for key, value in found["counts"].items():
        print(f"{key:24} {value:.1f}" if isinstance(value, float) else f"{key:24} {value}")
    print("read whole from the start, by the candidate rules that declare it:",
          ", ".join(f"{code} {n}" for code, n in found["declared"]) or "none")
    print("sent back to a whole pass, by what a rule asked for:",
          ", ".join(f"{why} ({n})" for why, n in found["asked"]) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
