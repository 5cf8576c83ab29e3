"""``attntemp calibrate``'s run: the logits read from the file, one T fitted on them (Guo et al. 2017,
arXiv:1706.04599), the calibration metrics before and after, a reliability diagram and
``calibration.json``; the flags and the file's format are :mod:`.config`'s."""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..utils import outputs, tables
from .calibration import (
    CalibrationFit,
    CalibrationMetrics,
    calibration_metrics,
    fit_temperature,
    flatten_labelled,
    reliability_diagram,
)
from .config import CalibrateConfig

CALIBRATION_RESULTS = ("calibration.json", "reliability.png")


ROWS = (
    ("ECE", "ece"),
    ("MCE", "mce"),
    ("RMS calibration error", "rmsce"),
    ("adaptive ECE", "adaptive_ece"),
    ("accuracy", "accuracy"),
    ("mean confidence", "confidence"),
)


def _read_arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The ``logits`` and ``labels`` arrays of an npz, or a ValueError saying what is wrong."""
    if not path.is_file():
        raise FileNotFoundError(f"--logits {path}: no such file")
    if path.stat().st_size == 0:
        raise ValueError(f"--logits {path}: the file is empty")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile):
        raise ValueError(f"--logits {path}: not a readable .npz file (expected what np.savez writes)") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"--logits {path}: a single array; expected an .npz with arrays 'logits' and 'labels'")
    with data:
        missing = [k for k in ("logits", "labels") if k not in data.files]
        if missing:
            raise ValueError(f"--logits {path}: missing array(s) {missing}; found {data.files}")
        try:
            return data["logits"], data["labels"]
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:  # object arrays, a damaged member
            what = "holds Python objects (pickled)" if "allow_pickle" in str(exc) else f"is damaged ({exc})"
            raise ValueError(
                f"--logits {path}: an array {what}; expected numeric arrays 'logits' and 'labels'"
            ) from None


def load_logits(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (float) and labels (int64) tensors from ``path``, type- and emptiness-checked."""
    logits, labels = _read_arrays(Path(path))
    if logits.size == 0 or labels.size == 0:
        raise ValueError(f"--logits {path}: empty arrays: logits {logits.shape}, labels {labels.shape}")
    if not np.issubdtype(logits.dtype, np.floating):
        raise ValueError(f"--logits {path}: 'logits' must be floating point, got {logits.dtype}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"--logits {path}: 'labels' must be integers, got {labels.dtype}")
    if logits.ndim < 2:
        raise ValueError(f"--logits {path}: 'logits' has shape {logits.shape}; expected [N, C] or [B, L, V]")
    if logits.shape[-1] < 2:
        raise ValueError(
            f"--logits {path}: 'logits' {logits.shape} has one class; temperature scaling needs at least 2 "
            "(with one, softmax is 1 at every T and any T 'fits')"
        )
    z = torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float64))  # [..., C]
    return z, torch.from_numpy(labels.astype(np.int64))  # [...]


def metrics_table(fit: CalibrationFit, before: CalibrationMetrics, after: CalibrationMetrics) -> str:
    """The metrics before and after scaling as a markdown table."""
    rows = [
        ("temperature T", 1, f"{fit.temperature:.4f}"),
        ("multiplier m = 1/T", 1, f"{fit.multiplier:.4f}"),
        ("NLL (nats)", f"{fit.nll_before:.4f}", f"{fit.nll_after:.4f}"),
    ]
    rows += [(label, f"{getattr(before, key):.4f}", f"{getattr(after, key):.4f}") for label, key in ROWS]
    return tables.markdown_table(("metric", "before", "after"), rows, align="-rr")


@dataclass(frozen=True)
class CalibratePlan:
    """What :func:`run_calibration` consumes: the config and its logits and labels, read and checked."""

    cfg: CalibrateConfig
    logits: torch.Tensor  # [..., C]
    labels: torch.Tensor  # [...]


@dataclass(frozen=True)
class CalibrateResult:
    """The fit: its report (as ``calibration.json`` holds it) and the before/after table."""

    report: dict[str, Any]
    table: str
    out: str

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document: the report and the output folder."""
        return {**self.report, "out": self.out}

    def markdown(self) -> str:
        r = self.report
        state = "converged" if r["converged"] else "NOT converged (optimum at the edge of [1e-2, 1e2])"
        return (
            f"Temperature scaling (Guo et al. 2017): T = {r['temperature']:.4f} divides the logits "
            f"(m = 1/T = {r['multiplier']:.4f}); {r['method']}, {state}, {r['n']} positions, "
            f"{r['n_bins']} bins.\n\n{self.table}\n\nwrote {self.out}/reliability.png and {self.out}/calibration.json"
        )


def preflight_calibrate(cfg: CalibrateConfig) -> CalibratePlan:
    """Before any work: ``out`` (the rule of :mod:`attntemp.utils.outputs`), the logits and labels read and checked."""
    outputs.check_out(cfg.out, CALIBRATION_RESULTS, cfg.overwrite)
    logits, labels = load_logits(Path(cfg.logits))
    return CalibratePlan(cfg, logits, labels)


def run_calibration(cfg: CalibrateConfig) -> CalibrateResult:
    """Fit, write ``reliability.png`` and ``calibration.json`` under ``cfg.out``; returns the
    result: the report and the before/after markdown table. ``out`` is locked first."""
    with outputs.claimed(cfg.out, "calibrate"):
        return _calibrate(preflight_calibrate(cfg))


def _calibrate(plan: CalibratePlan) -> CalibrateResult:
    cfg = plan.cfg
    logits, labels = plan.logits, plan.labels
    fit = fit_temperature(logits, labels, ignore_index=cfg.ignore_index)
    z, y = flatten_labelled(logits, labels, cfg.ignore_index)  # [N, C], [N]
    p_before = torch.softmax(z, dim=-1)  # [N, C]
    p_after = torch.softmax(fit.apply(z), dim=-1)  # [N, C]
    before = calibration_metrics(p_before, y, cfg.bins)
    after = calibration_metrics(p_after, y, cfg.bins)
    report = {
        "temperature": fit.temperature,
        "multiplier": fit.multiplier,
        "nll_before": fit.nll_before,
        "nll_after": fit.nll_after,
        "converged": fit.converged,
        "method": fit.method,
        "n": fit.n,
        "n_bins": cfg.bins,
        "before": before.as_dict(),
        "after": after.as_dict(),
    }
    with outputs.output_folder(
        cfg.out, replace=CALIBRATION_RESULTS if cfg.overwrite else (), writer="calibrate", own=CALIBRATION_RESULTS
    ) as out:  # none left empty
        reliability_diagram(p_before, y, out / "reliability.png", cfg.bins, title="Temperature scaling", after=p_after)
        (out / "calibration.json").write_text(json.dumps(report, indent=2) + "\n")
    return CalibrateResult(report, metrics_table(fit, before, after), cfg.out)
