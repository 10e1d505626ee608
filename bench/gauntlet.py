"""The gauntlet: real CUDA-only repositories that porter ports, verifies and runs.

    python bench/gauntlet.py                      # every repository, one row each, and the totals
    python bench/gauntlet.py --only nanogpt --keep
    python bench/gauntlet.py --list --format json
    python bench/gauntlet.py --env nanogpt        # make (or reuse) a recipe's environment, print its path

The list is ``bench/gauntlet_repos/NAME.toml``, one file a repository: its GitHub name, a
pinned 40-hex commit, the part ported, tags, the pip requirements its code needs beyond
torch, and the hand-labelled verdict on each finding porter says needs a human.
``NAME.py`` beside it, where present, is the recipe: the repository's own commands
scaled down by its own flags, on synthetic data and tiny random weights it makes itself
(``bench/gauntlet_repos/_recipe.py`` documents the format).

For each repository the runner takes the snapshot at its pin (a bare git directory under
``--mirror``, by default ``$PORTER_GAUNTLET_MIRROR`` or ``/work/.mirror``, laid out
``owner+name/…``; with ``--clone`` a missing one is cloned from GitHub), copies it twice into
a scratch folder, and on the copy ``port``:

1. ``porter migrate --write --report`` (timed): files and lines changed in the repository's
   own code, vendored runtime copies and lines, findings that need a human and how many of
   them the labels call false;
2. ``porter migrate --write`` again: idempotent when nothing changes, ``check clean`` when it
   finds nothing new to rewrite and no needs-a-human finding that the first pass lacked;
3. ``ruff check --select F`` on the original and on the port's own code;
4. ``porter verify`` in the recipe's environment: modules ok / failed for a CUDA cause that
   porter's report does not name / failed for another cause;
5. the recipe, with CUDA hidden, on the original and on the port: pass, or the failing step
   and the deepest line of the tree in its traceback;
6. the recipe on a fresh copy of the port under the runtime's MPS emulation
   (``PORTER_EMULATE=mps``, what ``porter verify --emulate mps`` sets), with the CUDA-only
   packages pip put in the recipe's environment hidden as ``porter verify`` hides them: a
   Mac in the loop.
   A recipe that passes on the CPU and fails here is a Mac-only failure; the operators
   that fell back to the CPU are listed with their calls and first call site.

Everything runs in child processes with time limits; a repository that breaks never stops
the others. Results go to ``--json FILE`` and the Markdown table to ``--markdown FILE``. A
recipe's environment is a virtual environment under the cache (``$PORTER_GAUNTLET_CACHE``,
default ``~/.cache/porter-gauntlet``) with this interpreter's torch linked in and the
requirements pip-installed; it is made once per set of requirements. This is a benchmark,
not a test: it needs the snapshots and PyPI, so CI does not run it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: porter depends on tomli there
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
REPOS = HERE / "gauntlet_repos"
RUNTIME = "porter_runtime"
COMMIT = re.compile(r"^[0-9a-f]{40}$")
NAME = re.compile(r"^[a-z0-9_-]+$")
# A failure off CUDA whose text points at CUDA (porter's own table decides package names); a
# torch_extensions path is an extension build that needed nvcc and left no library.
QUIET_ENV = {
    "CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
    "MPLBACKEND": "Agg", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
}


# --------------------------------------------------------------------------- the list

@dataclass
class Entry:
    name: str
    github: str
    commit: str
    subdir: str = ""
    tags: list = field(default_factory=list)
    agnostic: bool = False
    requirements: list = field(default_factory=list)
    notes: str = ""
    label: list = field(default_factory=list)
    missed: list = field(default_factory=list)
    recipe_issue: Optional[int] = None  # the open issue a failing recipe belongs to

    @property
    def recipe(self) -> Optional[Path]:
        path = REPOS / f"{self.name}.py"
        return path if path.is_file() else None


def load_entries() -> list[Entry]:
    entries = []
    for path in sorted(REPOS.glob("*.toml")):
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
        known = set(Entry.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise SystemExit(f"{path.name}: unknown keys {sorted(unknown)}")
        entry = Entry(**data)
        problems = validate(entry, path)
        if problems:
            raise SystemExit(f"{path.name}: " + "; ".join(problems))
        entries.append(entry)
    return entries


def validate(entry: Entry, path: Path) -> list[str]:
    problems = []
    if entry.name != path.stem or not NAME.match(entry.name):
        problems.append(f"name {entry.name!r} must equal the file's stem and be [a-z0-9_-]")
    if not COMMIT.match(entry.commit):
        problems.append(f"commit {entry.commit!r} is not 40 lowercase hex digits")
    if entry.github.count("/") != 1:
        problems.append(f"github {entry.github!r} is not owner/name")
    for requirement in entry.requirements:
        if "==" not in requirement and " @ " not in requirement:
            problems.append(f"requirement {requirement!r} is not pinned with ==")
    for label in entry.label:
        if label.get("verdict") not in ("real", "false") or not {"code", "path", "match"} <= set(label):
            problems.append(f"label {label} needs code, path, match and verdict real|false")
    return problems


# --------------------------------------------------------------------------- snapshots

def cache_dir() -> Path:
    return Path(os.environ.get("PORTER_GAUNTLET_CACHE", "~/.cache/porter-gauntlet")).expanduser()


def git_dir(entry: Entry, mirror: Path, clone: bool) -> Path:
    """A bare git directory holding the entry's commit."""
    folder = mirror / entry.github.replace("/", "+")
    candidates = [folder] + sorted(p for p in folder.glob("*") if p.is_dir()) if folder.is_dir() else []
    for candidate in candidates:
        if (candidate / "HEAD").is_file() and (candidate / "objects").is_dir():
            return candidate
    if not clone:
        raise RuntimeError(f"no snapshot of {entry.github} under {mirror} (fetch it, or pass --clone)")
    target = cache_dir() / "git" / entry.github.replace("/", "+")
    if not target.is_dir():
        run(["git", "clone", "--bare", "--quiet", f"https://github.com/{entry.github}.git", str(target)], timeout=900)
    return target


def snapshot(entry: Entry, mirror: Path, clone: bool) -> Path:
    """The tree at the pinned commit, extracted once into the cache (read-only by convention),
    as a clone has it: a git repository whose index tracks every file of the commit. Without
    one, discovery applied the repository's ``.gitignore`` to files git tracks (Open-Sora's
    ``opensora/datasets/`` under a ``datasets`` line, round 14), which a clone never does."""
    target = cache_dir() / "trees" / f"{entry.name}-{entry.commit[:12]}"
    if (target / ".gauntlet-complete").is_file():
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    repo = git_dir(entry, mirror, clone)
    archive = subprocess.run(["git", f"--git-dir={repo}", "archive", entry.commit], capture_output=True)
    if archive.returncode == 0:
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    else:  # a snapshot may lack its largest blobs: take the file that are there
        extract_present_blobs(repo, entry.commit, target)
    track_as_clone(target, entry.commit)
    (target / ".gauntlet-complete").write_text(entry.commit + "\n")
    return target


def track_as_clone(tree: Path, commit: str) -> None:
    """Make ``tree`` a git repository that tracks every file in it, committed once (a fixed
    author and date, so two extractions are the same). ``-f``: the extracted files are the
    commit's, so a ``.gitignore`` line that matches one of them matches a tracked file."""
    quiet = {"capture_output": True, "check": True, "cwd": tree}
    stamp = "2000-01-01T00:00:00+0000"
    env = {**os.environ, "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
    subprocess.run(["git", "init", "-q"], **quiet)
    (tree / ".git" / "info").mkdir(exist_ok=True)
    (tree / ".git" / "info" / "exclude").write_text(".gauntlet-complete\n")
    subprocess.run(["git", "add", "-A", "-f", "--", "."], **quiet)
    subprocess.run(["git", "-c", "user.name=gauntlet", "-c", "user.email=gauntlet@localhost",
                    "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "--allow-empty",
                    "-m", f"snapshot of {commit}"], env=env, **quiet)


def extract_present_blobs(repo: Path, commit: str, target: Path) -> None:
    listing = subprocess.run(["git", f"--git-dir={repo}", "ls-tree", "-r", "-z", commit],
                             capture_output=True, check=True).stdout
    for record in filter(None, listing.split(b"\0")):
        meta, path = record.split(b"\t", 1)
        mode, kind, sha = meta.split()
        if kind != b"blob":
            continue
        blob = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "blob", sha.decode()], capture_output=True)
        if blob.returncode != 0:
            continue
        out = target / os.fsdecode(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        if mode == b"120000":
            continue  # links are not followed by porter either
        out.write_bytes(blob.stdout)
        if mode == b"100755":
            out.chmod(0o755)


# --------------------------------------------------------------------------- environments

def torch_family() -> tuple[list[Path], list[str]]:
    """This interpreter's torch install (its top-level folders) and its requirements, as
    torch states them (ranges: a recipe's pins may need another fsspec than ours)."""
    dist = importlib.metadata.distribution("torch")
    site = Path(dist.locate_file(""))
    tops = {Path(str(f)).parts[0] for f in dist.files or ()}
    paths = [site / top for top in sorted(tops) if (site / top).exists() and not top.endswith(".pth")
             and top not in ("..", "bin")]
    return paths, [r for r in dist.requires or () if "extra ==" not in r]


def environment(entry: Entry) -> Path:
    """The recipe's virtual environment, made once per set of requirements."""
    links, torch_pins = torch_family()
    key = hashlib.sha256("\n".join([sys.version, *map(str, links), *sorted(entry.requirements)]).encode()).hexdigest()
    venv = cache_dir() / "venvs" / key[:16]
    if (venv / ".gauntlet-ready").is_file():
        add_torchrun(venv)
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    for path in links:
        (site / path.name).symlink_to(path)
    requirements = torch_pins + list(entry.requirements)
    proc = run([str(python), "-m", "pip", "install", "-q", *requirements], timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install failed for {entry.name}: {tail(proc.stdout + proc.stderr, 6)}")
    disable_cuda_built_torchvision(python, site)
    add_torchrun(venv)
    (venv / ".gauntlet-ready").write_text("\n".join(requirements) + "\n")
    return venv


def add_torchrun(venv: Path) -> None:
    """Linking torch in brings no console scripts: the environment's own ``torchrun``."""
    torchrun = venv / "bin" / "torchrun"
    python = venv / "bin" / "python"
    text = f"#!{python}\nimport sys\nfrom torch.distributed.run import main\nsys.exit(main())\n"
    if not torchrun.is_file() or torchrun.read_text() != text:
        torchrun.write_text(text)
        torchrun.chmod(0o755)


def disable_cuda_built_torchvision(python: Path, site: Path) -> None:
    """PyPI's torchvision is built against CUDA torch; on a CPU torch its C ops can't load,
    and its fake-kernel registrations then fail at import. Keep its Python parts."""
    meta = site / "torchvision" / "_meta_registrations.py"
    if not meta.is_file():
        return
    probe = run([str(python), "-c", "import torchvision"], check=False)
    if probe.returncode != 0 and "torchvision::" in probe.stderr:
        meta.write_text("# gauntlet: torchvision's C ops are built for CUDA torch and can't load here\n")


# --------------------------------------------------------------------------- processes

def run(argv, cwd=None, env=None, timeout=600.0, check=True, shell=False, merged=False) -> subprocess.CompletedProcess:
    """A child process in its own session, killed with its children at the time limit;
    ``merged``: stderr goes into stdout, in the order the child wrote them."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True, shell=shell,
                            executable="/bin/bash" if shell else None)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        escaped = descendants(proc.pid)  # torchrun starts its workers in sessions of their own
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in escaped:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # something still holds the pipes: stop reading them
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            proc.wait()
            out, err = "", ""
        return subprocess.CompletedProcess(argv, 124, out, (err or "") + f"\n[gauntlet: timed out after {timeout:.0f} s]")
    result = subprocess.CompletedProcess(argv, proc.returncode, out, err or "")
    if check and proc.returncode != 0:
        raise RuntimeError(f"{argv if not shell else argv[:80]} exited {proc.returncode}: {tail(out + err, 8)}")
    return result


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc; empty where there is none), also those
    that left its process group, as torch elastic's workers do."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def tail(text: str, lines: int) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def porter(*args, cwd=None, timeout=1200.0) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "porter", *args], cwd=cwd, timeout=timeout, check=False)


def child_env(venv: Path, extra: dict) -> dict:
    env = dict(os.environ)
    env.update(QUIET_ENV)
    env.update({"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}"})
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


# --------------------------------------------------------------------------- measurements

@dataclass
class Row:
    name: str
    tags: list
    agnostic: bool
    error: str = ""
    files_changed: int = 0
    lines_changed: int = 0
    runtime_copies: int = 0
    vendored_lines: int = 0
    needs_human: int = 0
    labelled_false: int = 0
    labelled_real: int = 0
    unlabelled: int = 0
    stale_labels: list = field(default_factory=list)
    #: files porter failed on ("path: error"): a porter bug each, whose findings are missing
    failed_files: list = field(default_factory=list)
    migrate_seconds: float = 0.0
    idempotent: Optional[bool] = None
    check_clean: Optional[bool] = None
    check_new: list = field(default_factory=list)
    ruff_before: int = 0
    ruff_after: int = 0
    verify_ok: int = 0
    verify_cuda_not_named: int = 0
    verify_cuda_named: int = 0
    verify_other: int = 0
    verify_failures: list = field(default_factory=list)
    #: modules that import unported (CUDA hidden) and fail once ported: the port broke them
    verify_regressions: list = field(default_factory=list)
    recipe: Optional[str] = None     # "pass" | "fail" | None (no recipe)
    recipe_failure: str = ""
    recipe_original: Optional[str] = None
    recipe_original_failure: str = ""
    recipe_issue: Optional[int] = None
    #: the recipe on the port under PORTER_EMULATE=mps: "pass" | "fail" | None (not run)
    recipe_mps: Optional[str] = None
    recipe_mps_failure: str = ""
    #: operators that fell back to the CPU under the emulation: op, calls, first_at, always
    mps_fallbacks: list = field(default_factory=list)
    #: --cuda-unchanged: `porter verify PORT --against ORIGINAL --emulate cuda` of the recipe:
    #: "identical" | "within the original's own spread" | "differs" | "not compared" | None (not run)
    cuda_unchanged: Optional[str] = None
    cuda_unchanged_detail: str = ""   # the largest differences, or why nothing was compared
    seconds: float = 0.0

    @property
    def mac_only(self) -> bool:
        """The port's recipe passes on the CPU and fails under MPS's rules."""
        return self.recipe == "pass" and self.recipe_mps == "fail"


def own_python_files(tree: Path) -> dict[str, Path]:
    files = {}
    for path in sorted(tree.rglob("*.py")):
        rel = path.relative_to(tree)
        if RUNTIME in rel.parts or any(part.startswith(".") for part in rel.parts):
            continue
        files[rel.as_posix()] = path
    return files


def diff_stats(original: Path, port: Path) -> tuple[int, int]:
    """Files and lines (added + removed) that differ in the repository's own Python code."""
    before, after = own_python_files(original), own_python_files(port)
    files = lines = 0
    for rel in sorted(set(before) | set(after)):
        old = before[rel].read_text(errors="replace").splitlines() if rel in before else []
        new = after[rel].read_text(errors="replace").splitlines() if rel in after else []
        if old == new:
            continue
        files += 1
        lines += sum(1 for line in difflib.unified_diff(old, new, lineterm="", n=0)
                     if line[:1] in "+-" and not line.startswith(("+++", "---")))
    return files, lines


def vendored(port: Path) -> tuple[int, int]:
    copies = [p for p in port.rglob(RUNTIME) if p.is_dir() and (p / "__init__.py").is_file()]
    lines = sum(len(f.read_text(errors="replace").splitlines()) for copy in copies for f in copy.rglob("*.py"))
    return len(copies), lines


def review_findings(report: dict, notes: bool = False) -> list[dict]:
    """The findings that need a human: info-level notes (a speed note, code that only
    runs where CUDA is) are listed in the report but block nothing, so they don't count
    (``notes``: them too)."""
    return [dict(finding, path=entry["path"]) for entry in report.get("files", ())
            for finding in entry.get("findings", ())
            if finding.get("action") == "review" and (notes or finding.get("severity") != "info")]


def label_of(finding: dict, labels: list[dict]) -> Optional[str]:
    for label in labels:
        text = f"{finding.get('message', '')}\n{finding.get('before', '')}"
        if label["code"] == finding.get("code") and label["path"] == finding["path"] and label["match"] in text:
            return label["verdict"]
    return None


def stale_labels(findings: list[dict], labels: list[dict]) -> list[str]:
    """Labels no finding matches any more (porter stopped reporting it, or the label is
    wrong): each one a ``code path match`` line, so the list stays honest."""
    return [f"{label['code']} {label['path']} {label['match']!r}" for label in labels
            if not any(label_of(f, [label]) for f in findings)]


def ruff_f(tree: Path) -> int:
    proc = run([sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F", "--output-format", "json",
                "--exit-zero", "--no-cache", "--exclude", RUNTIME, "."], cwd=tree, check=False, timeout=300)
    try:
        return len(json.loads(proc.stdout or "[]"))
    except json.JSONDecodeError:
        return -1


def tree_digest(tree: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(tree.rglob("*")):
        if path.is_file() and not path.is_symlink():
            digest.update(path.relative_to(tree).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def measure_port(entry: Entry, original: Path, port: Path, scratch: Path, row: Row) -> None:
    first = scratch / "first.json"
    start = time.perf_counter()
    proc = porter("migrate", ".", "--write", "--no-progress", "-q", "--report", str(first), cwd=port)
    row.migrate_seconds = round(time.perf_counter() - start, 1)
    if proc.returncode not in (0, 2) or not first.is_file():
        raise RuntimeError(f"porter migrate --write exited {proc.returncode}: {tail(proc.stderr, 6)}")
    report = json.loads(first.read_text())
    row.failed_files = [f"{e['path']}: {e.get('error', '')}" for e in report.get("files", ())
                        if e.get("status") == "error"]
    row.files_changed, row.lines_changed = diff_stats(original, port)
    row.runtime_copies, row.vendored_lines = vendored(port)
    findings = review_findings(report)
    row.needs_human = len(findings)
    verdicts = [label_of(f, entry.label) for f in findings]
    row.labelled_false, row.labelled_real = verdicts.count("false"), verdicts.count("real")
    row.unlabelled = verdicts.count(None)
    row.stale_labels = stale_labels(review_findings(report, notes=True), entry.label)  # a note keeps its label
    # Second pass: the fixed point, and nothing new to review.
    written = tree_digest(port)
    second = scratch / "second.json"
    porter("migrate", ".", "--write", "--no-progress", "-q", "--report", str(second), cwd=port)
    row.idempotent = tree_digest(port) == written
    again = json.loads(second.read_text()) if second.is_file() else {}
    before_keys = [(f["code"], f["path"]) for f in findings]
    new = [f for f in review_findings(again) if not _take(before_keys, (f["code"], f["path"]))]
    pending = [f"{e['path']}: would change" for e in again.get("files", ()) if e.get("status") == "changed"]
    row.check_new = pending + [f"{f['path']}:{f.get('line')} {f['code']} {f.get('message', '')[:80]}" for f in new]
    row.check_clean = not row.check_new and bool(again)
    row.ruff_before, row.ruff_after = ruff_f(original), ruff_f(port)


def _take(keys: list, key) -> bool:
    if key in keys:
        keys.remove(key)
        return True
    return False


def verify_json(tree: Path, venv: Path) -> Optional[dict]:
    proc = porter("verify", ".", "--format", "json", "-j", "2", "--timeout", "60",
                  "--python", str(venv / "bin" / "python"), cwd=tree, timeout=1800)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"error": f"verify did not answer (exit {proc.returncode}): {tail(proc.stderr, 3)}"}


def measure_verify(entry: Entry, original: Path, port: Path, venv: Path, scratch: Path, row: Row) -> None:
    data, before = verify_json(port, venv), verify_json(original, venv)
    if "error" in data:
        row.verify_failures.append(data["error"])
        return
    (scratch / "verify.json").write_text(json.dumps(data))
    imported_before = {m["path"] for m in before.get("modules", ()) if m.get("status") == "ok"}
    for module in data.get("modules", ()):
        if module.get("status") == "ok":
            row.verify_ok += 1
            continue
        if module["path"] in imported_before:  # the port broke what imported unported
            where = module.get("location") or {}
            row.verify_regressions.append(f"{module['path']}: {where.get('path', '?')}:{where.get('line', '?')}: "
                                          f"{module.get('error', '')[:160]}")
        cause = verify_cause(module)
        named = bool((module.get("mapping") or {}).get("named"))
        if cause == "cuda" and not named:
            row.verify_cuda_not_named += 1
        elif cause == "cuda":
            row.verify_cuda_named += 1
        else:
            row.verify_other += 1
        where = module.get("location") or {}
        row.verify_failures.append(f"{cause}{'' if named or cause != 'cuda' else ' NOT NAMED'}: {module['path']}: "
                                   f"{where.get('path', '?')}:{where.get('line', '?')}: {module.get('error', '')[:160]}")


def verify_cause(module: dict) -> str:
    """cuda or other, as porter verify classes the failure (its mapping's cause; a missing
    dependency counts as other here)."""
    return "cuda" if (module.get("mapping") or {}).get("cause") == "cuda" else "other"


# --------------------------------------------------------------------------- recipes

def run_recipe(entry: Entry, tree: Path, venv: Path, log: Path, extra: Optional[dict] = None) -> tuple[str, str]:
    """Prepare and every step (the steps with ``extra`` in their environment);
    ("pass", "") or ("fail", where it failed)."""
    python = venv / "bin" / "python"
    prepare = (f"import sys; sys.path.insert(0, {str(REPOS)!r}); from pathlib import Path; "
               f"import {entry.name} as recipe; recipe.prepare(Path({str(tree)!r}))")
    with open(log, "a") as out:
        proc = run([str(python), "-c", prepare], cwd=tree, env=child_env(venv, {}), timeout=900, check=False)
        out.write(f"$ prepare (exit {proc.returncode})\n{proc.stdout}{proc.stderr}\n")
        if proc.returncode != 0:
            return "fail", f"prepare: {last_error(proc.stdout + proc.stderr, tree)}"
        for step in load_steps(entry):
            command = step.command.replace("{tree}", str(tree))
            own = {k: v.replace("{tree}", str(tree)) for k, v in step.env.items()}
            if "PYTHONPATH" in own and "PYTHONPATH" in (extra or {}):  # the step's, after the guard's folder
                own["PYTHONPATH"] = os.pathsep.join([extra["PYTHONPATH"], own["PYTHONPATH"]])
            env = child_env(venv, {**(extra or {}), **own})
            started = time.perf_counter()
            proc = run(command, cwd=tree, env=env, timeout=step.timeout, check=False, shell=True, merged=True)
            out.write(f"$ {command}  (exit {proc.returncode}, {time.perf_counter() - started:.1f} s)\n"
                      f"{proc.stdout}{proc.stderr}\n")
            if proc.returncode != 0:
                return "fail", f"{step.name}: {last_error(proc.stdout + proc.stderr, tree)}"
            missing = [p for p in step.outputs if not list(tree.glob(p))]
            if missing:
                return "fail", f"{step.name}: exit 0 but no {', '.join(missing)}"
    return "pass", ""


def load_steps(entry: Entry):
    sys.path.insert(0, str(REPOS))
    try:
        import importlib
        module = importlib.import_module(entry.name)
        return list(module.STEPS)
    finally:
        sys.path.remove(str(REPOS))


TRACE_FILE = re.compile(r'^\s*File "([^"]+)", line (\d+)')
#: What launchers put before each line of a child's output (torchrun's ``[rank0]:``).
LAUNCH_PREFIX = re.compile(r"^\[(?:rank|default)\d+\]:\s?")


def last_error(output: str, tree: Path) -> str:
    """Where a failed step failed: of the tracebacks in its output (a launcher's children
    print theirs with a ``[rankN]:`` prefix), the last one with a frame inside the tree
    (the vendored runtime's frames passed over, as porter verify does), as its deepest
    such frame and its exception line; without one, the last line that
    isn't porter_runtime's own note."""
    lines = [LAUNCH_PREFIX.sub("", line) for line in output.rstrip().splitlines()]
    if not lines:
        return "no output"
    best = None
    for start in (i for i, line in enumerate(lines) if line.startswith("Traceback")):
        frame, exception = None, None
        for line in lines[start + 1:]:
            match = TRACE_FILE.match(line)
            if match:
                where = Path(match.group(1))
                if where.is_absolute() and where.resolve().is_relative_to(tree.resolve()):
                    rel = where.resolve().relative_to(tree.resolve())
                    if RUNTIME not in rel.parts[:-1]:  # the vendored runtime's frames: the caller's line
                        frame = f"{rel}:{match.group(2)}"
            elif line.strip() and not line.startswith(" "):
                exception = line.strip()
                break
        if frame or best is None:
            best = (frame, exception)
    if best is None or best[1] is None:
        plain = [line.strip() for line in lines if line.strip() and not line.startswith("porter_runtime:")]
        return (plain or lines)[-1][:200]
    frame, exception = best
    return f"{frame + ': ' if frame else ''}{exception[:200]}"


# --------------------------------------------------------------------------- one repository

def run_one(entry: Entry, args) -> Row:
    row = Row(name=entry.name, tags=entry.tags, agnostic=entry.agnostic, recipe_issue=entry.recipe_issue)
    started = time.perf_counter()
    scratch = (args.work or cache_dir() / "work") / entry.name
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        source = snapshot(entry, args.mirror, args.clone)
        original, port = scratch / "orig", scratch / "port"
        shutil.copytree(source, original, symlinks=True)
        (original / ".gauntlet-complete").unlink()
        shutil.copytree(original, port, symlinks=True)
        original, port = original / entry.subdir, port / entry.subdir
        measure_port(entry, original, port, scratch, row)
        runs_code = (entry.recipe and (args.cuda_unchanged or not args.no_recipes)) or not args.no_verify
        venv = environment(entry) if runs_code else None  # migrate-only runs need no environment
        if entry.recipe and args.cuda_unchanged:  # before anything runs in the trees
            measure_cuda_unchanged(entry, original, port, venv, row)
        if not args.no_verify:
            measure_verify(entry, original, port, venv, scratch, row)
        if entry.recipe and not args.no_recipes:
            if not args.no_emulate:  # a pristine copy: the CPU run leaves checkpoints a recipe may resume from
                shutil.copytree(scratch / "port", scratch / "port-mps", symlinks=True)
            row.recipe, row.recipe_failure = run_recipe(entry, port, venv, scratch / "recipe-port.log")
            if not args.no_emulate:
                run_emulated(entry, scratch, venv, row)
            if not args.no_baseline:
                row.recipe_original, row.recipe_original_failure = run_recipe(
                    entry, original, venv, scratch / "recipe-orig.log")
    except Exception as error:  # one repository's trouble is its row, never the run's end
        row.error = f"{type(error).__name__}: {str(error)[:300]}"
    row.seconds = round(time.perf_counter() - started, 1)
    if not args.keep:
        for tree in ("orig", "port", "port-mps"):
            shutil.rmtree(scratch / tree, ignore_errors=True)
    return row


def measure_cuda_unchanged(entry: Entry, original: Path, port: Path, venv: Path, row: Row) -> None:
    """The recipe on copies of the original and of the port on an emulated CUDA machine
    (``porter verify --against --emulate cuda``, the check a user runs): whatever the port
    computes differently on CUDA is porter's change."""
    command = f"python {REPOS / '_run_recipe.py'} {entry.name}"
    proc = run([sys.executable, "-m", "porter", "verify", str(port), "--against", str(original), "--emulate", "cuda",
                "--run", command, "--python", str(venv / "bin" / "python"), "--exclude", "*",
                "--output-format", "json"], env=child_env(venv, {}), timeout=3600, check=False)
    try:
        against = json.loads(proc.stdout)["against"]
    except (ValueError, KeyError, TypeError):
        row.cuda_unchanged, row.cuda_unchanged_detail = "not compared", tail(proc.stderr or proc.stdout, 2)
        return
    row.cuda_unchanged = against["verdict"]
    if against.get("error"):
        row.cuda_unchanged_detail = against["error"]
    elif against.get("original_status") != "ok" or against.get("port_status") != "ok":
        row.cuda_unchanged_detail = f"original {against.get('original_status')}, port {against.get('port_status')}"
    differing = [r for r in against.get("compared", []) if r.get("difference") != 0.0]
    if differing:
        row.cuda_unchanged_detail = "; ".join(filter(None, [row.cuda_unchanged_detail] + [
            f"{r['what']}: {r['difference'] if r['difference'] is not None else r.get('why', '')}"
            for r in differing[:3]]))


def mac_packages(folder: Path, roots: list) -> dict:
    """The environment under which the recipe's interpreters see the packages a Mac has:
    ``porter verify``'s guard as their ``sitecustomize``, which makes the CUDA-only
    packages installed in the recipe's environment (xformers, triton, flash_attn: pip
    installs them on Linux) not installed, as ``porter verify --emulate mps`` does, and
    lets the code find porter_runtime only in ``roots``. Without it an installed xformers
    hid the very import a Mac fails on (mistral-inference, blind round 12)."""
    from porter.verify.command import HERE, guard_setting

    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(HERE / "guard.py", folder / "sitecustomize.py")
    return {"PYTHONPATH": str(folder), "PORTER_VERIFY_GUARD": guard_setting(roots)}


def run_emulated(entry: Entry, scratch: Path, venv: Path, row: Row) -> None:
    """The recipe on the port under the runtime's MPS emulation (step 6)."""
    from porter.project.vendoring.runtime_modules import supply  # the emulation's modules: a sized copy lacks them
    from porter.verify.command import emulation_results  # the one reader of the runtime's reports

    reports = scratch / "emulate"
    shutil.rmtree(reports, ignore_errors=True)
    reports.mkdir()
    tree = scratch / "port-mps" / entry.subdir
    supplied = supply(scratch / "runtime-extra", "emulate")
    extra = {"PORTER_EMULATE": "mps", "PORTER_EMULATE_REPORT_DIR": str(reports), **supplied,
             **mac_packages(scratch / "mac-guard", [str(tree), *supplied.values()])}
    row.recipe_mps, row.recipe_mps_failure = run_recipe(entry, tree, venv, scratch / "recipe-mps.log", extra)
    started, row.mps_fallbacks = emulation_results(reports)
    if not started and row.recipe_mps == "pass":
        row.recipe_mps_failure = "the emulation never started (no step imported porter_runtime)"


# --------------------------------------------------------------------------- output

def totals(rows: list[Row]) -> dict:
    with_recipe = [r for r in rows if r.recipe]
    vendored_lines = [r.vendored_lines for r in rows if not r.error]
    return {
        "repositories": len(rows),
        "errors": sum(bool(r.error) for r in rows),
        "failed_files": sum(len(r.failed_files) for r in rows),
        "recipes": len(with_recipe),
        "recipes_passing": sum(r.recipe == "pass" for r in with_recipe),
        "recipes_failing_unported": sum(r.recipe_original == "fail" for r in with_recipe),
        "verify_cuda_not_named": sum(r.verify_cuda_not_named for r in rows),
        "recipes_emulated": sum(r.recipe_mps is not None for r in rows),
        "mac_only_failures": sum(r.mac_only for r in rows),
        "cuda_unchanged_checked": sum(r.cuda_unchanged is not None for r in rows),
        "cuda_unchanged_same": sum(r.cuda_unchanged in ("identical", "within the original's own spread") for r in rows),
        "verify_regressions": sum(len(r.verify_regressions) for r in rows),
        "needs_human": sum(r.needs_human for r in rows),
        "labelled_false": sum(r.labelled_false for r in rows),
        "unlabelled": sum(r.unlabelled for r in rows),
        "stale_labels": sum(len(r.stale_labels) for r in rows),
        "check_clean": sum(bool(r.check_clean) for r in rows),
        "idempotent": sum(bool(r.idempotent) for r in rows),
        "ruff_f_new": sum(max(0, r.ruff_after - r.ruff_before) for r in rows if not r.error),
        "median_vendored_lines": statistics.median(vendored_lines) if vendored_lines else 0,
        "max_runtime_copies": max((r.runtime_copies for r in rows), default=0),
    }


def markdown(rows: list[Row], when: str) -> str:
    head = ("| repository | tags | changed (files / lines) | vendored (copies / lines) | needs a human "
            "(labelled false) | verify ok / CUDA NOT NAMED / other / broken by the port | recipe: original → port | "
            "port under --emulate mps (fallbacks) | CUDA unchanged (emulated) | check clean | "
            "idempotent | ruff F before → after | migrate s |")
    lines = [f"Gauntlet run of {when}.", "", head, "|" + "---|" * 13]
    for r in rows:
        if r.error:
            lines.append(f"| {r.name} | {', '.join(r.tags[:3])} | error: {_cell(r.error[:120])} |" + " |" * 10)
            continue
        unchanged = "—" if r.cuda_unchanged is None else r.cuda_unchanged + \
            (f": `{_cell(r.cuda_unchanged_detail[:110])}`" if r.cuda_unchanged_detail else "")
        recipe = "—" if r.recipe is None else f"{r.recipe_original or '?'} → **{r.recipe}**"
        if r.recipe == "fail":
            issue = f" (#{r.recipe_issue})" if r.recipe_issue else ""
            recipe += f": `{_cell(r.recipe_failure[:110])}`{issue}"
        lines.append(
            f"| {r.name}{' (agnostic)' if r.agnostic else ''} | {', '.join(r.tags[:3])} | {r.files_changed} / "
            f"{r.lines_changed} | {r.runtime_copies} / {r.vendored_lines} | {r.needs_human} ({r.labelled_false}"
            f"{f', {r.unlabelled} unlabelled' if r.unlabelled else ''}) | {r.verify_ok} / {r.verify_cuda_not_named}"
            f" / {r.verify_other} / {len(r.verify_regressions)} | {recipe} | {_emulated_cell(r)} | {unchanged} | "
            f"{'yes' if r.check_clean else 'no'} | "
            f"{'yes' if r.idempotent else 'no'} | {r.ruff_before} → {r.ruff_after} | {r.migrate_seconds} |")
    t = totals(rows)
    lines += ["", f"Totals: recipes passing unedited **{t['recipes_passing']} of {t['recipes']}** "
              f"({t['recipes_failing_unported']} of them fail unported); Mac-only failures (pass on the CPU, fail "
              f"under --emulate mps): **{t['mac_only_failures']} of {t['recipes_emulated']}**; "
              + (f"CUDA unchanged (the recipe under `verify --against --emulate cuda`): **{t['cuda_unchanged_same']} "
                 f"of {t['cuda_unchanged_checked']}**; " if t["cuda_unchanged_checked"] else "")
              + "verify failures with "
              f"a CUDA cause "
              f"porter did not name: **{t['verify_cuda_not_named']}**; modules the port broke (they import "
              f"unported, with CUDA hidden, and fail ported): **{t['verify_regressions']}**; needs-a-human findings "
              f"{t['needs_human']}, labelled false **{t['labelled_false']}** ({t['unlabelled']} unlabelled); "
              f"files porter failed on **{t['failed_files']}**; "
              f"`--check` clean after `--write` {t['check_clean']} of {t['repositories'] - t['errors']}; "
              f"idempotent {t['idempotent']}; new ruff F errors {t['ruff_f_new']}; median vendored lines "
              f"**{t['median_vendored_lines']:g}** (at most {t['max_runtime_copies']} copies in a repository)."]
    return "\n".join(lines) + "\n"


def _fallbacks(r: Row) -> str:
    return ", ".join(f"{f['op'].replace('aten::', '')} ×{f['calls']}" for f in r.mps_fallbacks[:4]) + \
        (f" +{len(r.mps_fallbacks) - 4}" if len(r.mps_fallbacks) > 4 else "")


def _emulated_cell(r: Row) -> str:
    """Pass / fail (bold when Mac-only) and where, then the operators that fell back."""
    if r.recipe_mps is None:
        return "—"
    cell = f"**{r.recipe_mps}**" if r.mac_only else r.recipe_mps
    if r.recipe_mps_failure:
        cell += f": `{_cell(r.recipe_mps_failure[:110])}`"
    return cell + (f" ({_cell(_fallbacks(r))})" if r.mps_fallbacks else "")


def _cell(text: str) -> str:
    """Text that stays one Markdown table cell in code quotes."""
    return text.replace("`", "'").replace("|", "\\|")


def text_row(r: Row) -> str:
    if r.error:
        return f"{r.name}: ERROR {r.error}"
    recipe = "no recipe" if r.recipe is None else f"recipe {r.recipe_original or '-'} -> {r.recipe}"
    if r.recipe == "fail":
        recipe += f" [{r.recipe_failure}]"
    if r.recipe_mps is not None:
        recipe += f"; under --emulate mps {r.recipe_mps}{' (MAC-ONLY)' if r.mac_only else ''}"
        recipe += f" [{r.recipe_mps_failure}]" if r.recipe_mps_failure else ""
        recipe += f" fallbacks: {_fallbacks(r)}" if r.mps_fallbacks else ""
    return (f"{r.name}: changed {r.files_changed} files / {r.lines_changed} lines; vendored {r.runtime_copies} / "
            f"{r.vendored_lines} lines; needs human {r.needs_human} (false {r.labelled_false}, unlabelled "
            f"{r.unlabelled}, stale labels {len(r.stale_labels)}); "
            f"{f'FAILED ON {len(r.failed_files)} FILES ({r.failed_files[0]}); ' if r.failed_files else ''}verify {r.verify_ok} ok / {r.verify_cuda_not_named} CUDA NOT NAMED / "
            f"{r.verify_other} other, {len(r.verify_regressions)} broken by the port; {recipe}; check clean {r.check_clean}; idempotent {r.idempotent}; "
            f"ruff F {r.ruff_before} -> {r.ruff_after}; migrate {r.migrate_seconds} s; total {r.seconds} s")


def list_json(entries: list[Entry]) -> str:
    repos = [{"name": e.name, "github": e.github, "commit": e.commit, "subdir": e.subdir, "tags": e.tags,
              "agnostic": e.agnostic, "recipe": e.recipe is not None, "labels": len(e.label)} for e in entries]
    return json.dumps({"repos": repos}, indent=2)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the list and stop")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--only", action="append", default=[], help="these repositories (comma-separated)")
    parser.add_argument("--env", metavar="NAME", help="make (or reuse) NAME's environment and print its path")
    parser.add_argument("--mirror", type=Path, default=Path(os.environ.get("PORTER_GAUNTLET_MIRROR", "/work/.mirror")))
    parser.add_argument("--clone", action="store_true", help="clone a repository missing from --mirror from GitHub")
    parser.add_argument("--keep", action="store_true", help="keep the scratch trees (WORK/NAME/{orig,port})")
    parser.add_argument("--work", type=Path, help="scratch folder (default: the cache's work/)")
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--no-recipes", action="store_true")
    parser.add_argument("--no-baseline", action="store_true", help="don't run recipes on the unported tree")
    parser.add_argument("--no-emulate", action="store_true",
                        help="don't run the port's recipe again under the runtime's MPS emulation")
    parser.add_argument("--cuda-unchanged", action="store_true",
                        help="run each recipe on the original and the port under `porter verify --against "
                             "--emulate cuda` and report whether the port computes the same on CUDA")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="repositories at a time")
    parser.add_argument("--json", type=Path, help="write the rows and totals here")
    parser.add_argument("--markdown", type=Path, help="write the Markdown table here")
    args = parser.parse_args(argv)

    entries = load_entries()
    if args.list:
        print(list_json(entries) if args.format == "json" else
              "\n".join(f"{e.name:22} {e.github:45} {e.commit[:12]} {'recipe' if e.recipe else ''}" for e in entries))
        return 0
    by_name = {e.name: e for e in entries}
    if args.env:
        print(environment(by_name[args.env]))
        return 0
    wanted = [n for value in args.only for n in value.split(",") if n]
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        parser.error(f"unknown repositories: {', '.join(unknown)}")
    chosen = [by_name[n] for n in wanted] if wanted else entries
    rows = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for row in pool.map(lambda e: run_one(e, args), chosen):
            print(text_row(row), flush=True)
            rows.append(row)
    when = time.strftime("%Y-%m-%d")
    table = markdown(rows, when)
    if args.markdown:
        args.markdown.write_text(table)
    if args.json:
        args.json.write_text(json.dumps({"date": when, "rows": [asdict(r) for r in rows], "totals": totals(rows)},
                                        indent=1))
    print(json.dumps(totals(rows)) if args.format == "json" else table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
