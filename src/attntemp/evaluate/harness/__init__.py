"""The lm-evaluation-harness wing of ``evaluate``: a model with and without a spec on lm-eval tasks,
paired (:mod:`.paired`), ``attntemp eval`` as a plan and a run (:mod:`.run`), the paired table
(:mod:`.table`), lm-eval's tasks found by name and built offline (:mod:`.lookup`), and attntemp's own
passkey and needle prompts as an lm-eval task folder (:mod:`.task_folder`). lm-eval itself is
imported only when it runs.

``HarnessOptions`` and ``harness`` are read here from :mod:`.paired` on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import Any

HARNESS_FRONT = ("HarnessOptions", "harness")  # the wing's entry points, read from .paired


def __getattr__(name: str) -> Any:
    if name not in HARNESS_FRONT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.paired"), name)


__all__ = list(HARNESS_FRONT)
