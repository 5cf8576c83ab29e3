"""``attntemp demo``: advise on one model where retrieval moves, with retrieval and the bake, as report.html."""

from __future__ import annotations

import argparse

from ..advise.config import MODEL_DEFAULTS, DemoConfig, demo_config
from ..utils.options import add_options, from_args, show
from . import command_help
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help=command_help("demo"))
    shown = {
        name: f"{show(getattr(DemoConfig, name, None))}; {show(value)} for smollm2"
        for name, value in MODEL_DEFAULTS["smollm2"].items()
    }
    add_options(p, DemoConfig, defaults=shown)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..advise.demo import run_demo

    result = run_demo(from_args(DemoConfig, args, build=demo_config))
    emit(args, f"{result.markdown()}\nreport: {result.page.resolve()}", result.to_dict())
    return 0
