"""``attntemp calibrate``: fit one temperature T on held-out logits (arXiv:1706.04599)."""

from __future__ import annotations

import argparse

from ..logits import calibrate
from ..logits.calibrate import CalibrateConfig, run_calibration
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="fit a temperature on held-out logits (Guo et al. 2017)",
        description=(calibrate.__doc__ or "").replace("``", ""),
    )
    add_options(p, CalibrateConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = from_args(CalibrateConfig, args)
    report, table = run_calibration(cfg)
    state = "converged" if report["converged"] else "NOT converged (optimum at the edge of [1e-2, 1e2])"
    human = (
        f"Temperature scaling (Guo et al. 2017): T = {report['temperature']:.4f} divides the logits "
        f"(m = 1/T = {report['multiplier']:.4f}); {report['method']}, {state}, {report['n']} positions, "
        f"{cfg.bins} bins.\n\n{table}\n\nwrote {cfg.out}/reliability.png and {cfg.out}/calibration.json"
    )
    emit(args, human, {**report, "out": cfg.out})
    return 0
