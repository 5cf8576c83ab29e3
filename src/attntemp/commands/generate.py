"""``attntemp generate``: text from a prompt file, with the attention monitor on request."""

from __future__ import annotations

import argparse
import sys

from ..analysis.config import GenerateConfig
from ..utils.options import add_options, from_args
from . import command_help
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help=command_help("generate"))
    add_options(p, GenerateConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..analysis.generate import run_generate

    as_json = bool(getattr(args, "json_out", False))
    result = run_generate(from_args(GenerateConfig, args), stream=not as_json)
    if as_json:
        emit(args, "", result.to_dict())
    else:  # stdout holds the generated text alone; the summary goes beside the step lines
        print(result.markdown(), file=sys.stderr)
    return 0
