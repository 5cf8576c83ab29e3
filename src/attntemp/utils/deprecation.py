"""The one deprecation warning: an old spelling that still works says what replaces it and the
release that removes it (:data:`REMOVAL`).

Since 0.3.0 no renamed name or moved module path is kept as an alias (CHANGELOG.md lists each with
its replacement); what still warns is a spelling, not a name: advise's hidden ``--check-length``
(:class:`attntemp.utils.options.OldSpelling`), ``AdviseConfig(check_length=...)`` and the advise
candidates' old ``(length, trained)`` call form.
"""

from __future__ import annotations

import warnings

REMOVAL = "0.4.0"  # the release that removes the old spellings above


def warn(old: str, new: str, stacklevel: int = 3) -> None:
    """The one warning every old spelling gives."""
    warnings.warn(f"{old} is deprecated; use {new} (removed in {REMOVAL})", DeprecationWarning, stacklevel=stacklevel)
