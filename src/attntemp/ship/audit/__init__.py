"""``attntemp audit``'s wing of ``ship``: the command (:mod:`.run`: :class:`~.run.AuditConfig`,
:func:`~.run.run_audit`). It sits above the engines and imports them; the reference each engine is
compared with is :mod:`attntemp.ship.engines.expectation`, the proxy an engine runs
:mod:`attntemp.ship.engine_common`, and the readings checked in the engines :mod:`attntemp.ship.readings.engine_checks`
with their runners (:mod:`~attntemp.ship.readings.in_vllm`, :mod:`~attntemp.ship.readings.in_llamacpp`).

``AuditConfig``, ``run_audit`` and ``load_config`` are read here on first use (PEP 562: importing the
package loads none of its modules).
"""

from __future__ import annotations

import importlib
from typing import Any

AUDIT_FRONT = {"AuditConfig": "run", "run_audit": "run", "load_config": "run"}


def __getattr__(name: str) -> Any:
    """The wing's entry points, each read from its module on first use (PEP 562)."""
    if name not in AUDIT_FRONT:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{AUDIT_FRONT[name]}"), name)


__all__ = list(AUDIT_FRONT)
