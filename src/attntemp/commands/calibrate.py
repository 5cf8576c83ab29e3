"""``attntemp calibrate``: fit one temperature T on held-out logits (arXiv:1706.04599)."""

from __future__ import annotations

import argparse

from ..logits import config
from ..logits.config import CalibrateConfig
from ..utils.options import add_options, from_args
from . import command_help
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help=command_help("calibrate"),
        description=(config.__doc__ or "").replace("``", ""),
    )
    add_options(p, CalibrateConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..logits.calibrate import run_calibration

    result = run_calibration(from_args(CalibrateConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 0
