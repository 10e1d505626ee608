"""What two runs wrote, compared: tensors in checkpoints (by value), JSON numbers, numbers
printed, other files byte for byte. Used by ``porter verify --against`` (run as a script in
the code's own interpreter: ``python -m _porter_cuda_emulation.compare A B``) and by
``bench/differential.py``; torch and the standard library only."""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import torch

from .text import relative

#: Leaves that measure the machine, not the model (wall-clock times, throughput).
TIMING = re.compile(r"time|elapsed|sec\b|seconds?$|_s$|_ms$|throughput|speed|per_s|/s\b|duration|"
                    r"peak_mem|mem_mb", re.IGNORECASE)

def leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """Numbers and tensors inside nested dicts/lists, by path."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(leaves(item, f"{prefix}/{key}"))
        return out
    if isinstance(value, (list, tuple)):
        out = {}
        for i, item in enumerate(value):
            out.update(leaves(item, f"{prefix}[{i}]"))
        return out
    if hasattr(value, "state_dict") and callable(value.state_dict) and not isinstance(value, torch.Tensor):
        try:  # a pickled module or optimizer: compared by its state
            return leaves(value.state_dict(), prefix + ".state_dict()")
        except Exception:  # noqa: BLE001,S110  (not a module after all: compared as it is)
            pass
    return {prefix: value}


def difference(a: Any, b: Any) -> float:
    """0 when equal, inf when incomparable, else the largest relative difference."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        a, b = a.detach().cpu(), b.detach().cpu()
        if torch.equal(a, b):
            return 0.0
        if not (a.is_floating_point() or a.is_complex()):
            return math.inf
        a64, b64 = (a.cdouble(), b.cdouble()) if a.is_complex() else (a.double(), b.double())
        both_nan = a64.isnan() & b64.isnan()
        return float(((a64 - b64).abs() / b64.abs().clamp_min(1e-6)).masked_fill(both_nan, 0).max())
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and \
            not isinstance(a, bool) and not isinstance(b, bool):
        return relative(a, b)
    try:
        return 0.0 if a == b else math.inf
    except Exception:  # noqa: BLE001  (objects without equality, a module or an optimizer: by their type)
        return 0.0 if type(a) is type(b) else math.inf


def load(path: Path) -> Any:
    if path.suffix == ".json":
        try:
            return json.loads(path.read_text())
        except ValueError:
            return path.read_bytes()
    data = path.read_bytes()
    # torch.save writes a zip archive whatever the name (`checkpoint.pth.tar`); its
    # bytes differ run to run (record order), its tensors are what to compare.
    if path.suffix in (".pt", ".pth", ".ckpt", ".bin") or data.startswith(b"PK\x03\x04"):
        locations: list[str] = []

        def keep(storage: Any, location: str) -> Any:  # where each tensor was saved from: on the CPU here
            locations.append(location)
            return storage

        try:
            loaded = torch.load(path, map_location=keep, weights_only=False)
            return {"saved from": sorted(set(locations)), "contents": loaded} if locations else loaded
        except Exception:
            if path.suffix in (".pt", ".pth", ".ckpt"):
                raise
    return data


def comparable(found: dict[str, Any], out: Path) -> dict[str, Any]:
    """Timing leaves dropped; the run's own output folder written as {out}."""
    return {k: (v.replace(str(out), "{out}") if isinstance(v, str) else v)
            for k, v in found.items() if not TIMING.search(k.rsplit("/", 1)[-1])}


def compare_file(a: Path, b: Path, root_a: Path, root_b: Path) -> tuple[float, str]:
    """The largest difference between two files, and why it is infinite if it is."""
    left, right = comparable(leaves(load(a)), root_a), comparable(leaves(load(b)), root_b)
    if left.keys() != right.keys():
        return math.inf, "different structure"
    return max((difference(left[k], right[k]) for k in left), default=0.0), ""


def compare_outputs(a: Path, b: Path) -> list[tuple[str, float]]:
    """(file, largest difference) for everything two output folders hold, largest first."""
    rows = []
    names = sorted({p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file()} |
                   {p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file()})
    for name in names:
        if not (a / name).exists() or not (b / name).exists():
            rows.append((name + " (written by one side only)", math.inf))
            continue
        worst, why = compare_file(a / name, b / name, a, b)
        rows.append((f"{name} ({why})" if why else name, worst))
    return sorted(rows, key=lambda r: -r[1])


def main(argv: list[str]) -> None:
    """``A B NAME...``: each NAME under A against the same under B, as JSON rows."""
    a, b = Path(argv[0]), Path(argv[1])
    rows = []
    for name in argv[2:]:
        try:
            worst, why = compare_file(a / name, b / name, a, b)
        except Exception as exc:  # noqa: BLE001  (an unreadable output is a difference, not a crash)
            worst, why = math.inf, f"unreadable: {type(exc).__name__}: {exc}"
        rows.append({"file": name, "difference": None if math.isinf(worst) else worst, "why": why})
    print(json.dumps(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
