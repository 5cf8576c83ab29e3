"""``attntemp tune``: a TemperatureSpec for one model and length, with held-out evidence."""

from __future__ import annotations

import argparse

from ..tune.runner import TuneConfig, run_tune
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune m = 1/T (global search, entropy matching or gradient)")
    add_options(p, TuneConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_tune(from_args(TuneConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 0
