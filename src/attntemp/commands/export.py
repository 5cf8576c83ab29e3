"""``attntemp export``: a spec's global temperature as transformers / vLLM / llama.cpp settings."""

from __future__ import annotations

import argparse

from ..ship.export import ExportConfig, run_export
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="print an engine's settings for a spec (rope_parameters or flags)")
    add_options(p, ExportConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_export(from_args(ExportConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 0
