"""``porter verify``: import every module of a (ported) tree with CUDA hidden, optionally
run a command, and map each failure back to porter's report.

This is the only part of porter that executes the target's code, and it does so only in
child processes:

* the environment hides the GPUs (``CUDA_VISIBLE_DEVICES=""`` and the ROCm twins) so
  ``torch.cuda.is_available()`` is False even on a CUDA machine;
* a ``sitecustomize`` guard (``porter/verify/guard.py``) makes installed CUDA-only
  packages (flash_attn, xformers, apex, triton, ...) look not installed, and lets the
  code find ``porter_runtime`` only inside the tree (the vendored copy);
* workers (``porter/verify/child.py``) import batches of modules, one at a time, each
  under its own name and sys.path root (``porter.verify.modules``), so an
  ``if __name__ == "__main__":`` block never runs; a module past the time limit ends
  its worker and a new worker takes the rest of the batch, so one failure or hang
  never hides another module's result.

With ``--emulate mps`` the children also get ``PORTER_EMULATE=mps``: the vendored runtime
then runs the code on the CPU under MPS's rules (``porter_runtime/_emulate.py``) and
writes each process's CPU fallbacks to a folder read back here (:func:`emulation_results`).

Each failure is matched against porter's own analysis of the tree (the engine in
dry-run mode): a finding at a line of the failure's traceback inside the tree, or at
an import of the module a ``ModuleNotFoundError`` names, means porter named it;
otherwise it is NOT NAMED by porter.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Optional, Sequence

from porter.project.runtime_home import is_vendored
from porter.project.runtime_modules import supply
from porter.rulebase.cuda_packages import verify_hidden
from porter.verify.mapping import FindingIndex, Mapping, analyse, map_failure
from porter.verify.modules import ModuleSpec, SkippedFile, plan, search_path
from porter.verify.tracebacks import find_failure, last_line

#: Seconds a worker gets past the module's limit to dump where it is stuck and exit.
GRACE = 5.0
#: At least this many modules per worker: each worker pays for importing torch once.
MODULES_PER_WORKER = 8
#: Seconds a worker may take to start and import torch (or the vendored runtime).
WARM_UP = 300.0
HERE = Path(__file__).resolve().parent


@dataclass
class ModuleResult:
    module: str
    path: str
    status: str  # "ok" | "failed" | "timeout" | "crashed"
    seconds: float = 0.0
    error: str = ""  # the exception's last line, or what happened
    error_type: str = ""
    location: Optional[tuple[str, int]] = None  # innermost frame inside the tree
    frames: list[tuple[str, int]] = field(default_factory=list)  # in the tree, innermost first
    missing: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    traceback: str = ""
    output: str = ""  # what the module printed (failures only), tail
    mapping: Optional[Mapping] = None
    script: bool = False  # a script: only its imports were run (porter.verify.scripts)


@dataclass
class RunCommandResult:
    command: str
    returncode: Optional[int]
    seconds: float
    status: str  # "ok" | "failed" | "timeout"
    output: str  # tail of stdout + stderr
    error: str = ""
    location: Optional[tuple[str, int]] = None
    frames: list[tuple[str, int]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    mapping: Optional[Mapping] = None
    rank: Optional[int] = None  # the launcher's child (torchrun, mpiexec rank) that failed


@dataclass
class VerifyOptions:
    path: Path
    root: Path
    python: str = sys.executable
    timeout: float = 60.0
    jobs: int = 1
    include_tests: bool = False
    excludes: Sequence[str] = ()
    allow: Sequence[str] = ()
    run: Optional[str] = None
    run_timeout: Optional[float] = None
    #: where the --run command's output is shown as it comes (a binary stream), if anywhere
    echo: Optional[BinaryIO] = None
    #: "mps": the children run under porter_runtime's emulation of MPS (PORTER_EMULATE)
    emulate: Optional[str] = None


@dataclass
class VerifyReport:
    root: Path
    python: str
    modules: list[ModuleResult]
    skipped: list[SkippedFile]
    run: Optional[RunCommandResult] = None
    cuda_available: Optional[bool] = None  # torch.cuda.is_available() seen in a worker
    analysis_error: str = ""
    seconds: float = 0.0
    workers: int = 0  # worker processes started for the batches (not counting restarts)
    #: rewrites porter would still make in the tree (0 once it is ported)
    pending_rewrites: int = 0
    emulate: Optional[str] = None
    #: whether a child started the runtime's emulation (None: not emulating)
    emulation_started: Optional[bool] = None
    #: operators that fell back to the CPU under emulation: op, calls, first_at, always
    fallbacks: list[dict] = field(default_factory=list)

    @property
    def failures(self) -> list[ModuleResult]:
        return [m for m in self.modules if m.status != "ok"]

    @property
    def ok(self) -> bool:
        return not self.failures and (self.run is None or self.run.status == "ok")

    def counts(self) -> dict[str, int]:
        out = {"modules": len(self.modules), "ok": 0, "failed": 0, "timeout": 0, "crashed": 0}
        for m in self.modules:
            out[m.status] += 1
        causes = [m.mapping.cause if m.mapping else "other" for m in self.failures]
        out["named"] = sum(1 for m in self.failures if m.mapping and m.mapping.named)
        out["missing_dependency"] = causes.count("missing-dependency")
        # NOT NAMED: a CUDA cause porter's report does not name (a porter bug)
        out["not_named"] = sum(1 for m, c in zip(self.failures, causes) if c == "cuda" and not m.mapping.named)
        out["other"] = causes.count("other")
        out["skipped"] = len(self.skipped)
        return out


# -- the child processes' environment -------------------------------------------

def child_environment(root: Path, guard_dir: Path, allow: Sequence[str], python: str,
                      emulate: Optional[str] = None) -> dict[str, str]:
    env = dict(os.environ)
    roots = [str(root)]  # where the guard lets the code find porter_runtime's modules
    if emulate:  # porter_runtime reads these when the code imports it (porter_runtime/_emulate.py)
        env.update({"PORTER_EMULATE": emulate, "PORTER_EMULATE_REPORT_DIR": str(guard_dir / "emulate")})
        supplied = supply(guard_dir / "runtime_extra", "emulate")  # a copy sized to the port lacks them
        env.update(supplied)
        roots += supplied.values()
        (guard_dir / "emulate").mkdir(exist_ok=True)
    env.update({
        "CUDA_VISIBLE_DEVICES": "",  # torch.cuda.is_available() is False, even on a CUDA machine
        "HIP_VISIBLE_DEVICES": "",  # ROCm builds
        "ROCR_VISIBLE_DEVICES": "",
        "PYTHONDONTWRITEBYTECODE": "1",  # leave no __pycache__ in the user's tree
        "MPLBACKEND": "Agg",  # a plot at import time opens no window
        "PORTER_VERIFY_GUARD": json.dumps({"roots": roots, "allow": list(allow), **verify_hidden()}),
    })
    env["PYTHONPATH"] = os.pathsep.join([str(guard_dir), *filter(None, [os.environ.get("PYTHONPATH")])])
    # `python` in a --run command is the interpreter that imports the modules
    env["PATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(python)), *filter(None, [env.get("PATH")])])
    return env


def _guard_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="porter-verify-"))
    shutil.copyfile(HERE / "guard.py", folder / "sitecustomize.py")
    shutil.copyfile(HERE / "child.py", folder / "porter_verify_child.py")
    return folder


# -- importing -------------------------------------------------------------------

#: Worker processes alive, and the flag that stops starting new ones (Ctrl-C).
_LIVE: set = set()
_STOP = threading.Event()

_FAULT_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in ')


class _Batch:
    """One batch of modules, imported by as many workers as it takes."""

    def __init__(self, modules: Sequence[ModuleSpec], all_modules, options: VerifyOptions, env, guard: Path):
        self.modules = list(modules)
        self.all_modules = all_modules
        self.options = options
        self.env = env
        self.guard = guard
        self.results: dict[str, ModuleResult] = {}
        self.cuda_available: Optional[bool] = None

    def run(self) -> "_Batch":
        remaining = list(self.modules)
        while remaining and not _STOP.is_set():
            remaining = self._worker(remaining)
        return self

    def _job(self, modules: Sequence[ModuleSpec]) -> bytes:
        root = self.options.root
        items = [{"key": m.rel, "name": m.name, "file": str(m.path), "kind": m.kind, "header": m.header,
                  "paths": search_path(m, self.all_modules, root)} for m in modules]
        return json.dumps({"root": str(root), "cwd": str(root), "timeout": self.options.timeout,
                           "warm_up": self._warm_up(modules), "modules": items}).encode()

    def _warm_up(self, modules: Sequence[ModuleSpec]) -> list[str]:
        """The vendored runtime (it imports torch as the ported code does), else torch,
        when a module of the batch mentions torch."""
        for m in modules:
            try:
                if b"torch" in m.path.read_bytes():
                    break
            except OSError:
                continue
        else:
            return []
        vendored = (self.options.root / "porter_runtime" / "__init__.py").is_file()
        return ["porter_runtime" if vendored else "torch"]

    def _worker(self, modules: list[ModuleSpec]) -> list[ModuleSpec]:
        """Import ``modules`` in one process; returns those left when it died."""
        by_key = {m.rel: m for m in modules}
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(
                [self.options.python, str(self.guard / "porter_verify_child.py")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, cwd=self.options.root, env=self.env,
                start_new_session=os.name == "posix",
            )
            _LIVE.add(proc)
            threading.Thread(target=_reap, args=(proc,), daemon=True).start()
            killed = threading.Event()
            timer: Optional[threading.Timer] = None

            def arm(seconds: float) -> threading.Timer:
                t = threading.Timer(seconds, _kill, (proc, killed))
                t.daemon = True
                t.start()
                return t

            try:
                proc.stdin.write(self._job(modules))
                proc.stdin.close()
            except OSError:
                pass
            current: Optional[str] = None
            started = 0.0
            mark = 0
            timer = arm(max(self.options.timeout, WARM_UP) + GRACE)  # the interpreter's start, the warm-up
            for raw in proc.stdout:
                try:
                    message = json.loads(raw)
                except ValueError:
                    continue
                timer.cancel()
                event = message.get("event")
                if event == "start":
                    current, started = message.get("key"), time.monotonic()
                    mark = _size(err)
                    timer = arm(self.options.timeout + GRACE)
                elif event == "done" and message.get("key") in by_key:
                    spec = by_key[message["key"]]
                    self.results[spec.rel] = self._result(spec, message, _read(err, mark))
                    current = None
                    timer = arm(self.options.timeout + GRACE)
                elif event == "end":
                    self.cuda_available = message.get("cuda_available")
                    break
            timer.cancel()
            try:
                proc.wait(timeout=GRACE)
            except subprocess.TimeoutExpired:
                _kill(proc, killed)
                proc.wait()
            _kill_group(proc)  # anything the target started and left behind
            _LIVE.discard(proc)
            proc.stdout.close()
            left = [m for m in modules if m.rel not in self.results]
            if current is not None and current in by_key:
                spec = by_key[current]
                elapsed = time.monotonic() - started
                output = _read(err, mark)
                self.results[current] = self._died(spec, proc.returncode, elapsed, output, killed.is_set())
                left = [m for m in left if m.rel != current]
            elif left:  # the worker died before it started a module: nothing else can run either
                output = _read(err, 0)
                for spec in left:
                    self.results[spec.rel] = ModuleResult(
                        spec.name, spec.rel, "crashed",
                        error=f"the Python worker exited with {proc.returncode} before importing anything: "
                              + _last_line(output), output=output[-3000:])
                left = []
            return left

    def _result(self, spec: ModuleSpec, message: dict, output: str) -> ModuleResult:
        seconds = float(message.get("seconds", 0.0))
        if message.get("ok"):
            return ModuleResult(spec.name, spec.rel, "ok", seconds)
        frames = _tree_frames(message.get("frames", []), self.options.root)
        cause = [_tree_frames(f, self.options.root) for f in message.get("cause_frames", [])]
        error = message.get("error", "")
        hidden = message.get("hidden", [])
        if "porter_runtime" in hidden:
            error += (" (porter_runtime is installed with porter, but the ported code must find the copy "
                      "vendored in the tree: porter migrate --write puts it there)")
        elif hidden:
            error += f" ({', '.join(hidden)} is installed here, but CUDA-only: porter verify hides it)"
        return ModuleResult(
            spec.name, spec.rel, "failed", seconds, error=error, error_type=message.get("type", ""),
            location=frames[0] if frames else None, frames=frames + [f for fs in cause for f in fs],
            missing=message.get("missing", []), hidden=hidden, traceback=message.get("traceback", ""),
            output=output[-3000:],
        )

    def _died(self, spec: ModuleSpec, code, elapsed: float, output: str, killed: bool) -> ModuleResult:
        timed_out = killed or elapsed >= self.options.timeout or "Timeout (" in output
        frames = _fault_frames(output, self.options.root)
        if timed_out:
            where = f" at {frames[0][0]}:{frames[0][1]}" if frames else ""
            error = f"no result after {self.options.timeout:g} s{where}"
            return ModuleResult(spec.name, spec.rel, "timeout", round(elapsed, 3), error=error,
                                location=frames[0] if frames else None, frames=frames, output=output[-3000:])
        signal_name = ""
        if code is not None and code < 0:
            try:
                signal_name = f" ({signal.Signals(-code).name})"
            except ValueError:
                pass
        return ModuleResult(spec.name, spec.rel, "crashed", round(elapsed, 3),
                            error=f"the interpreter exited with {code}{signal_name} while importing it",
                            location=frames[0] if frames else None, frames=frames, output=output[-3000:])


def _size(file) -> int:
    try:
        return os.fstat(file.fileno()).st_size
    except OSError:
        return 0


def _read(file, start: int) -> str:
    """The file's bytes from ``start`` (at most the last 20 kB). ``os.pread`` leaves the
    offset alone: the child writes through the same open file."""
    try:
        size = _size(file)
        start = max(start, size - 20000)
        if hasattr(os, "pread"):
            data = os.pread(file.fileno(), size - start, start)
        else:  # pragma: no cover - Windows
            file.seek(start)
            data = file.read()
        return data.decode("utf-8", "replace")
    except OSError:
        return ""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def _kill(proc: subprocess.Popen, killed: threading.Event) -> None:
    if proc.poll() is None:
        killed.set()
        try:
            proc.kill()
        except OSError:
            pass
    _kill_group(proc)  # even after the worker died: a child it forked may hold its pipe open


def _reap(proc: subprocess.Popen) -> None:
    """Once the worker exits, end what it started: a process a module forked keeps the
    worker's output pipe open, and the read of it would wait for that process's end."""
    proc.wait()
    _kill_group(proc)


def _kill_group(proc: subprocess.Popen) -> None:
    if os.name == "posix":
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass


def _in_tree(filename: str, root: Path) -> Optional[str]:
    if not filename or filename.startswith("<"):
        return None
    try:
        rel = Path(os.path.realpath(filename)).relative_to(Path(os.path.realpath(root)))
    except ValueError:
        return None
    return rel.as_posix()


def _tree_frames(frames: Sequence, root: Path) -> list[tuple[str, int]]:
    """The frames inside the tree, innermost first (input: outermost first), less those
    of the vendored runtime: a failure it raises (the emulation's checks, a refused
    launch) is the line of the code that called it."""
    out = []
    for item in reversed(list(frames)):
        rel = _in_tree(item[0], root)
        if rel is not None and item[1] and not _vendored_runtime(root / rel):
            out.append((rel, int(item[1])))
    return out


def _vendored_runtime(path: Path) -> bool:
    return path.parent.name == "porter_runtime" and is_vendored(path.parent)


def _fault_frames(output: str, root: Path) -> list[tuple[str, int]]:
    """The frames of faulthandler's last dump (innermost first already)."""
    start = output.rfind("Timeout (")
    if start < 0:
        return []
    frames = []
    for line in output[start:].splitlines():
        match = _FAULT_FRAME.match(line)
        if match:
            rel = _in_tree(match["file"], root)
            if rel is not None:
                frames.append((rel, int(match["line"])))
        elif frames and not line.startswith(" "):
            break  # the main thread's stack ended (threads come after)
    return frames


def import_all(modules: Sequence[ModuleSpec], options: VerifyOptions, env, guard: Path):
    """Every module's result, in the order of ``modules``; and what torch said about CUDA."""
    if not modules:
        return [], None, 0
    workers = max(1, min(options.jobs, math.ceil(len(modules) / MODULES_PER_WORKER)))
    size = math.ceil(len(modules) / workers)
    batches = [_Batch(modules[i:i + size], modules, options, env, guard) for i in range(0, len(modules), size)]
    _STOP.clear()
    pool = ThreadPoolExecutor(len(batches))
    try:
        done = list(pool.map(_Batch.run, batches))
    except BaseException:  # Ctrl-C: the workers are in sessions of their own, so end them here
        _STOP.set()
        for proc in list(_LIVE):
            _kill(proc, threading.Event())
        raise
    finally:
        pool.shutdown(wait=True)
    results = {rel: r for b in done for rel, r in b.results.items()}
    seen = [b.cuda_available for b in done if b.cuda_available is not None]
    for m in modules:
        results[m.rel].script = m.header is not None
    return [results[m.rel] for m in modules], (any(seen) if seen else None), len(batches)


# -- --run ------------------------------------------------------------------------


def run_command(command: str, options: VerifyOptions, env) -> RunCommandResult:
    """Run ``command`` in the tree's root with the children's environment. Its output is
    kept (the tail goes in the result) and, with ``options.echo``, shown as it comes."""
    began = time.monotonic()
    status = "ok"
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(command, shell=True, cwd=options.root, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=os.name == "posix")
        if options.echo is not None:
            options.echo.write(f"porter verify: running {command}\n".encode())
        pump = threading.Thread(target=_pump, args=(proc.stdout, out, options.echo), daemon=True)
        pump.start()
        try:
            proc.wait(timeout=options.run_timeout)
        except subprocess.TimeoutExpired:
            _kill(proc, threading.Event())
            proc.wait()
            status = "timeout"
        finally:
            _kill_group(proc)  # what the command left running (and all of it on Ctrl-C)
            pump.join(timeout=GRACE)
        text = _read(out, 0)
    code = proc.returncode
    if status == "ok" and code != 0:
        status = "failed"
    result = RunCommandResult(command, code, round(time.monotonic() - began, 3), status, text[-6000:])
    if status != "ok":
        _locate(result, text, options.root, status == "timeout" and f"timed out after {options.run_timeout:g} s")
    return result


def _locate(result: RunCommandResult, text: str, root: Path, timed_out) -> None:
    """Where the command failed: the failing process's traceback (a launcher's child's,
    not the launcher's own; see porter.verify.tracebacks), at its deepest frame in the tree."""
    failure = find_failure(text, lambda frames: _tree_frames(frames, root))
    tb = failure.traceback
    if tb is not None:
        result.frames = _tree_frames(tb.frames, root)
        result.location = result.frames[0] if result.frames else None
        result.missing = failure.missing
    rank = tb.rank if tb is not None and tb.rank is not None else (failure.root.rank if failure.root else None)
    result.rank = rank
    said = tb.exception if tb is not None and tb.exception and result.frames else last_line(text)
    if timed_out:
        result.error = timed_out
    else:
        result.error = f"exit {result.returncode}: {f'rank {rank}: ' if rank is not None else ''}{said}"


def _pump(source, sink, echo) -> None:
    """Copy a pipe into ``sink`` (and to ``echo``, a binary stream) until it closes."""
    for chunk in iter(lambda: source.read1(65536), b""):
        sink.write(chunk)
        if echo is not None:
            try:
                echo.write(chunk)
                echo.flush()
            except (OSError, ValueError):
                echo = None
    sink.flush()


# -- the whole command -------------------------------------------------------------

def verify(options: VerifyOptions, files: Sequence[Path], analysis_config) -> VerifyReport:
    """Import every module of ``files`` (and run ``options.run``) with CUDA hidden."""
    began = time.monotonic()
    root = options.root.absolute()
    modules, skipped = plan(root, files, options.include_tests)
    guard = _guard_folder()
    env = child_environment(root, guard, options.allow, options.python, options.emulate)
    with ThreadPoolExecutor(1) as pool:
        analysis = pool.submit(analyse, analysis_config) if analysis_config is not None else None
        try:
            results, cuda, workers = import_all(modules, options, env, guard)
            command = run_command(options.run, options, env) if options.run else None
            started, fallbacks = emulation_results(guard / "emulate") if options.emulate else (None, [])
        finally:
            shutil.rmtree(guard, ignore_errors=True)
        analysis_error = ""
        findings: list[dict] = []
        if analysis is not None:
            try:
                findings = analysis.result()
            except Exception as exc:  # the mapping is lost, the verification is not
                analysis_error = f"{type(exc).__name__}: {exc}"
    index = FindingIndex(root, findings)
    for item in results:
        if item.status != "ok":
            item.mapping = map_failure(item.frames, item.missing, index, item.error, item.hidden)
    if command is not None and command.status == "failed":
        command.mapping = map_failure(command.frames, command.missing, index, command.error)
    pending = sum(1 for f in findings if f.get("action") == "rewrite")
    return VerifyReport(root, options.python, results, skipped, command, cuda, analysis_error,
                        round(time.monotonic() - began, 3), workers, pending, options.emulate, started, fallbacks)


def emulation_results(folder: Path) -> tuple[bool, list[dict]]:
    """Whether any child started the emulation, and the operators that fell back to the
    CPU in all of them (calls summed; the first call site seen), most calls first."""
    started, merged = False, {}
    for report in sorted(folder.glob("emulate-*.json")):
        try:
            data = json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        started = started or bool(data.get("started"))
        for row in data.get("fallbacks", []):
            seen = merged.setdefault(row["op"], dict(row, calls=0))
            seen["calls"] += int(row.get("calls", 0))
    return started, sorted(merged.values(), key=lambda r: (-r["calls"], r["op"]))
