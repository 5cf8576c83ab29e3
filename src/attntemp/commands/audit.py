"""``attntemp audit``: does an engine apply a config's RoPE scaling and attention temperature as meant?"""

from __future__ import annotations

import argparse

from ..ship.audit import AuditConfig, run_audit
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    summary = "check engines' RoPE scaling and temperature against a model's config.json, per position"
    p = sub.add_parser("audit", help=summary)
    add_options(p, AuditConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_audit(from_args(AuditConfig, args))
    emit(args, result.markdown(), result.to_dict())
    return 1 if result.differs else 0
