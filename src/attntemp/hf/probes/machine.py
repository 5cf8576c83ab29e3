"""What the probes share: the CPU's identity (model name and the flags that decide bf16 and AMX
speed) and a JSON cache of measured choices, keyed per machine, written whole."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_identity(cpuinfo: str) -> tuple[str, tuple[str, ...]]:
    """The CPU's model name and which of :data:`CPU_FLAGS` it has, from ``/proc/cpuinfo`` text."""
    name = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M)
    have = set(flags.group(1).split()) if flags else set()
    return (name.group(1).strip() if name else "unknown CPU"), tuple(f for f in CPU_FLAGS if f in have)


def read_cpuinfo() -> str:
    """``/proc/cpuinfo``'s text (empty where there is none)."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def load_cache(cache: Path | None) -> dict[str, Any]:
    """The probe cache's entries (empty when there is none or it is damaged: re-measured)."""
    if cache is None or not cache.is_file():
        return {}
    try:
        found = json.loads(cache.read_text())
    except (OSError, ValueError):
        return {}  # a damaged cache is re-measured (and rewritten whole)
    return found if isinstance(found, dict) else {}


def save_cache(cache: Path, entries: dict[str, Any]) -> None:
    """Written whole through a temporary file (two runs never leave half a file)."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_name(f".{cache.name}.{id(entries)}.tmp")
    tmp.write_text(json.dumps(entries, indent=1))
    tmp.replace(cache)
