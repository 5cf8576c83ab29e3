"""``attntemp generate``: text from a prompt file, with the attention monitor on request."""

from __future__ import annotations

import argparse
import json

from ..analysis.generate import GenerateConfig, run_generate
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="generate text; --monitor watches attention per token against the trained length"
    )
    add_options(p, GenerateConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    summary = run_generate(from_args(GenerateConfig, args), stream=not getattr(args, "json_out", False))
    emit(args, json.dumps({k: v for k, v in summary.items() if k != "text"}), summary)  # the text: streamed
    return 0
