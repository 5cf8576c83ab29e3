"""The configs of ``attntemp report`` and ``attntemp tables``: their flags and help, importable
without torch (``--help`` builds from them). The runners are :mod:`.build` and :mod:`.tables`."""

from __future__ import annotations

from dataclasses import dataclass

from ..utils.options import option


@dataclass(frozen=True)
class ReportConfig:
    """``attntemp report`` and :func:`build_report`."""

    dir: str = option(help="folder holding sweep.db and/or tuning runs (evidence.md)", positional=True)
    progress: bool = option(True, "no progress bar", flag="--quiet", invert=True)
    overwrite: bool = option(False, "replace the report.md, report.html and figures an earlier report wrote in DIR")


@dataclass(frozen=True)
class TablesConfig:
    """``attntemp tables``."""

    json: bool = option(False, "print JSON instead of markdown")
