"""CUDA unchanged, on real repositories: each gauntlet recipe run on the original tree and
on its port, on the same CUDA machine, with the same seeds, and everything they write
compared.

Two halves, because the machine that ports is not the machine with the GPU:

    python bench/recipe_differential.py stage --names nanogpt,mingpt --out .gpu/stage
    python bench/recipe_differential.py run --stage .gpu/stage --out RESULTS [--jobs 4] [--deadline 480]

``stage`` (here) takes each recipe's pinned snapshot from the gauntlet's cache, copies it
twice and ports one copy with ``porter migrate --write`` (this checkout's porter), and puts
the recipe beside them. ``run`` (on the GPU machine; it needs only torch and the recipe's
own packages) runs, for each recipe, the recipe's ``prepare`` and every step on the
original and then on the port, in the same folder and with every interpreter seeded
(Python, NumPy and torch's generators, ``PYTHONHASHSEED``, deterministic algorithms asked
for), and compares every file the two runs wrote or changed: tensors in checkpoints
(bitwise, else the largest relative difference), JSON numbers, other text number by
number with the words around them equal, and the loss numbers each step printed. Where
the two differ, the original runs a second time: a difference no larger than the
original's own run-to-run spread is the GPU's nondeterminism, not porter's.

Without CUDA (``--self``) the original cannot run, so both sides are the port: that
checks the harness, and says the real check needs a GPU.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TOLERANCE = 1e-4
SKIP_PARTS = {"__pycache__", "porter_runtime", ".git", "torch_extensions"}
#: Words that mark a number as a measurement of the machine (times, speeds, memory), and
#: file names that are logs of such measurements: never a porter difference.
TIMING = re.compile(r"time|elapsed|sec\b|secs?\b|seconds?|\bms\b|\d+(?:\.\d+)?(?:ms|s)\b|throughput|speed|"
                    r"it/s|s/it|/s\b|per_s|duration|mem|mfu|tok/s|tokens_per|eta\b|date|\d\d:\d\d:\d\d|"
                    r"flops|remaining", re.IGNORECASE)
LOSS = re.compile(r"loss[^0-9+\-\n]{0,12}([-+]?\d+\.\d+(?:e[-+]?\d+)?)", re.IGNORECASE)
TRACEBACK_LINE = re.compile(r'^\s*File "[^"]+", line \d+')
NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
#: Every interpreter of a run (workers too) starts seeded and asks for deterministic kernels.
SITE = """import random
random.seed(0)
try:
    import numpy
    numpy.random.seed(0)
except ImportError:
    pass
try:
    import torch
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
except ImportError:
    pass
"""
BASE_ENV = {
    "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
    "CUBLAS_WORKSPACE_CONFIG": ":4096:8", "MPLBACKEND": "Agg", "WANDB_MODE": "disabled",
    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "2", "PORTER_QUIET": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}


# --------------------------------------------------------------------------- stage (here)

def stage(names: list[str], out: Path, mirror: Path) -> None:
    import gauntlet

    entries = {e.name: e for e in gauntlet.load_entries()}
    out.mkdir(parents=True, exist_ok=True)
    recipes = out / "recipes"
    recipes.mkdir(exist_ok=True)
    shutil.copy2(gauntlet.REPOS / "_recipe.py", recipes / "_recipe.py")
    manifest = []
    for name in names:
        entry = entries[name]
        source = gauntlet.snapshot(entry, mirror, clone=False)
        folder = out / name
        shutil.rmtree(folder, ignore_errors=True)
        for side in ("orig", "port"):
            shutil.copytree(source, folder / side, symlinks=True)
            (folder / side / ".gauntlet-complete").unlink(missing_ok=True)
        done = subprocess.run([sys.executable, "-m", "porter", "migrate", str(folder / "port" / entry.subdir),
                               "--write"], capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"})
        if done.returncode not in (0, 1) or "Traceback (most recent call last)" in done.stderr:
            raise SystemExit(f"porter migrate failed on {name}:\n{done.stderr[-1500:]}")
        shutil.copy2(gauntlet.REPOS / f"{name}.py", recipes / f"{name}.py")
        manifest.append({"name": name, "subdir": entry.subdir, "commit": entry.commit,
                         "requirements": entry.requirements})
        print(f"staged {name}", flush=True)
    porter_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent,
                                   capture_output=True, text=True).stdout.strip()
    (out / "manifest.json").write_text(json.dumps({"porter": porter_commit, "repos": manifest}, indent=1))


# --------------------------------------------------------------------------- run (GPU machine)

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(tree: Path) -> dict[str, str]:
    out = {}
    for path in tree.rglob("*"):
        rel = path.relative_to(tree)
        if path.is_file() and not path.is_symlink() and not SKIP_PARTS & set(rel.parts):
            out[rel.as_posix()] = _digest(path)
    return out


def _shell(command: str, cwd: Path, env: dict, timeout: float) -> tuple[int, str]:
    proc = subprocess.Popen(command, cwd=cwd, env=env, shell=True, executable="/bin/bash", text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, errors="replace",
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        return 124, out + f"\n[timed out after {timeout:.0f} s]"


def _environment(work: Path, python: str, extra_path: str) -> dict:
    bin_dir = work / "_bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for alias in ("python", "python3"):  # a script, not a link: a venv's python finds its venv
        (bin_dir / alias).unlink(missing_ok=True)
        (bin_dir / alias).write_text(f'#!/bin/sh\nexec {python} "$@"\n')
        (bin_dir / alias).chmod(0o755)
    torchrun = bin_dir / "torchrun"
    torchrun.write_text(f"#!{python}\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n")
    torchrun.chmod(0o755)
    site = work / "_site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITE)
    env = dict(os.environ)
    env.update(BASE_ENV)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = ":".join(p for p in (str(site), extra_path) if p)
    # recipes run side by side: each its own rendezvous port (torchrun reads PET_*)
    port = str(20000 + int(hashlib.sha256(str(work).encode()).hexdigest(), 16) % 20000)
    env.update({"MASTER_PORT": port, "PET_MASTER_PORT": port})
    return env


def run_side(stage_dir: Path, name: str, side: str, work: Path, python: str, extra_path: str,
             timeout_cap: float) -> dict:
    """The recipe on one side, in ``work/tree`` (the same path for every side); what it wrote
    is moved to ``work/out-SIDE``."""
    sys.path.insert(0, str(stage_dir / "recipes"))
    import importlib

    from _recipe import step_environment

    recipe = importlib.import_module(name)
    manifest = {r["name"]: r for r in json.loads((stage_dir / "manifest.json").read_text())["repos"]}
    root = work / "tree"
    shutil.rmtree(root, ignore_errors=True)
    source_side = "port" if side.startswith("port") else "orig"
    shutil.copytree(stage_dir / name / source_side, root, symlinks=True)
    tree = root / manifest[name]["subdir"]
    before = _files(tree)
    env = _environment(work, python, extra_path)
    result: dict[str, Any] = {"steps": [], "losses": {}, "failed": None}
    log = []
    prepare = (f"import sys; sys.path.insert(0, {str(stage_dir / 'recipes')!r}); from pathlib import Path; "
               f"import {name} as recipe; recipe.prepare(Path({str(tree)!r}))")
    code, output = _shell(f"{shlex_quote(python)} -c {shlex_quote(prepare)}", tree, env, timeout_cap)
    log.append(f"$ prepare (exit {code})\n{output}")
    if code != 0:
        result["failed"] = "prepare: " + _last_line(output)
    else:
        for step in recipe.STEPS:
            command = step.command.replace("{tree}", str(tree))
            step_env = step_environment(step, tree, env)  # the recipe's own path first, the seeding still found
            started = time.monotonic()
            code, output = _shell(command, tree, step_env, min(step.timeout, timeout_cap))
            seconds = round(time.monotonic() - started, 1)
            log.append(f"$ {command} (exit {code}, {seconds} s)\n{output}")
            missing = [p for p in step.outputs if not list(tree.glob(p))]
            result["steps"].append({"name": step.name, "exit": code, "seconds": seconds, "missing": missing})
            result["losses"][step.name] = [float(m) for m in LOSS.findall(
                "\n".join(line for line in output.splitlines() if not _timing_only(line)))]
            if code != 0 or missing:
                result["failed"] = f"{step.name}: " + (_last_line(output) if code else f"no {missing}")
                break
    out = work / f"out-{side}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    after = _files(tree)
    written = sorted(k for k, v in after.items() if before.get(k) != v)
    for rel in written:
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(tree / rel), out / rel)
    result["written"] = written
    (work / f"log-{side}.txt").write_text("\n".join(log))
    result["log_tail"] = "\n".join("\n".join(log).splitlines()[-40:])
    return result


def shlex_quote(text: str) -> str:
    import shlex
    return shlex.quote(text)


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _timing_only(line: str) -> bool:
    return bool(TIMING.search(line)) and not LOSS.search(line)


# --------------------------------------------------------------------------- comparison

from differential import _difference, _leaves  # noqa: E402  (bench/ is on sys.path above; one comparison)

def _is_tensor(value: Any) -> bool:
    import torch
    return isinstance(value, torch.Tensor)


def _load(path: Path) -> Any:
    data = path.read_bytes()
    if path.suffix == ".json":
        try:
            return json.loads(data)
        except ValueError:
            pass
    if data.startswith(b"PK\x03\x04") or path.suffix in (".pt", ".pth", ".ckpt"):
        import torch
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception:
            pass
    if path.suffix == ".safetensors":
        try:
            from safetensors.torch import load_file
            return load_file(str(path))
        except Exception:
            pass
    if path.suffix.lower() in (".png", ".jpg", ".jpeg", ".bmp", ".webp"):
        try:
            import numpy
            import torch
            from PIL import Image
            with Image.open(path) as image:
                return torch.from_numpy(numpy.array(image.convert("RGBA")))
        except Exception:
            pass
    if path.suffix == ".npy":
        try:
            import numpy
            import torch
            return torch.from_numpy(numpy.load(path, allow_pickle=False))
        except Exception:
            pass
    return data


def _text_difference(a: bytes, b: bytes, detail: list) -> float:
    """Text compared number by number, lines that measure the machine left out; binary
    data byte for byte."""
    try:
        left, right = a.decode(), b.decode()
    except UnicodeDecodeError:
        return 0.0 if a == b else math.inf
    keep = lambda text: [line for line in text.splitlines() if not _timing_only(line)]
    left_lines, right_lines = keep(left), keep(right)
    if len(left_lines) != len(right_lines):
        detail.append(f"{len(left_lines)} vs {len(right_lines)} lines")
        return math.inf
    worst = 0.0
    for x, y in zip(left_lines, right_lines):
        if TIMING.search(x) and LOSS.search(x):  # "[date] loss 0.99, steps/sec 1.03": the loss alone
            x, y = " ".join(LOSS.findall(x)), " ".join(LOSS.findall(y))
        if TRACEBACK_LINE.match(x) and re.sub(r", line \d+", "", x) == re.sub(r", line \d+", "", y):
            continue  # a traceback's line numbers move with every line the port inserts
        if NUMBER.sub("#", x) != NUMBER.sub("#", y):
            detail.append(f"{x[:100]!r} vs {y[:100]!r}")
            return math.inf
        if x != y:
            detail.append(f"{x[:100]!r} vs {y[:100]!r}")
        for p, q in zip(NUMBER.findall(x), NUMBER.findall(y)):
            worst = max(worst, _difference(float(p), float(q)))
    return worst


def file_difference(a: Path, b: Path) -> float:
    if a.read_bytes() == b.read_bytes():
        return 0.0
    if TIMING.search(a.name):
        return 0.0
    left, right = _load(a), _load(b)
    if isinstance(left, bytes) or isinstance(right, bytes):
        if isinstance(left, bytes) and isinstance(right, bytes):
            detail: list[str] = []
            worst = _text_difference(left, right, detail)
            DETAIL[str(b)] = detail[:4]
            return worst
        return math.inf
    la, lb = _leaves(left), _leaves(right)
    la = {k: v for k, v in la.items() if not TIMING.search(k.rsplit("/", 1)[-1])}
    lb = {k: v for k, v in lb.items() if not TIMING.search(k.rsplit("/", 1)[-1])}
    if la.keys() != lb.keys():
        DETAIL[str(b)] = [f"only in one: {k}" for k in sorted(la.keys() ^ lb.keys())[:6]]
        return math.inf
    diffs = {k: _difference(la[k], lb[k]) for k in la}
    worst = sorted((k for k in diffs if diffs[k] > 0), key=lambda k: -diffs[k])[:6]
    DETAIL[str(b)] = [f"{k}: {_short(la[k])} vs {_short(lb[k])} ({diffs[k]:.3g})" for k in worst]
    return max(diffs.values(), default=0.0)


#: For each compared file (by its second path), the leaves that differ most.
DETAIL: dict[str, list[str]] = {}


def _short(value: Any) -> str:
    if _is_tensor(value):
        return f"tensor{tuple(value.shape)} {value.dtype}"
    return repr(value)[:80]


def compare(work: Path, a: str, b: str, ra: dict, rb: dict) -> dict[str, float]:
    rows: dict[str, float] = {}
    # a name the clock chose (events.out.tfevents.1795892228.host) pairs with the other side's
    # file of the same name but for its digits, where each side wrote one such file
    stem = lambda rel: re.sub(r"\d+", "#", rel)  # noqa: E731
    only_a = [r for r in ra["written"] if r not in rb["written"]]
    only_b = [r for r in rb["written"] if r not in ra["written"]]
    pairs = {rel: rel for rel in set(ra["written"]) & set(rb["written"])}
    for rel in only_a:
        twins = [o for o in only_b if stem(o) == stem(rel)]
        if len(twins) == 1 and sum(stem(r) == stem(rel) for r in only_a) == 1:
            pairs[rel] = twins[0]
            only_b.remove(twins[0])
        else:
            rows[rel + " (written by one side only)"] = math.inf
    for rel in only_b:
        rows[rel + " (written by one side only)"] = math.inf
    for rel, rel_b in sorted(pairs.items()):
        pa, pb = work / f"out-{a}" / rel, work / f"out-{b}" / rel_b
        rel = stem(rel) if rel != rel_b else rel
        try:
            rows[rel] = file_difference(pa, pb)
        except Exception as error:  # an unreadable output is a row, never the run's end
            rows[rel + f" (unreadable: {type(error).__name__})"] = math.inf
    for step in sorted(set(ra["losses"]) | set(rb["losses"])):
        x, y = ra["losses"].get(step, []), rb["losses"].get(step, [])
        rows[f"printed losses of {step}"] = math.inf if len(x) != len(y) else \
            max((_difference(p, q) for p, q in zip(x, y)), default=0.0)
    exits_a, exits_b = [s["exit"] for s in ra["steps"]], [s["exit"] for s in rb["steps"]]
    timed_out = 124 in exits_a or 124 in exits_b
    rows["steps that ran"] = 0.0 if exits_a == exits_b else math.nan if timed_out else math.inf
    return rows


def check(stage_dir: Path, name: str, scratch: Path, python: str, extra_path: str, self_check: bool,
          cap: float, deadline: float) -> dict:
    if time.monotonic() > deadline:
        return {"repo": name, "error": "not run: the time given (--deadline) was spent"}
    work = scratch / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    started = time.monotonic()
    side_a = "port-a" if self_check else "orig"
    ra = run_side(stage_dir, name, side_a, work, python, extra_path, cap)
    rb = run_side(stage_dir, name, "port", work, python, extra_path, cap)
    result: dict[str, Any] = {"repo": name, "a": side_a, "b": "port", "log_a": ra["log_tail"],
                              "log_b": rb["log_tail"], "failed_a": ra["failed"],
                              "failed_b": rb["failed"], "steps_a": ra["steps"], "steps_b": rb["steps"]}
    rows = compare(work, side_a, "port", ra, rb)
    spread: dict[str, float] = {}
    if any(v > 0 for v in rows.values()) and time.monotonic() < deadline:
        rc = run_side(stage_dir, name, side_a + "2", work, python, extra_path, cap)
        spread = compare(work, side_a, side_a + "2", ra, rc)
    verdicts = {}
    for key, diff in rows.items():
        own = spread.get(key, 0.0)
        verdicts[key] = ("a step timed out: not compared" if math.isnan(diff) else
                         "same" if diff == 0 else f"within {TOLERANCE:g}" if diff <= TOLERANCE else
                         "within the original's own spread" if math.isfinite(diff) and own > 0 and
                         diff <= max(TOLERANCE, 2 * own) else
                         "beyond the spread of an original that is not deterministic"
                         if math.isfinite(diff) and own > TOLERANCE else
                         "the original differs from itself too" if math.isinf(own) else
                         "DIFFERS" if key in spread or time.monotonic() < deadline else
                         "differs (no time left to run the original twice)")
    result["files"] = {k: {"diff": rows[k], "spread": spread.get(k), "verdict": verdicts[k],
                           "detail": DETAIL.get(str(work / "out-port" / k), [])} for k in rows}
    result["differs"] = sorted(k for k, v in verdicts.items() if v == "DIFFERS")
    result["unstable"] = sorted(k for k, v in verdicts.items() if v == "the original differs from itself too")
    result["inconclusive"] = sorted(k for k, v in verdicts.items() if v.startswith(("a step timed", "differs (")))
    result["losses"] = {step: len(values) for step, values in rb["losses"].items()}
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stage")
    s.add_argument("--names", required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--mirror", type=Path, default=Path("/work/.mirror"))
    r = sub.add_parser("run")
    r.add_argument("--stage", type=Path, required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--names", default="")
    r.add_argument("--jobs", type=int, default=4)
    r.add_argument("--scratch", type=Path, default=Path("/tmp/recipe-differential"))
    r.add_argument("--python", default=sys.executable, help="the interpreter the recipes run with")
    r.add_argument("--python-for", default="", help="NAME=PYTHON,... per recipe (a gauntlet venv, say)")
    r.add_argument("--extra-path", default="", help="added to PYTHONPATH (carried wheels)")
    r.add_argument("--step-cap", type=float, default=240.0, help="the most seconds one step may take")
    r.add_argument("--deadline", type=float, default=1e9,
                   help="seconds after which no recipe starts and no original runs twice")
    r.add_argument("--self", dest="self_check", action="store_true",
                   help="no CUDA here: the port against itself")
    args = parser.parse_args(argv)
    if args.command == "stage":
        stage([n for n in args.names.split(",") if n], args.out, args.mirror)
        return 0
    manifest = json.loads((args.stage / "manifest.json").read_text())
    names = [n for n in args.names.split(",") if n] or [r["name"] for r in manifest["repos"]]
    pythons = dict(item.split("=", 1) for item in args.python_for.split(",") if item)
    args.out.mkdir(parents=True, exist_ok=True)
    import torch
    header = {"porter": manifest["porter"], "torch": torch.__version__, "cuda": torch.cuda.is_available(),
              "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
              "self_check": args.self_check}
    print(json.dumps(header), flush=True)
    results = []
    deadline = time.monotonic() + args.deadline
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(check, args.stage.resolve(), n, args.scratch, pythons.get(n, args.python),
                               args.extra_path, args.self_check, args.step_cap, deadline): n for n in names}
        for future in concurrent.futures.as_completed(futures):
            name = futures[future]
            try:
                result = future.result()
            except Exception as error:
                result = {"repo": name, "error": f"{type(error).__name__}: {error}"}
            results.append(result)
            (args.out / "results.json").write_text(json.dumps({**header, "results": results}, indent=1,
                                                              default=str))
            print(summary_line(result), flush=True)
    return 0


def summary_line(r: dict) -> str:
    if "error" in r:
        return f"{r['repo']:20s} harness error: {r['error']}"
    ran_a = sum(s["exit"] == 0 for s in r["steps_a"])
    ran_b = sum(s["exit"] == 0 for s in r["steps_b"])
    verdict = "DIFFERS: " + ", ".join(r["differs"][:4]) if r["differs"] else \
        "same" + (f" (unstable in the original: {', '.join(r['unstable'][:3])})" if r["unstable"] else "") + \
        (f" (inconclusive: {', '.join(r['inconclusive'][:3])})" if r["inconclusive"] else "")
    fails = "".join(f"; {side} failed at {r[key]}" for side, key in (("a", "failed_a"), ("port", "failed_b"))
                    if r[key])
    return f"{r['repo']:20s} steps {ran_a}/{len(r['steps_a'])} vs {ran_b}/{len(r['steps_b'])}, " \
           f"{len(r['files'])} compared, {r['seconds']} s: {verdict}{fails}"


if __name__ == "__main__":
    sys.exit(main())
