"""``attntemp calibrate``: fit one temperature T on held-out logits (arXiv:1706.04599).

Reads an ``.npz`` with arrays ``logits`` ([N, C] or [B, L, V], float) and ``labels`` ([N] or
[B, L], integer, ``--ignore-index`` for padding); prints the fitted temperature T (logits are
divided by it) and the calibration metrics before and after as a markdown table; writes
``DIR/reliability.png`` and ``DIR/calibration.json``.
"""

from __future__ import annotations

import argparse
import json
import zipfile
from pathlib import Path

import numpy as np
import torch

from .. import _validate
from ..calibration import (
    CalibrationFit,
    CalibrationMetrics,
    calibration_metrics,
    fit_temperature,
    flatten_labelled,
    reliability_diagram,
)

ROWS = (("ECE", "ece"), ("MCE", "mce"), ("RMS calibration error", "rmsce"),
        ("adaptive ECE", "adaptive_ece"), ("accuracy", "accuracy"),
        ("mean confidence", "confidence"))


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit a temperature on held-out logits (Guo et al. 2017)",
                       description=__doc__.replace("``", ""))
    p.add_argument("--logits", required=True, type=Path, metavar="FILE.npz",
                   help="npz holding arrays 'logits' and 'labels'")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="folder for reliability.png and calibration.json (created if missing)")
    p.add_argument("--bins", type=int, default=15, help="equal-width bins for the metrics")
    p.add_argument("--ignore-index", type=int, default=-100,
                   help="label value of positions to skip (default -100)")
    p.set_defaults(func=run)


def _read_arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The ``logits`` and ``labels`` arrays of an npz, or a ValueError saying what is wrong."""
    if not path.is_file():
        raise FileNotFoundError(f"--logits {path}: no such file")
    if path.stat().st_size == 0:
        raise ValueError(f"--logits {path}: the file is empty")
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile):
        raise ValueError(f"--logits {path}: not a readable .npz file (expected what np.savez "
                         "writes)") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"--logits {path}: a single array; expected an .npz with arrays "
                         "'logits' and 'labels'")
    with data:
        missing = [k for k in ("logits", "labels") if k not in data.files]
        if missing:
            raise ValueError(f"--logits {path}: missing array(s) {missing}; found {data.files}")
        return data["logits"], data["labels"]


def load_logits(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (float) and labels (int64) tensors from ``path``, type- and emptiness-checked."""
    logits, labels = _read_arrays(Path(path))
    if logits.size == 0 or labels.size == 0:
        raise ValueError(f"--logits {path}: empty arrays: logits {logits.shape}, "
                         f"labels {labels.shape}")
    if not np.issubdtype(logits.dtype, np.floating):
        raise ValueError(f"--logits {path}: 'logits' must be floating point, got {logits.dtype}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"--logits {path}: 'labels' must be integers, got {labels.dtype}")
    z = torch.from_numpy(np.ascontiguousarray(logits, dtype=np.float64))  # [..., C]
    return z, torch.from_numpy(labels.astype(np.int64))  # [...]


def markdown_table(fit: CalibrationFit, before: CalibrationMetrics,
                   after: CalibrationMetrics) -> str:
    """The metrics before and after scaling as a markdown table."""
    lines = ["| metric | before | after |", "|---|---:|---:|",
             f"| temperature T | 1 | {fit.temperature:.4f} |",
             f"| multiplier m = 1/T | 1 | {fit.multiplier:.4f} |",
             f"| NLL (nats) | {fit.nll_before:.4f} | {fit.nll_after:.4f} |"]
    for label, key in ROWS:
        lines.append(f"| {label} | {getattr(before, key):.4f} | {getattr(after, key):.4f} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    n_bins = _validate.positive_int("--bins", args.bins)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    logits, labels = load_logits(args.logits)
    fit = fit_temperature(logits, labels, ignore_index=args.ignore_index)
    z, y = flatten_labelled(logits, labels, args.ignore_index)  # [N, C], [N]
    p_before = torch.softmax(z, dim=-1)  # [N, C]
    p_after = torch.softmax(fit.apply(z), dim=-1)  # [N, C]
    before = calibration_metrics(p_before, y, n_bins)
    after = calibration_metrics(p_after, y, n_bins)
    out.mkdir(parents=True, exist_ok=True)
    reliability_diagram(p_before, y, out / "reliability.png", n_bins,
                        title="Temperature scaling", after=p_after)
    report = {"temperature": fit.temperature, "multiplier": fit.multiplier,
              "nll_before": fit.nll_before, "nll_after": fit.nll_after,
              "converged": fit.converged, "method": fit.method, "n": fit.n, "n_bins": n_bins,
              "before": before.as_dict(), "after": after.as_dict()}
    (out / "calibration.json").write_text(json.dumps(report, indent=2) + "\n")
    state = "converged" if fit.converged else "NOT converged (optimum at the edge of [1e-2, 1e2])"
    print(f"Temperature scaling (Guo et al. 2017): T = {fit.temperature:.4f} divides the logits "
          f"(m = 1/T = {fit.multiplier:.4f}); {fit.method}, {state}, {fit.n} positions, "
          f"{n_bins} bins.\n")
    print(markdown_table(fit, before, after))
    print(f"\nwrote {out / 'reliability.png'} and {out / 'calibration.json'}")
    return 0
