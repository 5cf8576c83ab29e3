"""``attntemp report DIR``: markdown + HTML report with plots from a sweep and tuning evidence."""

from __future__ import annotations

import argparse

from ..report.config import ReportConfig
from ..utils.options import add_options, from_args
from . import command_help
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help=command_help("report"))
    add_options(p, ReportConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..report.build import build_report

    cfg = from_args(ReportConfig, args)
    result = build_report(cfg.dir, cfg.progress, cfg.overwrite)
    emit(args, f"{result.markdown()}\nreport: {result.page}", result.to_dict())
    return 0
