"""The runnable files of ``scripts/`` and ``benchmarks/``, run as ``python PATH ARGS...`` would be
(a fresh interpreter in the repository root, one torch thread), and the JSON values they print."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("scripts", "benchmarks")


def sources(folders: tuple[str, ...] = FOLDERS) -> list[Path]:
    """The Python files of ``folders``."""
    return sorted(p for folder in folders for p in (ROOT / folder).glob("*.py"))


def entries(folders: tuple[str, ...] = FOLDERS) -> list[str]:
    """The runnable files (those with a ``__main__`` block), relative to the repository; the others
    (``benchmarks/_harness.py``, ``scripts/distant_figure.py``) are modules the runnable ones import."""
    return [str(p.relative_to(ROOT)) for p in sources(folders) if '__name__ == "__main__"' in p.read_text()]


def run_entry(path: str, argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python path *argv`` in the repository root; a failure shows its stderr's tail."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, path, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{path} {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done


def json_values(text: str) -> list[Any]:
    """Every JSON value in ``text`` that starts a line (one-line or indented), in order; other lines
    (progress, markdown) are skipped."""
    decoder, values, at = json.JSONDecoder(), [], 0
    while at < len(text):
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        if text[at : at + 1] in ("{", "["):
            try:
                value, stop = decoder.raw_decode(text, at)
            except json.JSONDecodeError:
                pass
            else:
                values.append(value)
                at = stop
                continue
        at = end + 1
    return values


def run_json(path: str, argv: list[str], timeout: float = 600) -> list[Any]:
    """The JSON values ``python path *argv`` prints (at least one)."""
    values = json_values(run_entry(path, argv, timeout).stdout)
    assert values, f"{path} printed no JSON"
    return values
