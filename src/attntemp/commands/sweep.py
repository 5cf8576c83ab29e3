"""``attntemp sweep``: every (length, rope, multiplier, task) point into DIR/sweep.db, resumable."""

from __future__ import annotations

import argparse

from ..evaluate.sweep import SweepConfig, run_sweep
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="sweep multipliers x lengths x RoPE methods x tasks (resumable)")
    add_options(p, SweepConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_sweep(from_args(SweepConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 0
