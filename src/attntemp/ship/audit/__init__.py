"""``attntemp audit``'s wing of ``ship``: the command (:mod:`.run`: :class:`~.run.AuditConfig`,
:func:`~.run.run_audit`), the reference it compares each engine with (:mod:`.expectation`), the random
proxy an engine runs (:mod:`.proxy`) and the readings checked in the engines (:mod:`.reading_checks`).

``AuditConfig``, ``run_audit`` and ``load_config`` are read here on first use (PEP 562: importing the
package loads none of its modules); the module this package was before 0.2.0 gave ``reference``,
which warns (:mod:`attntemp.utils.deprecation`).
"""

from __future__ import annotations

from ...utils.deprecation import legacy_getattr

AUDIT_FRONT = {"AuditConfig": "run", "run_audit": "run", "load_config": "run"}
__getattr__ = legacy_getattr(__name__, front=AUDIT_FRONT)
__all__ = list(AUDIT_FRONT)
