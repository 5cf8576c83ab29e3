"""``attntemp advise``: what should this model run with at this length, judged on distant context."""

from __future__ import annotations

import argparse

from ..advise.config import AdviseConfig
from ..utils.options import add_options, from_args
from . import command_help
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "advise",
        help=command_help("advise"),
    )
    add_options(p, AdviseConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..advise.run import run_advise
    from ..advise.status import AdviseStatus

    result = run_advise(from_args(AdviseConfig, args))  # --out locked there before any check reads it
    if isinstance(result, AdviseStatus):
        emit(args, result.markdown(), result.to_dict())
        return 0
    emit(args, result.markdown() + f"\nreport: {result.folder.resolve() / 'report.html'}", result.to_dict())
    return 0
