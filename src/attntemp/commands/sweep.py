"""``attntemp sweep``: every (length, rope, multiplier, task) point into DIR/sweep.db, resumable."""

from __future__ import annotations

import argparse

from ..evaluate.sweep import SweepConfig, run_sweep
from ..report.build import BEST_NOTE, best_table
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="sweep multipliers x lengths x RoPE methods x tasks (resumable)")
    add_options(p, SweepConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    cfg = from_args(SweepConfig, args)
    store = run_sweep(cfg)
    try:
        rows, trained = store.rows(), store.trained_length()
    finally:
        store.close()
    human = (
        f"{best_table(rows, trained)}\n\n{BEST_NOTE}\n\n"
        f"{len(rows)} points in {cfg.out}/sweep.db; `attntemp report {cfg.out}` makes the plots"
    )
    emit(args, human, {"out": cfg.out, "trained_length": trained, "points": rows})
    return 0
