"""Run porter over thousands of real files and prove that it loses nothing.

    python bench/corpus.py [--limit N] [--jobs N] [--keep]

Downloads pinned wheels of large public PyTorch code bases (``pip download --no-deps``),
unpacks them once into a cache outside the repository (``~/.cache/porter-corpus``, or
``$PORTER_CORPUS_CACHE``), copies their ``.py`` files to a scratch folder and runs the
real CLI, ``porter migrate --write``, over the copy. Then it checks every file:

- crashes: porter exited with something other than 0/2, printed a traceback, or
  reported an ``internal error`` for a file;
- errors: files porter could not process (these wheels are valid Python 3);
- not compiling: a changed file that ``compile()`` rejects (compiled only, never run);
- not idempotent: a second ``porter migrate --write`` over the output changes it;
- untouched changed: a file porter did not report as changed whose bytes or mode differ;
- in strings/comments: a rewrite that changed the text of a string literal or a
  comment (see :func:`literal_violations` for the exact check).

It prints one summary line and exits 1 unless every failure count is zero.
``tests/test_corpus.py`` imports this module to run a bounded slice in CI.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tokenize
import warnings
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

PINNED = (("transformers", "5.23.0"), ("diffusers", "0.42.1"), ("timm", "1.0.31"))

# String literals a rule may legitimately take out of the code (a device spec becomes
# ``porter_runtime.device()``; a ``"cuda" if ... else "cpu"`` loses both arms).
DEVICE_LITERAL = re.compile(r"(cuda|cpu|mps|xpu|nccl|gloo)(:\d+)?")
# Token kinds whose text a rewrite must never change. Python 3.12+ splits f-strings.
LITERAL_TOKENS = {tokenize.STRING, tokenize.COMMENT} | {
    getattr(tokenize, name) for name in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, name)
}
# The bootstrap's path from a script's folder up to the vendored runtime's folder.
BOOTSTRAP_REL = re.compile(r"\.\.(/\.\.)*")
CUDA_WORDS = (b"cuda", b"nccl")


class CorpusUnavailable(RuntimeError):
    """The pinned wheels could not be downloaded (no network, no index)."""


def cache_dir() -> Path:
    return Path(os.environ.get("PORTER_CORPUS_CACHE", "~/.cache/porter-corpus")).expanduser()


def fetch(name: str, version: str, cache: Optional[Path] = None) -> Path:
    """The unpacked wheel ``name==version``, downloaded and unpacked on first use."""
    cache = cache or cache_dir()
    src = cache / "src" / f"{name}-{version}"
    if src.is_dir():
        return src
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"{name}-{version}-*.whl"))
    if not found:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
             "-d", str(wheels), f"{name}=={version}"],
            capture_output=True, text=True,
        )
        found = sorted(wheels.glob(f"{name}-{version}-*.whl"))
        if proc.returncode != 0 or not found:
            raise CorpusUnavailable(f"pip download {name}=={version} failed: {proc.stderr.strip()[-300:]}")
    # Unpack beside the target and rename: a concurrent or interrupted unpack never
    # leaves a half-filled source folder behind.
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=src.parent if src.parent.exists() else _mk(src.parent)))
    with zipfile.ZipFile(found[0]) as archive:
        archive.extractall(tmp)
    try:
        tmp.rename(src)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return src


def _mk(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def python_files(src: Path, cuda_only: bool = False) -> list[str]:
    """The ``.py`` files of an unpacked wheel (its code, not its metadata), sorted."""
    out = []
    for path in sorted(src.rglob("*.py")):
        if any(part.endswith((".dist-info", ".data")) for part in path.relative_to(src).parts):
            continue
        if cuda_only and not any(w in path.read_bytes() for w in CUDA_WORDS):
            continue
        out.append(path.relative_to(src).as_posix())
    return out


# -- the checks ------------------------------------------------------------------

def literal_tokens(data: bytes) -> Counter:
    """The multiset of string-literal and comment tokens' text (f-strings: their text
    parts only; a replacement field is code, and a rule may rewrite code)."""
    tokens = tokenize.tokenize(io.BytesIO(data).readline)
    return Counter((tok.type, _fstring_text(tok.string) if tok.type == tokenize.STRING else tok.string)
                   for tok in tokens if tok.type in LITERAL_TOKENS)


def _fstring_text(text: str) -> str:
    """``f"cuda:{expr}"`` → ``f"cuda:{…}"``; any other literal as it is."""
    prefix = text[: len(text) - len(text.lstrip("rRbBuUfF"))]
    if "f" not in prefix.lower():
        return text
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return text
    parts = [v.value if isinstance(v, ast.Constant) else "{…}" for v in getattr(node, "values", [])]
    return f"{prefix}{text[len(prefix)]}{''.join(parts)}"


def _literal_value(text: str) -> Optional[str]:
    match = re.fullmatch(r"[rRuU]?(['\"])(.*)\1", text, re.S)
    return match.group(2) if match else None


def literal_violations(old: bytes, new: bytes, allowed_new: Sequence[str] = ()) -> list[str]:
    """Strings and comments whose text a rewrite changed; empty when none did.

    The check compares the multisets of STRING and COMMENT tokens (docstrings and
    f-strings included) of the two versions. A rewrite inside a string or comment shows
    up as a token that left and another that arrived; an f-string counts by its text
    parts, since its replacement fields are code. Allowed to leave: string literals
    that are plain device specs (``"cuda"``, ``"cuda:0"``, the ``"cpu"`` of a device
    choice), which rules replace with a runtime call. Allowed to arrive: the text of
    tokens the file already had (a rule may move or repeat a literal), device specs,
    and the tokens of porter's own runtime import (``allowed_new``, plus the bootstrap's
    ``"../.."`` path). Everything else,
    a changed comment, docstring or string, is a violation.
    """
    before, after = literal_tokens(old), literal_tokens(new)
    problems = []
    for (kind, text), count in (before - after).items():
        value = _literal_value(text) if kind == tokenize.STRING else None
        if value is None or not DEVICE_LITERAL.fullmatch(value):
            problems.append(f"removed {tokenize.tok_name[kind]} {text!r}")
    known = {text for _, text in before} | set(allowed_new)
    for (kind, text), count in (after - before).items():
        value = _literal_value(text) if kind == tokenize.STRING else None
        if text in known or (value is not None and (DEVICE_LITERAL.fullmatch(value) or BOOTSTRAP_REL.fullmatch(value))):
            continue
        problems.append(f"added {tokenize.tok_name[kind]} {text!r}")
    return problems


def runtime_import_literals() -> set[str]:
    """The strings and comments of the runtime import porter adds (both forms)."""
    import libcst as cst

    from porter.edits.runtime_import import runtime_import

    out: set[str] = set()
    for statement in ("import porter_runtime", "from pkg import porter_runtime"):
        code = cst.Module(body=[runtime_import(statement)]).code.encode()
        out |= {text for _, text in literal_tokens(code)}
    return out


def compiles(data: bytes, name: str) -> Optional[str]:
    """None if the bytes compile (to code, never run), else the error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, name, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# -- a run ------------------------------------------------------------------------

@dataclass
class Stats:
    processed: int = 0
    changed: int = 0
    crashes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    not_compiling: list[str] = field(default_factory=list)
    not_idempotent: list[str] = field(default_factory=list)
    untouched_changed: list[str] = field(default_factory=list)
    in_strings_or_comments: list[str] = field(default_factory=list)
    skipped_compile: int = 0
    seconds: float = 0.0

    FAILURES = ("crashes", "errors", "not_compiling", "not_idempotent", "untouched_changed", "in_strings_or_comments")

    @property
    def ok(self) -> bool:
        return not any(getattr(self, name) for name in self.FAILURES)

    def summary(self, label: str) -> str:
        counts = ", ".join(f"{name.replace('_', ' ')} {len(getattr(self, name))}" for name in self.FAILURES)
        return (f"corpus {label}: files processed {self.processed}, changed {self.changed}, {counts} "
                f"({self.seconds:.0f} s){'' if self.ok else ' FAILED'}")

    def details(self) -> list[str]:
        return [f"{name}: {item}" for name in self.FAILURES for item in getattr(self, name)]


def _porter(args: Sequence[str], jobs: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "porter", "migrate", *args, "--no-progress", "-q"]
    if jobs and _has_jobs_option():
        cmd += ["--jobs", str(jobs)]
    return subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})


_JOBS: Optional[bool] = None


def _has_jobs_option() -> bool:
    global _JOBS
    if _JOBS is None:
        help_text = subprocess.run([sys.executable, "-m", "porter", "migrate", "--help"],
                                   capture_output=True, text=True).stdout
        _JOBS = "--jobs" in help_text
    return _JOBS


def _crash(proc: subprocess.CompletedProcess, what: str) -> Optional[str]:
    if proc.returncode not in (0, 2) or "Traceback (most recent call last)" in proc.stderr:
        return f"{what}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}"
    return None


def check_source(src: Path, files: Sequence[str], work: Path, stats: Stats, jobs: int = 0) -> None:
    """Copy ``files`` of ``src`` to ``work``, migrate them twice, check every file."""
    for rel in files:
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, work / rel)
    report = work.parent / f"{work.name}.report.json"
    proc = _porter([str(work), "--write", "--root", str(work), "--report", str(report)], jobs)
    crash = _crash(proc, f"{work.name}: first run")
    if crash or not report.exists():
        stats.crashes.append(crash or f"{work.name}: no report")
        return
    data = json.loads(report.read_text())
    stats.processed += data["summary"]["files_scanned"]
    status = {f["path"]: f for f in data["files"]}
    for path, item in status.items():
        if item["status"] == "error":
            (stats.crashes if "internal error" in (item["error"] or "") else stats.errors).append(
                f"{work.name}/{path}: {item['error']}")
    changed = [rel for rel in files if status.get(rel, {}).get("status") == "changed"]
    stats.changed += len(changed)
    allowed = runtime_import_literals()
    outputs = {}
    for rel in files:
        old, new = (src / rel).read_bytes(), (work / rel).read_bytes()
        same_mode = (src / rel).stat().st_mode == (work / rel).stat().st_mode
        if rel not in changed:
            if old != new or not same_mode:
                stats.untouched_changed.append(f"{work.name}/{rel}")
            continue
        outputs[rel] = new
        if not same_mode:
            stats.untouched_changed.append(f"{work.name}/{rel}: mode changed")
        if compiles(old, rel) is not None:
            stats.skipped_compile += 1  # not valid for this Python to begin with
        elif (problem := compiles(new, rel)) is not None:
            stats.not_compiling.append(f"{work.name}/{rel}: {problem}")
        bad = literal_violations(old, new, allowed)
        if bad:
            stats.in_strings_or_comments.append(f"{work.name}/{rel}: {'; '.join(bad[:3])}")
    if changed:
        again = _porter([*(str(work / rel) for rel in changed), "--write", "--root", str(work)], jobs)
        crash = _crash(again, f"{work.name}: second run")
        if crash:
            stats.crashes.append(crash)
        for rel, first in outputs.items():
            if (work / rel).read_bytes() != first:
                stats.not_idempotent.append(f"{work.name}/{rel}")


def run_corpus(selection: Sequence[tuple[str, Path, Sequence[str]]], jobs: int = 0,
               scratch: Optional[Path] = None) -> Stats:
    """Check every (label, unpacked wheel, files) of ``selection``; returns the counts."""
    stats = Stats()
    start = time.monotonic()
    own = scratch is None
    scratch = scratch or Path(tempfile.mkdtemp(prefix="porter-corpus-"))
    try:
        for label, src, files in selection:
            check_source(src, files, scratch / label, stats, jobs)
    finally:
        if own:
            shutil.rmtree(scratch, ignore_errors=True)
    stats.seconds = time.monotonic() - start
    return stats


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=0, help="at most N files per wheel (0: all)")
    parser.add_argument("--cuda-only", action="store_true", help="only files that mention cuda/nccl")
    parser.add_argument("--jobs", type=int, default=0, help="porter worker processes (0: porter's default)")
    parser.add_argument("--keep", type=Path, help="keep the migrated copies in this folder")
    args = parser.parse_args(argv)
    selection = []
    try:
        for name, version in PINNED:
            src = fetch(name, version)
            files = python_files(src, args.cuda_only)
            selection.append((f"{name}-{version}", src, files[: args.limit] if args.limit else files))
    except CorpusUnavailable as exc:
        print(f"corpus: unavailable: {exc}", file=sys.stderr)
        return 2
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    stats = run_corpus(selection, args.jobs, args.keep)
    for line in stats.details():
        print(line, file=sys.stderr)
    label = ", ".join(f"{n}=={v}" for n, v in PINNED)
    print(stats.summary(label))
    return 0 if stats.ok else 1


if __name__ == "__main__":
    sys.exit(main())
