"""``attntemp measure``: attention statistics of a model on long text, with plots and JSON."""

from __future__ import annotations

import argparse

from ..analysis.run import MeasureConfig, run_measure
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="entropy, sink and recency of attention per layer/head/position")
    add_options(p, MeasureConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_measure(from_args(MeasureConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 0
