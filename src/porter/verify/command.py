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
then runs the code on the CPU under MPS's rules (``porter_runtime/tools/emulate.py``) and
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
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional, Sequence

from porter.project.vendoring.runtime_modules import supply
from porter.rulebase.cuda_packages import verify_hidden
from porter.verify.emulate_cuda import VARIABLE as EMULATE_CUDA_VARIABLE
from porter.verify.emulate_cuda import copy_package
from porter.verify.mapping import FindingIndex, analyse, map_failure
from porter.verify.modules import ModuleSpec, plan, search_path
from porter.verify.processes import (GRACE, RUN_MARK, _fault_frames, _kill, _kill_group, _last_line, _read, _reap,
                                     _size, _tree_frames, lines_of, sweep)
from porter.verify.records import ModuleResult, VerifyOptions, VerifyReport
from porter.verify.run_command import run_command

#: At least this many modules per worker: each worker pays for importing torch once.
MODULES_PER_WORKER = 8
#: Seconds a worker may take to start and import torch (or the vendored runtime).
WARM_UP = 300.0
HERE = Path(__file__).resolve().parent


# -- the child processes' environment -------------------------------------------

def child_environment(root: Path, guard_dir: Path, allow: Sequence[str], python: str,
                      emulate: Optional[str] = None, hide_cuda: bool = True) -> dict[str, str]:
    env = dict(os.environ)
    roots = [str(root)]  # where the guard lets the code find porter_runtime's modules
    if emulate == "cuda":  # the guard starts the emulation in every interpreter (verify/emulate_cuda)
        copy_package(guard_dir)
        env[EMULATE_CUDA_VARIABLE] = "1"
    elif emulate:  # porter_runtime reads these when the code imports it (porter_runtime/tools/emulate.py)
        env.update({"PORTER_EMULATE": emulate, "PORTER_EMULATE_REPORT_DIR": str(guard_dir / "emulate")})
        supplied = supply(guard_dir / "runtime_extra", "emulate")  # a copy sized to the port lacks them
        env.update(supplied)
        roots += supplied.values()
        (guard_dir / "emulate").mkdir(exist_ok=True)
    if hide_cuda:  # torch.cuda.is_available() is False, even on a CUDA machine (and ROCm builds)
        env.update({"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""})
    env.update({
        "PYTHONDONTWRITEBYTECODE": "1",  # leave no __pycache__ in the user's tree
        "MPLBACKEND": "Agg",  # a plot at import time opens no window
        "PORTER_VERIFY_GUARD": guard_setting(roots, allow),
        RUN_MARK: guard_dir.name,  # unique to the run: what processes.sweep looks for
    })
    env["PYTHONPATH"] = os.pathsep.join([str(guard_dir), *filter(None, [os.environ.get("PYTHONPATH")])])
    # `python` in a --run command is the interpreter that imports the modules
    env["PATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(python)), *filter(None, [env.get("PATH")])])
    return env


def guard_setting(roots: Sequence[str], allow: Sequence[str] = ()) -> str:
    """The guard's configuration (``PORTER_VERIFY_GUARD``): porter_runtime found only in
    ``roots``, the CUDA-only packages porter's table names hidden but ``allow``."""
    return json.dumps({"roots": list(roots), "allow": list(allow), **verify_hidden()})


def _guard_folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="porter-verify-"))
    shutil.copyfile(HERE / "guard.py", folder / "sitecustomize.py")
    shutil.copyfile(HERE / "child.py", folder / "porter_verify_child.py")
    return folder


# -- importing -------------------------------------------------------------------

#: Worker processes alive, and the flag that stops starting new ones (Ctrl-C).
_LIVE: set = set()
_STOP = threading.Event()


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
            for raw in lines_of(proc):
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


# -- the whole command -------------------------------------------------------------

def verify(options: VerifyOptions, files: Sequence[Path], analysis_config) -> VerifyReport:
    """Import every module of ``files`` (and run ``options.run``) with CUDA hidden."""
    began = time.monotonic()
    root = options.root.absolute()
    modules, skipped = plan(root, files, options.include_tests)
    guard = _guard_folder()
    differential = None
    with ThreadPoolExecutor(1) as pool:
        analysis = pool.submit(analyse, analysis_config) if analysis_config is not None else None
        try:
            env = child_environment(root, guard, options.allow, options.python, options.emulate,
                                    hide_cuda=not _gpu_check(options))
            results, cuda, workers = import_all(modules, options, env, guard)
            command = run_command(options.run, options, env) if options.run and options.against is None else None
            if options.against is not None and options.run:
                from porter.verify.against import against

                differential = against(options, lambda tree: child_environment(
                    tree, guard, options.allow, options.python, options.emulate, hide_cuda=not _gpu_check(options)))
                command = differential.port_run  # CMD on a copy of the port: the tree itself is not written
            started, fallbacks = emulation_results(guard / "emulate") if options.emulate == "mps" else (None, [])
        finally:
            sweep(guard.name)  # what left its process group: a double-forked daemon
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
                        round(time.monotonic() - began, 3), workers, pending, options.emulate, started, fallbacks,
                        differential)


def _gpu_check(options: VerifyOptions) -> bool:
    """--against without --emulate cuda: the real check, on this machine's CUDA (not hidden)."""
    return options.against is not None and options.emulate is None


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
