"""``attntemp bake``: fold a TemperatureSpec into a checkpoint's weights and config, checked."""

from __future__ import annotations

import argparse

from ..ship.bake_runner import BakeConfig, run_bake
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bake", help="write a checkpoint with the temperature in its weights (plain to serve)")
    add_options(p, BakeConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_bake(from_args(BakeConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 0
