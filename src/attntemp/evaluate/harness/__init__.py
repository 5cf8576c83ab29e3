"""The lm-evaluation-harness wing of ``evaluate``: a model with and without a spec on lm-eval tasks,
paired (:mod:`.paired`), ``attntemp eval`` as a plan and a run (:mod:`.run`), the paired table
(:mod:`.table`), lm-eval's tasks found by name and built offline (:mod:`.lookup`), and attntemp's own
passkey and needle prompts as an lm-eval task folder (:mod:`.task_folder`). lm-eval itself is
imported only when it runs.

``HarnessOptions`` and ``harness`` are read here from :mod:`.paired` on first use; another name of
the module this package was before 0.2.0 (``attntemp.evaluate.harness``) is read from there too,
with a DeprecationWarning naming its new place.
"""

from __future__ import annotations

import importlib
from typing import Any

HARNESS_FRONT = ("HarnessOptions", "harness")  # the wing's entry points, read from .paired without a warning


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    paired = importlib.import_module(f"{__name__}.paired")
    if name not in HARNESS_FRONT and hasattr(paired, name):
        from ...utils import deprecation

        deprecation.warn(f"{__name__}.{name}", f"{__name__}.paired.{name}", stacklevel=3)
    try:
        return getattr(paired, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


__all__ = list(HARNESS_FRONT)
