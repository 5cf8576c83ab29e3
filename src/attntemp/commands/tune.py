"""``attntemp tune``: a TemperatureSpec for one model and length, with held-out evidence."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..tune.runner import TuneConfig, run_tune
from ..utils.options import add_options, from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune m = 1/T (global search, entropy matching or gradient)")
    add_options(p, TuneConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = from_args(TuneConfig, args)
    run_tune(cfg)
    print((Path(cfg.out) / "evidence.md").read_text())
    print(f"spec: {cfg.out}/spec.json")
    return 0
