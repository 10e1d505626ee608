"""Benchmark porter_runtime.attention against direct SDPA and a naive softmax(QKᵀ)V.

    python bench/attention.py [--device cpu] [--sizes 512,2048,4096] [--json]
                              [--masked-size 4096] [--threads N]

Inputs are flash-attn's layout (batch 1, S, 8 heads, headdim 64), float32, forward
under torch.no_grad(). "sdpa" is what a careful hand port writes: one
scaled_dot_product_attention call on transposed views with is_causal; "naive" is
the seeds' fallback that materialises the S×S scores.

Time: all three run interleaved in one process per case; times are medians and
the ratios are medians of per-round ratios (robust to load from other processes).
Peak memory: each (implementation, case) runs in a fresh subprocess. On CPU torch
keeps no allocator statistics, so the peak is the rise of the process's resident
set over its level just before the call: Linux resets the high-water mark through
/proc/self/clear_refs (exact); elsewhere ru_maxrss is used (a lower bound). On
CUDA/MPS the runtime's max_memory_allocated() is used.

Masked paths (flash-attn semantics SDPA cannot take in one fused call): at
``--masked-size`` (B=1, H=8, D=64, fp32, forward) the window (256, causal), ALiBi
(causal) and softcap (30, causal) calls are timed interleaved with plain causal
attention in the same process; the ratio is the median of per-round ratios. Their
peak memory is compared with the naive fallback's (materialised S×S scores), and
their outputs with it (max |difference|). ``--threads 1`` measures the algorithm on
a shared machine, where many small parallel calls mostly measure thread contention.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable

import torch
import torch.nn.functional as F

import porter_runtime

HEADS, HEADDIM = 8, 64
IMPLS = ("porter", "sdpa", "naive")


def _porter(q, k, v, causal):
    return porter_runtime.attention(q, k, v, causal=causal)


def _sdpa(q, k, v, causal):
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                         v.transpose(1, 2), is_causal=causal)
    return out.transpose(1, 2)


def _naive(q, k, v, causal):
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        s = scores.shape[-1]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return (scores.softmax(-1) @ vh).transpose(1, 2)


FUNCS: dict[str, Callable] = {"porter": _porter, "sdpa": _sdpa, "naive": _naive}

SLOPES = torch.tensor([2.0 ** -(i + 1) for i in range(HEADS)])  # ALiBi's for 8 heads
MASKED = {"window": {"causal": True, "window_size": (256, 0)},
          "alibi": {"causal": True, "alibi_slopes": SLOPES},
          "softcap": {"causal": True, "softcap": 30.0}}
GOALS = {"window": 0.25, "alibi": 2.0, "softcap": 2.0}


def _naive_masked(q, k, v, causal=False, window_size=(-1, -1), alibi_slopes=None,
                  softcap=0.0):
    """The seeds' fallback: the whole S×S score matrix, then cap, bias, mask, softmax."""
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    s = scores.shape[-1]
    i, j = torch.arange(s)[:, None], torch.arange(s)[None]
    if alibi_slopes is not None:
        scores = scores - alibi_slopes.view(-1, 1, 1) * (i - j).abs()
    hidden = j > i if causal else torch.zeros(s, s, dtype=torch.bool)
    if window_size[0] >= 0:
        hidden |= j < i - window_size[0]
    scores = scores.masked_fill(hidden, float("-inf"))
    return (scores.softmax(-1) @ vh).transpose(1, 2)


def worker_masked_time(s: int, repeats: int) -> dict[str, object]:
    q, k, v = _inputs(s, "cpu")
    calls = {"causal": lambda: porter_runtime.attention(q, k, v, causal=True)}
    calls.update({name: (lambda kw=kw: porter_runtime.attention(q, k, v, **kw))
                  for name, kw in MASKED.items()})
    times: dict[str, list[float]] = {name: [] for name in calls}
    with torch.no_grad():
        diff = {name: float((porter_runtime.attention(q, k, v, **kw) -
                             _naive_masked(q, k, v, **kw)).abs().max())
                for name, kw in MASKED.items()}
        for round_ in range(repeats):
            names = list(calls)
            for name in names[round_ % 4:] + names[:round_ % 4]:
                start = time.perf_counter()
                calls[name]()
                times[name].append((time.perf_counter() - start) * 1000.0)
    ratio = {name: statistics.median(t / c for t, c in zip(times[name], times["causal"]))
             for name in MASKED}
    return {"ms": {n: statistics.median(t) for n, t in times.items()}, "ratio": ratio,
            "max_diff_vs_naive": diff}


def worker_masked_memory(impl: str, case: str, s: int) -> int:
    q, k, v = _inputs(s, "cpu")
    fn = porter_runtime.attention if impl == "porter" else _naive_masked
    with torch.no_grad():
        fn(*_inputs(64, "cpu"), **MASKED[case])
        return _peak_cpu_bytes(lambda: fn(q, k, v, **MASKED[case]))


def masked_report(s: int, threads: int) -> list[str]:
    extra: list[str] = []
    timing = json.loads(_subprocess("--worker-masked-time", str(s), "9", *extra))
    lines = [f"masked paths at S={s} (B=1 H={HEADS} D={HEADDIM} float32, forward; "
             f"{threads or torch.get_num_threads()} threads): plain causal "
             f"{timing['ms']['causal']:.1f} ms"]
    for case in MASKED:
        peak = {impl: int(_subprocess("--worker-masked-mem", impl, case, str(s), *extra))
                for impl in ("porter", "naive")}
        mem = peak["porter"] / max(peak["naive"], 1)
        ratio = timing["ratio"][case]
        lines.append(
            f"  {case:8s} {timing['ms'][case]:9.1f} ms  time/causal {ratio:5.3f} (goal <= "
            f"{GOALS[case]}: {'met' if ratio <= GOALS[case] else 'NOT met'})  "
            f"peak {peak['porter'] / 2**20:7.1f} MiB vs naive {peak['naive'] / 2**20:7.1f} MiB"
            f" = {mem:.3f} (goal <= 0.05: {'met' if mem <= 0.05 else 'NOT met'})  "
            f"max|out - naive| {timing['max_diff_vs_naive'][case]:.1e}")
    return lines


def _inputs(s: int, device: str):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, s, HEADS, HEADDIM, generator=gen).to(device) for _ in range(3)]


def _sync(device: str) -> None:
    porter_runtime.synchronize() if device != "cpu" else None


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise KeyError(field)


def _peak_cpu_bytes(run: Callable[[], object]) -> int:
    """Rise of resident memory during ``run`` (see the module doc)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # reset VmHWM to the current RSS
        before = _rss_kib("VmRSS:")
        run()
        return (_rss_kib("VmHWM:") - before) * 1024
    except OSError:
        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run()
        return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * scale


def worker_memory(impl: str, s: int, causal: bool, device: str) -> int:
    q, k, v = _inputs(s, device)
    fn = FUNCS[impl]
    with torch.no_grad():
        fn(*_inputs(64, device), causal)  # load kernels and thread pools first
        if device == "cpu":
            return _peak_cpu_bytes(lambda: fn(q, k, v, causal))
        _sync(device)
        porter_runtime.reset_peak_memory_stats()
        base = porter_runtime.memory_allocated()
        fn(q, k, v, causal)
        _sync(device)
        return porter_runtime.max_memory_allocated() - base


def worker_time(s: int, causal: bool, device: str, repeats: int) -> dict[str, object]:
    """Median ms per implementation, and the median of per-round ratios to porter.

    Rounds are interleaved (and their order rotated) so that load from other
    processes hits all three alike; a per-round ratio cancels slow drifts."""
    q, k, v = _inputs(s, device)
    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    with torch.no_grad():
        for impl in IMPLS:
            FUNCS[impl](q, k, v, causal)  # warm-up
        for round_ in range(repeats):
            for impl in IMPLS[round_ % 3:] + IMPLS[:round_ % 3]:
                _sync(device)
                start = time.perf_counter()
                FUNCS[impl](q, k, v, causal)
                _sync(device)
                times[impl].append((time.perf_counter() - start) * 1000.0)
    ratio = lambda other: statistics.median(
        p / o for p, o in zip(times["porter"], times[other]))
    return {"ms": {impl: statistics.median(t) for impl, t in times.items()},
            "vs_sdpa": ratio("sdpa"), "vs_naive": ratio("naive")}


def _subprocess(*args: str) -> str:
    env = dict(os.environ, PORTER_QUIET="1")
    threads = os.environ.get("PORTER_BENCH_THREADS")
    args = (*args, "--threads", threads) if threads else args
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env=env, check=True)
    return done.stdout.strip().splitlines()[-1]


def measure(s: int, causal: bool, device: str) -> dict[str, object]:
    flag = "1" if causal else "0"
    repeats = 21 if s <= 1024 else 11 if s <= 2048 else 7
    timing = json.loads(_subprocess("--worker-time", str(s), flag, device, str(repeats)))
    peak = {impl: int(_subprocess("--worker-mem", impl, str(s), flag, device)) for impl in IMPLS}
    return {"S": s, "causal": causal, "ms": timing["ms"], "peak_bytes": peak,
            "time_vs_sdpa": timing["vs_sdpa"], "time_vs_naive": timing["vs_naive"],
            "mem_vs_naive": peak["porter"] / max(peak["naive"], 1)}


def _print_table(rows: list[dict], device: str) -> None:
    mib = lambda b: f"{b / 2**20:8.1f}"
    print(f"attention, device={device}, B=1 H={HEADS} D={HEADDIM} float32, forward, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'S':>5} {'causal':>6} | {'porter':>9} {'sdpa':>9} {'naive':>9} ms | "
          f"{'÷sdpa':>6} {'÷naive':>6} | {'porter':>8} {'sdpa':>8} {'naive':>8} MiB | "
          f"{'mem÷naive':>9}")
    for r in rows:
        ms, pk = r["ms"], r["peak_bytes"]
        print(f"{r['S']:>5} {str(r['causal']):>6} | {ms['porter']:9.2f} {ms['sdpa']:9.2f} "
              f"{ms['naive']:9.2f}    | {r['time_vs_sdpa']:6.3f} {r['time_vs_naive']:6.3f} | "
              f"{mib(pk['porter'])} {mib(pk['sdpa'])} {mib(pk['naive'])}     | "
              f"{r['mem_vs_naive']:9.3f}")


def _goals(rows: list[dict]) -> list[str]:
    fused = [r for r in rows if r["S"] >= 1024]
    worst = max((r["time_vs_sdpa"] for r in fused), default=float("nan"))
    big = [r for r in rows if r["S"] == 4096]
    mem = max((r["mem_vs_naive"] for r in big), default=float("nan"))
    return [f"time within 5% of direct SDPA at S >= 1024: worst ratio {worst:.3f} "
            f"({'met' if worst <= 1.05 else 'NOT met'})",
            f"peak memory at S = 4096 <= 1/4 of naive: worst ratio {mem:.3f} "
            f"({'met' if mem <= 0.25 else 'NOT met'})"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="512,2048,4096")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--masked-size", type=int, default=4096,
                        help="S for the masked-path ratios (0: skip them)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads in the measuring processes (0: torch's default)")
    parser.add_argument("--worker-time", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--worker-mem", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--worker-masked-time", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--worker-masked-mem", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["PORTER_BENCH_THREADS"] = str(args.threads)
    if args.worker_masked_time:
        s, repeats = args.worker_masked_time
        print(json.dumps(worker_masked_time(int(s), int(repeats))))
        return
    if args.worker_masked_mem:
        impl, case, s = args.worker_masked_mem
        print(worker_masked_memory(impl, case, int(s)))
        return
    if args.worker_time:
        s, causal, device, repeats = args.worker_time
        print(json.dumps(worker_time(int(s), causal == "1", device, int(repeats))))
        return
    if args.worker_mem:
        impl, s, causal, device = args.worker_mem
        print(worker_memory(impl, int(s), causal == "1", device))
        return
    masked = masked_report(args.masked_size, args.threads) \
        if args.masked_size and args.device == "cpu" else []
    rows = [measure(int(s), causal, args.device)
            for s in args.sizes.split(",") if s for causal in (False, True)]
    if args.json:
        print(json.dumps({"rows": rows, "goals": _goals(rows), "masked": masked}, indent=2))
        return
    if rows:
        _print_table(rows, args.device)
        for line in _goals(rows):
            print(line)
    for line in masked:
        print(line)


if __name__ == "__main__":
    main()
