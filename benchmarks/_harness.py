"""Shared benchmark plumbing: the options every benchmark takes, interleaved timing and peak extra
memory in a child process."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from attntemp.utils.options import names, option


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What every benchmark takes: how often each path is timed."""

    repeats: int = option(5, "timed runs of each path, the paths interleaved (the median is reported)")


@dataclass(frozen=True, kw_only=True)
class MemoryOptions(BenchOptions):
    """A benchmark that also measures each path's peak extra memory, in a child process."""

    child: tuple[str, ...] = option(
        (),
        "internal: run path PATH at length L in this process and print its peak extra memory",
        parse=names,
        metavar="PATH,L",
    )


def times_interleaved(fns: dict[str, Callable[[], object]], repeats: int = 5) -> dict[str, list[float]]:
    """Seconds of each call of each fn, run round-robin so load drifts hit all of them alike."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def time_interleaved(fns: dict[str, Callable[[], object]], repeats: int = 5) -> dict[str, float]:
    """Median seconds per call of each fn (:func:`times_interleaved`)."""
    return {k: statistics.median(v) for k, v in times_interleaved(fns, repeats).items()}


def median_interval(x: list[float], resamples: int = 2000, seed: int = 0) -> dict[str, float]:
    """The median with its percentile bootstrap 95% interval."""
    import numpy as np

    a = np.asarray(x)
    idx = np.random.default_rng(seed).integers(0, len(a), (resamples, len(a)))
    lo, hi = np.quantile(np.median(a[idx], axis=1), [0.025, 0.975])
    return {"median": float(np.median(a)), "low": float(lo), "high": float(hi)}


def machine() -> dict[str, object]:
    """The CPU (model name; AVX-512, its bfloat16 instructions and AMX or not) and the load average
    when the figures were taken."""
    cpu = "unknown"
    flags = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line
    has = set(flags.split(":", 1)[-1].split())
    return {
        "cpu": cpu,
        **{f: f in has for f in ("avx512f", "avx512_bf16", "amx_bf16")},
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


def peak_rss_bytes() -> int:
    """VmHWM of this process (Linux), the peak resident set since the last reset."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_extra_in_child(script: str, *args: str) -> int:
    """Run ``script --child ARG,ARG`` in a fresh interpreter; it prints its peak extra bytes."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(
        [sys.executable, script, "--child", ",".join(args)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    return int(json.loads(out.strip().splitlines()[-1])["peak_extra_bytes"])


def report_child(setup: Callable[[], Callable[[], object]]) -> None:
    """In the child: build inputs (``setup``), warm up, reset the peak RSS, run once, print its growth."""
    fn = setup()
    fn()  # warm-up: one-time kernel and thread-pool set-up is not the path's memory
    reset_peak_rss()
    base = current_rss_bytes()
    fn()
    print(json.dumps({"peak_extra_bytes": peak_rss_bytes() - base}))
