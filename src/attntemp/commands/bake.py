"""``attntemp bake``: fold a TemperatureSpec into a checkpoint's weights and config, checked."""

from __future__ import annotations

import argparse

from ..ship.bake_runner import BakeConfig, run_bake
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bake", help="write a checkpoint with the temperature in its weights (plain to serve)")
    add_options(p, BakeConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = run_bake(from_args(BakeConfig, args))
    targets = ", ".join(sorted({step.target for step in result.layers}))
    diff, n = result.max_abs_diff, result.tokens
    data = {"path": str(result.path), "max_abs_diff": diff, "tokens": n, "targets": targets.split(", ")}
    human = (
        f"baked {len(result.layers)} layers ({targets}) into {result.path}\n"
        f"max abs diff, reloaded vs patched logits (fp32, {n} tokens): {diff:.3g}"
    )
    emit(args, human, data)
    return 0
