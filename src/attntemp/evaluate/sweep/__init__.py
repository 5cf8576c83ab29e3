"""The sweep wing of ``evaluate``: every (length, RoPE method, multiplier, task) point stored in
SQLite as it finishes (:mod:`.run`, ``attntemp sweep``), what is stored and how points group
(:mod:`.store`: :class:`~.store.Store`; its config :class:`~.config.SweepConfig`), and the headline table
(:mod:`.table`).

``SweepConfig``, ``Store``, ``LOCK_FILE`` and ``run_sweep`` are read here on first use (PEP 562:
importing the package loads none of its modules).
"""

from __future__ import annotations

from ...utils.deprecation import legacy_getattr

SWEEP_FRONT = {"SweepConfig": "config", "Store": "store", "LOCK_FILE": "store", "run_sweep": "run"}
__getattr__ = legacy_getattr(__name__, front=SWEEP_FRONT)
__all__ = list(SWEEP_FRONT)
