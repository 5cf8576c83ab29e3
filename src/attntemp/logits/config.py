"""Temperature scaling of logits from a file (``attntemp calibrate``): fit one T on held-out logits
(Guo et al. 2017, arXiv:1706.04599), the calibration metrics before and after, a reliability
diagram and ``calibration.json``.

The ``.npz`` holds arrays ``logits`` ([N, C] or [B, L, V], float) and ``labels`` ([N] or [B, L],
integer, ``ignore_index`` for padding).
"""
# This docstring is ``attntemp calibrate --help``'s description. The module imports without torch
# (--help builds from it); the run is attntemp.logits.calibrate.

from __future__ import annotations

from dataclasses import dataclass

from ..utils import checks
from ..utils.options import option


@dataclass(frozen=True)
class CalibrateConfig:
    """``attntemp calibrate`` and :func:`run_calibration`."""

    logits: str = option(help="npz holding arrays 'logits' and 'labels'", metavar="FILE.npz")
    out: str = option(help="folder for reliability.png and calibration.json (created if missing)", metavar="DIR")
    bins: int = option(15, "equal-width bins for the metrics")
    ignore_index: int = option(-100, "label value of positions to skip")
    overwrite: bool = option(False, "replace calibration.json and reliability.png already in --out")

    def __post_init__(self) -> None:
        checks.positive_int("bins", self.bins)
        checks.at_most("bins", self.bins, MAX_BINS, "each bin is a bar of the reliability diagram")
        if isinstance(self.ignore_index, bool) or not isinstance(self.ignore_index, int):
            raise ValueError(f"ignore_index={self.ignore_index!r} is not allowed; expected an integer")


MAX_BINS = 1000
