"""``attntemp verify``: run llama.cpp or vLLM with what ``export``/``bake`` ship and compare with attntemp."""

from __future__ import annotations

import argparse

from ..ship.verify import VerifyConfig, run_verify
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    summary = "run llama.cpp or vLLM with the shipped settings and compare with attntemp (KL, perplexity)"
    p = sub.add_parser("verify", help=summary)
    add_options(p, VerifyConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_verify(from_args(VerifyConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 0 if result.passed else 1
