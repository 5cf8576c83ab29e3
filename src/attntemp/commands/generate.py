"""``attntemp generate``: text from a prompt file, with the attention monitor on request."""

from __future__ import annotations

import argparse
import json

from ..analysis.generate import GenerateConfig, run_generate
from ..utils.options import add_options, from_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="generate text; --monitor watches attention per token against the trained length"
    )
    add_options(p, GenerateConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    summary = run_generate(from_args(GenerateConfig, args))
    print(json.dumps(summary))
    return 0
