"""``attntemp tune``: a TemperatureSpec for one model and length, with held-out evidence."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..tune.runner import TuneConfig, run_tune
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune m = 1/T (global search, entropy matching or gradient)")
    add_options(p, TuneConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = from_args(TuneConfig, args)
    evidence = run_tune(cfg)
    human = (Path(cfg.out) / "evidence.md").read_text() + f"\nspec: {cfg.out}/spec.json"
    emit(args, human, {"spec_file": f"{cfg.out}/spec.json", **evidence})
    return 0
