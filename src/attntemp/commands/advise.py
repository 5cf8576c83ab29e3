"""``attntemp advise``: what should this model run with at this length, judged on distant context."""

from __future__ import annotations

import argparse
from contextlib import nullcontext

from ..advise.config import AdviseConfig
from ..utils import outputs
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
    from ..advise.diagnose import check_attention_files
    from ..advise.run import run_advise
    from ..advise.status import AdviseStatus

    cfg = from_args(AdviseConfig, args)
    # --out locked before any check reads it (--status writes nothing: no lock), held to the last write
    with nullcontext() if cfg.status else outputs.claimed(cfg.out, "advise"):
        check_attention_files(cfg.out)  # every file advise reads from --out, before the model loads
        result = run_advise(cfg)
    if isinstance(result, AdviseStatus):
        emit(args, result.markdown(), result.to_dict())
        return 0
    emit(args, result.markdown() + f"\nreport: {result.folder.resolve() / 'report.html'}", result.to_dict())
    return 0
