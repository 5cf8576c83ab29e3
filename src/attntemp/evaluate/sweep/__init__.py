"""The sweep wing of ``evaluate``: every (length, RoPE method, multiplier, task) point stored in
SQLite as it finishes (:mod:`.run`, ``attntemp sweep``), what is stored and how points group
(:mod:`.store`: :class:`~.store.Store`; its config :class:`~.config.SweepConfig`), and the headline table
(:mod:`.table`).

``SweepConfig``, ``Store``, ``LOCK_FILE`` and ``run_sweep`` are read here on first use (PEP 562:
importing the package loads none of its modules).
"""

from __future__ import annotations

import importlib
from typing import Any

SWEEP_FRONT = {"SweepConfig": "config", "Store": "store", "LOCK_FILE": "store", "run_sweep": "run"}


def __getattr__(name: str) -> Any:
    """The wing's entry points, each read from its module on first use (PEP 562)."""
    if name not in SWEEP_FRONT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{SWEEP_FRONT[name]}"), name)


__all__ = list(SWEEP_FRONT)
