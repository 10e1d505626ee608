"""The search of ``porter fit``: candidate values, one trial per value, the verdicts.

A trial runs the user's command in a child process with PORTER_PEAK_MEMORY_FILE
set; the vendored porter_runtime writes the run's peak memory there at exit
(see porter_runtime/tools/peak.py). The search goes down from the original value by halves
until a run fits, then up by binary search between the largest value that fits
and the smallest that does not.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from porter.project.vendoring.runtime_modules import supply

PEAK_ENV = "PORTER_PEAK_MEMORY_FILE"  # read by porter_runtime/tools/peak.py
DEFAULT_FRACTION = 0.8

# What torch and the OS print when memory runs out (CUDA, MPS, the CPU allocator, Python).
_OOM = re.compile(r"out of memory|OutOfMemoryError|can't allocate memory|Cannot allocate memory"
                  r"|\bMemoryError\b|std::bad_alloc|not enough memory", re.IGNORECASE)
_KILLED = (-signal.SIGKILL, 128 + signal.SIGKILL)  # the kernel's OOM killer, macOS jetsam


# -- the budget ---------------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


@dataclass(frozen=True)
class Budget:
    """Either bytes, or a fraction of what the device can use (known after the first run)."""

    bytes: Optional[int] = None
    fraction: Optional[float] = None

    @classmethod
    def parse(cls, text: str) -> "Budget":
        """'6GiB', '6G' (binary), '6GB' (decimal), '800M', '123456789', '70%'."""
        value = text.strip().replace(" ", "")
        if value.endswith("%"):
            number = float(value[:-1])
            if not 0 < number <= 100:
                raise ValueError(f"{text!r}: a percentage must be in (0, 100]")
            return cls(fraction=number / 100)
        match = re.fullmatch(r"(\d+(?:\.\d+)?)([a-zA-Z]*)", value)
        unit = match.group(2).lower() if match else ""
        if not match or unit not in _UNITS:
            raise ValueError(f"{text!r}: use bytes or a size like 6GiB, 6G, 800MB, or a percentage like 70%")
        size = int(float(match.group(1)) * _UNITS[unit])
        if size <= 0:
            raise ValueError(f"{text!r}: the budget must be positive")
        return cls(bytes=size)

    def resolve(self, capacity: int) -> Optional[int]:
        if self.bytes is not None:
            return self.bytes
        return int(capacity * self.fraction) if capacity > 0 else None

    def describe(self, capacity: int, what: str) -> str:
        if self.bytes is not None:
            return human(self.bytes)
        resolved = self.resolve(capacity)
        if resolved is None:
            return f"{self.fraction:.0%} of {what} (unknown)"
        return f"{human(resolved)} ({self.fraction:.0%} of {what}, {human(capacity)})"


def human(n: Optional[int]) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}" if unit == "GiB" else f"{n / size:.0f} {unit}"
    return f"{n} B"


# -- one trial ----------------------------------------------------------------------------

FITS, OVER, OOM, TIMEOUT, ERROR = "fits", "over budget", "out of memory", "timed out", "error"


@dataclass
class Trial:
    value: int
    accum: Optional[int]
    status: str
    peak_bytes: Optional[int] = None
    seconds: Optional[float] = None  # per optimizer step, after the first
    wall_seconds: float = 0.0
    returncode: Optional[int] = None
    device: Optional[str] = None
    measure: Optional[str] = None
    output_tail: str = ""  # the run's last lines, kept when it failed

    @property
    def fits(self) -> bool:
        return self.status == FITS

    def to_json(self) -> dict:
        return {"value": self.value, "accum": self.accum, "peak_bytes": self.peak_bytes, "fits": self.fits,
                "status": self.status, "seconds": self.seconds, "wall_seconds": round(self.wall_seconds, 3),
                "returncode": self.returncode, "device": self.device,
                "error": self.output_tail if self.status in (ERROR, OOM) else None}


@dataclass
class Record:
    """What the runtime wrote: one JSON line per process of the run."""

    device: str
    peak_bytes: int
    measure: str
    capacity_bytes: int
    capacity: str
    step_seconds: Optional[float]

    @classmethod
    def read(cls, path: Path) -> Optional["Record"]:
        try:
            lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, ValueError):
            return None
        if not lines:
            return None
        first = lines[0]
        peaks = [int(line.get("peak_bytes") or 0) for line in lines]
        # Processes share host memory (CPU, MPS's unified memory); each CUDA process has its own GPU.
        peak = max(peaks) if first.get("device") in ("cuda", "xpu") else sum(peaks)
        steps = [line["step_seconds"] for line in lines if line.get("step_seconds") is not None]
        return cls(device=str(first.get("device", "?")), peak_bytes=peak, measure=str(first.get("measure", "")),
                   capacity_bytes=int(first.get("capacity_bytes") or 0), capacity=str(first.get("capacity", "")),
                   step_seconds=max(steps) if steps else None)


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


@dataclass
class Runner:
    """Runs the command with one value and judges the run against the budget."""

    make_command: Callable[[int, Optional[int]], tuple[list[str], dict[str, str]]]
    budget: Budget
    timeout: float
    cwd: Optional[Path] = None
    budget_bytes: Optional[int] = None  # fixed by the first run that reports its device
    capacity: tuple[int, str] = (0, "")
    device: Optional[str] = None
    measure: Optional[str] = None

    def __call__(self, value: int, accum: Optional[int]) -> Trial:
        argv, extra_env = self.make_command(value, accum)
        with tempfile.TemporaryDirectory(prefix="porter-fit-") as tmp:
            record_path = Path(tmp) / "peak.jsonl"
            log_path = Path(tmp) / "output.log"
            env = {**os.environ, **extra_env, PEAK_ENV: str(record_path),
                   **supply(Path(tmp) / "runtime_extra", "fit")}  # the recorder: a sized copy lacks it
            start = time.monotonic()
            returncode, timed_out = _run(argv, env, log_path, self.timeout, self.cwd)
            wall = time.monotonic() - start
            output = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
            record = Record.read(record_path)
        trial = Trial(value, accum, ERROR, wall_seconds=wall, returncode=returncode)
        if record is not None:
            self._learn(record)
            trial.peak_bytes, trial.seconds = record.peak_bytes, record.step_seconds
            trial.device, trial.measure = record.device, record.measure
        if timed_out:
            trial.status = TIMEOUT
        elif returncode != 0:
            oom = returncode in _KILLED or _OOM.search(output[-20000:]) is not None
            trial.status = OOM if oom else ERROR
            trial.output_tail = _tail(output) or f"(no output; exit status {returncode})"
        elif record is None:
            trial.output_tail = (
                "the run finished but recorded no peak memory: the command must import porter_runtime "
                f"(a repository ported with `porter migrate --write` does), which writes it at exit when "
                f"{PEAK_ENV} is set, and must end normally, not by os._exit. Its last output:\n" + (_tail(output, 10) or "(none)"))
        elif self.budget_bytes is None:
            trial.output_tail = f"the run reported no memory capacity for {record.device}; give --budget SIZE"
        else:
            trial.status = FITS if record.peak_bytes <= self.budget_bytes else OVER
        return trial

    def _learn(self, record: Record) -> None:
        if self.device is None:
            self.device, self.measure = record.device, record.measure
            self.capacity = (record.capacity_bytes, record.capacity)
            self.budget_bytes = self.budget.resolve(record.capacity_bytes)


def _run(argv: Sequence[str], env: Mapping[str, str], log_path: Path, timeout: float,
         cwd: Optional[Path]) -> tuple[Optional[int], bool]:
    """Run to completion or to the time limit; the whole process group is stopped on timeout."""
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(list(argv), env=dict(env), cwd=cwd, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            log.write(f"could not start {argv[0]!r}: {exc}".encode())
            return 127, False
        try:
            return proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            _stop(proc)
            return proc.returncode, True
        except BaseException:  # Ctrl-C: leave nothing running
            _stop(proc)
            raise


def _stop(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


# -- the search ---------------------------------------------------------------------------


@dataclass
class Space:
    """The values a search may try, smallest first.

    Without accumulation: 1 .. original (a larger micro-batch would change the global
    batch). With it: the divisors of the global batch, so micro x accumulation stays
    exactly the original. ``multiple_of`` narrows the upward search only.
    """

    original: int
    global_batch: Optional[int] = None  # micro x accumulation, when accumulation is searched
    multiple_of: int = 1

    def accum_for(self, value: int) -> Optional[int]:
        return None if self.global_batch is None else self.global_batch // value

    def allowed(self, value: int) -> bool:
        if self.global_batch is None:
            return 1 <= value <= self.original
        return 1 <= value <= self.global_batch and self.global_batch % value == 0

    def below_half(self, value: int) -> Optional[int]:
        """The next value down: the largest allowed value at most half of this one."""
        v = value // 2
        while v >= 1 and not self.allowed(v):
            v -= 1
        return v if v >= 1 else None

    def between(self, low: int, high: Optional[int]) -> list[int]:
        top = (self.original if self.global_batch is None else self.global_batch) if high is None else high - 1
        return [v for v in range(low + 1, top + 1) if self.allowed(v) and v % self.multiple_of == 0]


@dataclass
class Outcome:
    trials: list[Trial] = field(default_factory=list)
    best: Optional[Trial] = None  # the largest value that fits
    failed: Optional[Trial] = None  # a crash that is not out of memory stopped the search
    stopped: str = ""  # why the search ended early (trial limit, interrupt)


def search(space: Space, trial: Callable[[int, Optional[int]], Trial], max_trials: int = 20,
           on_trial: Callable[[Trial], None] = lambda t: None) -> Outcome:
    """Down by halves from the original until a run fits, then binary search upward."""
    outcome = Outcome()

    def attempt(value: int) -> Optional[Trial]:
        if len(outcome.trials) >= max_trials:
            outcome.stopped = f"stopped after --max-trials {max_trials}"
            return None
        result = trial(value, space.accum_for(value))
        outcome.trials.append(result)
        on_trial(result)
        if result.status == ERROR:
            outcome.failed = result
            return None
        return result

    value: Optional[int] = space.original
    high: Optional[int] = None  # the smallest value known not to fit
    while value is not None:
        result = attempt(value)
        if result is None:
            return outcome
        if result.fits:
            outcome.best = result
            break
        high, value = value, space.below_half(value)
    if outcome.best is None:
        return outcome
    while True:
        between = space.between(outcome.best.value, high)
        if not between:
            return outcome
        result = attempt(between[len(between) // 2])
        if result is None:
            return outcome
        if result.fits:
            outcome.best = result
        else:
            high = result.value
