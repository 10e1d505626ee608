"""What ``porter doctor`` and ``python -m porter_runtime`` report (torch + stdlib only).

``collect()`` returns a JSON-ready dict. Every entry of ``checks`` is a claim the
runtime makes on this machine; ``ok`` is False when one of them does not hold.
Dtype support and compile availability are facts to report, not failures.
"""
from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Optional

import torch

from .. import __version__, _compat, _compile, _device, _dist, _log

PROBE_DTYPES = ("float64", "bfloat16", "float16")
_PROBE = "import torch; (torch.ones(2, dtype=torch.{dt}, device='{dev}') * 2).sum().item()"


def _torch_info() -> dict[str, Any]:
    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    mps_built = bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_built())
    build = f"CUDA {cuda}" if cuda else f"ROCm {hip}" if hip else "CPU-only"
    return {"version": torch.__version__, "build": build + (" + MPS" if mps_built else ""),
            "cuda": cuda, "hip": hip, "mps_built": mps_built}


def _devices() -> list[dict[str, Any]]:
    found = [{"type": "cpu", "available": True, "count": 1, "names": [platform.machine()]}]
    cuda_ok = torch.cuda.is_available()
    found.append({"type": "cuda", "available": cuda_ok,
                  "count": torch.cuda.device_count() if cuda_ok else 0,
                  "names": [torch.cuda.get_device_name(i)
                            for i in range(torch.cuda.device_count())] if cuda_ok else []})
    mps_ok = _compat.mps_available()
    found.append({"type": "mps", "available": mps_ok, "count": 1 if mps_ok else 0,
                  "names": ["Apple MPS"] if mps_ok else []})
    xpu_ok = _compat.xpu_available()
    found.append({"type": "xpu", "available": xpu_ok,
                  "count": torch.xpu.device_count() if xpu_ok else 0, "names": []})
    return found


def _available(devices: list[dict[str, Any]]) -> list[str]:
    return [d["type"] for d in devices if d["available"]]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _probe_dtype(dev: str, dt: str) -> dict[str, Any]:
    if dev == "mps":  # some MPS dtype failures abort the process (facts §2): isolate them
        done = subprocess.run([sys.executable, "-c", _PROBE.format(dt=dt, dev=dev)],
                              capture_output=True, text=True, timeout=120)
        err = done.stderr.strip().splitlines()
        return {"ok": done.returncode == 0, "error": None if done.returncode == 0
                else (err[-1] if err else f"exit code {done.returncode}")}
    try:
        (torch.ones(2, dtype=getattr(torch, dt), device=dev) * 2).sum().item()
        return {"ok": True, "error": None}
    except (TypeError, RuntimeError, AssertionError) as exc:
        return {"ok": False, "error": _first_line(exc)}


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
               window: tuple[int, int], slopes: Optional[torch.Tensor]) -> torch.Tensor:
    """flash-attn's documented semantics, materialised in float64 on the CPU."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    sq, sk, h = q.shape[1], k.shape[1], q.shape[2]
    k, v = (t.repeat_interleave(h // t.shape[2], 2) for t in (k, v))
    left, right = window[0], 0 if causal else window[1]
    i, j = torch.arange(sq)[:, None] + sk - sq, torch.arange(sk)[None, :]
    keep = ((left < 0) | (j >= i - left)) & ((right < 0) | (j <= i + right))
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(q.shape[-1])
    if slopes is not None:
        s = s - slopes.double().cpu().reshape(1, h, 1, 1) * (i - j).abs()
    s = s.masked_fill(~keep, float("-inf")).masked_fill(~keep.any(-1, keepdim=True), 0.0)
    return torch.einsum("bhij,bjhd->bihd", s.softmax(-1) * keep.any(-1, keepdim=True), v)


_ATTN_CASES = [  # (name, Sq, Sk, Hk, causal, window, alibi)
    ("plain", 16, 16, 4, False, (-1, -1), False),
    ("causal", 16, 16, 4, True, (-1, -1), False),
    ("causal Sq<Sk, GQA", 8, 20, 2, True, (-1, -1), False),
    ("causal Sq>Sk, MQA", 20, 8, 1, True, (-1, -1), False),
    ("window + ALiBi", 16, 16, 4, False, (3, 2), True),
]


def _attention_check(dev: str) -> dict[str, Any]:
    # The SDPA implementation itself (what every non-flash call runs), so that the
    # check does not depend on the device resolution reported separately.
    from ..attn.core import dense as attention

    gen = torch.Generator().manual_seed(0)
    worst, errors = 0.0, []
    for name, sq, sk, hk, causal, window, alibi in _ATTN_CASES:
        q, k, v = (torch.randn(2, s, n, 32, generator=gen) for s, n in
                   ((sq, 4), (sk, hk), (sk, hk)))
        slopes = torch.rand(4, generator=gen) if alibi else None
        try:
            out = attention(*(t.to(dev) for t in (q, k, v)), causal=causal, window_size=window,
                            alibi_slopes=None if slopes is None else slopes.to(dev))
            worst = max(worst, (out.double().cpu() - _reference(q, k, v, causal, window,
                                                                 slopes)).abs().max().item())
        except Exception as exc:  # report, never crash the doctor
            errors.append(f"{name}: {_first_line(exc)}")
    return {"ok": not errors and worst < 1e-4, "max_abs_err": worst, "errors": errors,
            "cases": [c[0] for c in _ATTN_CASES]}


def _sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()
    elif dev == "mps":
        torch.mps.synchronize()


def _median_ms(fn: Callable[[], Any], dev: str, repeats: int = 5) -> float:
    fn()
    _sync(dev)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(dev)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def _bench(devices: list[str]) -> list[dict[str, Any]]:
    from ..attn.core import dense as attention  # fp32: the SDPA path everywhere

    rows: list[dict[str, Any]] = []
    for dev in devices:
        a = torch.randn(1024, 1024, device=dev)
        q, k, v = (torch.randn(1, 1024, 8, 64, device=dev) for _ in range(3))
        with torch.no_grad():
            rows.append({"device": dev, "op": "matmul 1024x1024 fp32",
                         "ms": _median_ms(lambda: a @ a, dev)})
            rows.append({"device": dev, "op": "attention B1 S1024 H8 D64 causal fp32",
                         "ms": _median_ms(lambda: attention(q, k, v, causal=True), dev)})
    cpu = {r["op"]: r["ms"] for r in rows if r["device"] == "cpu"}
    for row in rows:
        row["speedup_vs_cpu"] = cpu[row["op"]] / row["ms"] if row["ms"] > 0 else None
    return rows


def _twins_check() -> dict[str, Any]:
    """Call the torch.cuda twins for real: none may raise on this machine."""
    from ..twins import memory as _memory
    from ..twins import timing as _timing
    from ..twins import device_calls as _twins

    calls = [_twins.synchronize, _twins.device_count, _twins.device_name,
             _twins.get_device_properties, _memory.memory_allocated, _memory.mem_get_info,
             _memory.max_memory_allocated, lambda: _timing.Event(enable_timing=True)]
    errors = []
    for call in calls:
        try:
            call()
        except Exception as exc:
            errors.append(_first_line(exc))
    return {"ok": not errors, "errors": errors}


def _resolution() -> dict[str, Any]:
    try:
        res = _device.resolve()
        return {"device": str(res.device), "reason": res.reason, "error": None}
    except (RuntimeError, ValueError) as exc:
        return {"device": None, "reason": None, "error": str(exc)}


def _compile_info(kind: Optional[str]) -> dict[str, Any]:
    kind = kind or "cpu"
    problem = None if kind == "cuda" else _compile.setup_problem(kind)
    opted_in, disabled = _log.env_flag("PORTER_COMPILE"), _log.env_flag("DISABLE_COMPILE")
    will = kind == "cuda" or (not disabled and opted_in and problem is None)
    return {"device": kind, "on_by_default": kind == "cuda", "PORTER_COMPILE": opted_in,
            "DISABLE_COMPILE": disabled, "can_set_up": problem is None, "problem": problem,
            "will_compile": will}


def _distributed_info() -> dict[str, Any]:
    import torch.distributed as dist

    if not dist.is_available():
        return {"available": False, "nccl": False, "gloo": False, "mpi": False, "backend": None}
    try:
        backend: Optional[str] = _dist.dist_backend()
    except (RuntimeError, ValueError):  # the device did not resolve: reported elsewhere
        backend = None
    return {"available": True, "nccl": dist.is_nccl_available(),
            "gloo": dist.is_gloo_available(), "mpi": dist.is_mpi_available(),
            "backend": backend}


def _checks(report: dict[str, Any]) -> list[dict[str, Any]]:
    res, dist_info = report["resolved"], report["distributed"]
    checks = [{"name": "device resolution", "ok": res["error"] is None,
               "detail": res["error"] or f"{res['device']}: {res['reason']}"},
              {"name": "torch.cuda twins run here", "ok": report["twins"]["ok"],
               "detail": "; ".join(report["twins"]["errors"]) or "no errors"}]
    for dev, att in report["attention"].items():
        detail = "; ".join(att["errors"]) or f"max abs error {att['max_abs_err']:.2e}"
        checks.append({"name": f"attention on {dev} vs reference", "ok": att["ok"],
                       "detail": detail})
    backend = dist_info["backend"]
    checks.append({"name": "distributed backend available",
                   "ok": bool(backend) and dist_info.get(backend, False),
                   "detail": f"dist_backend() = {backend}"})
    return checks


def collect(bench: bool = True) -> dict[str, Any]:
    """Probe this machine; see the module doc. ``bench=False`` skips the timings."""
    devices = _devices()
    available = _available(devices)
    resolved = _resolution()
    report: dict[str, Any] = {
        "porter_runtime": __version__, "torch": _torch_info(),
        "platform": {"system": platform.system(), "machine": platform.machine(),
                     "python": platform.python_version()},
        "env": {name: os.environ.get(name) for name in
                ("PORTER_DEVICE", "PORTER_COMPILE", "DISABLE_COMPILE", "PORTER_QUIET",
                 "PYTORCH_ENABLE_MPS_FALLBACK")},
        "devices": devices, "resolved": resolved,
        "dtypes": {dev: {dt: _probe_dtype(dev, dt) for dt in PROBE_DTYPES} for dev in available},
        "attention": {dev: _attention_check(dev) for dev in available},
        "twins": _twins_check() if resolved["error"] is None else
        {"ok": False, "errors": ["skipped: the device did not resolve"]},
        "compile": _compile_info(resolved["device"] and torch.device(resolved["device"]).type),
        "distributed": _distributed_info(),
        "benchmark": _bench(available) if bench else [],
    }
    from .. import MPS_FALLBACK_SET

    report["env"]["mps_fallback_set_by_porter"] = MPS_FALLBACK_SET
    report["checks"] = _checks(report)
    report["ok"] = all(c["ok"] for c in report["checks"])
    return report
