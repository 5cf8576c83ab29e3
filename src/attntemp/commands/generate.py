"""``attntemp generate``: text from a prompt file, with the attention monitor on request."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..analysis.generate import GenerateConfig, run_generate
from ..utils.options import add_options, from_args
from .output import emit


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="generate text; --monitor watches attention per token against the trained length"
    )
    add_options(p, GenerateConfig)
    p.set_defaults(func=run)


def said(summary: dict[str, Any]) -> str:
    """The run in one line for a person: tokens, time, the folder, and the monitor's flags."""
    line = (
        f"generated {summary['new_tokens']} tokens after a prompt of {summary['prompt_tokens']} in "
        f"{summary['seconds']:.1f} s; wrote {summary['out']}/generated.txt"
    )
    if "steps" in summary:
        flags = ", ".join(f"{k} {v}" for k, v in summary["flag_counts"].items() if v) or "none"
        stopped = "; stopped by the monitor" if summary["stopped_by_monitor"] else ""
        line += f" and monitor.jsonl ({summary['steps']} steps recorded, flags: {flags}{stopped})"
    return line


def run(args: argparse.Namespace) -> int:
    as_json = bool(getattr(args, "json_out", False))
    summary = run_generate(from_args(GenerateConfig, args), stream=not as_json)
    if as_json:
        emit(args, "", summary)
    else:  # stdout holds the generated text alone; the summary goes beside the step lines
        print(said(summary), file=sys.stderr)
    return 0
