"""Shared benchmark plumbing: interleaved timing and peak extra memory in a child process."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable


def time_interleaved(fns: dict[str, Callable[[], object]], repeats: int = 5) -> dict[str, float]:
    """Median seconds per call of each fn, run round-robin so load drifts hit all of them alike."""
    for fn in fns.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


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
    """Run ``script --child *args`` in a fresh interpreter; it prints its peak extra bytes."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run(
        [sys.executable, script, "--child", *args], capture_output=True, text=True, env=env,
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
