"""``attntemp eval``: lm-evaluation-harness tasks on a model without and with a spec, paired."""

from __future__ import annotations

import argparse

from ..evaluate.harness.paired import EvalHarnessConfig
from ..evaluate.harness.run import run_eval
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="lm-eval tasks without and with a spec, in one paired table (needs [eval])")
    add_options(p, EvalHarnessConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_eval(from_args(EvalHarnessConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 0
