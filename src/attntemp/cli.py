"""The ``attntemp`` command line: one sub-command per module in ``attntemp.commands``.

Every sub-command module defines ``register(subparsers)``, which adds its parser and sets
``func(args) -> int``. Only the module of the command being run is imported (``attntemp --help``
and ``--version`` import none, so they answer without loading torch); :data:`SUMMARIES` holds
the one-line help of each command for the top-level listing. A ``ValueError`` (bad input, named
by field and value) becomes one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Sub-command modules under attntemp.commands, in the order `attntemp --help` lists them.
COMMANDS = ("demo", "tables", "measure", "sweep", "tune", "report", "bake", "export", "calibrate")
DEFAULT_COMMAND = "demo"
# The top-level listing, without importing the commands (each module's own help says more).
SUMMARIES = {
    "demo": "the whole story on one model, as report.html (the default command)",
    "tables": "print the YaRN and temperature tables",
    "measure": "entropy, sink and recency of attention per layer/head/position",
    "sweep": "sweep multipliers x lengths x RoPE methods x tasks (resumable)",
    "tune": "tune m = 1/T (global search, entropy matching or gradient)",
    "report": "report.md and report.html from sweep.db and evidence in DIR",
    "bake": "write a checkpoint with the temperature in its weights (plain to serve)",
    "export": "print an engine's settings for a spec (rope_parameters or flags)",
    "calibrate": "fit a temperature on held-out logits (Guo et al. 2017)",
}


def build_parser(only: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser with every command's flags, or only those of the commands in ``only`` (the
    others listed by name and summary, their modules not imported)."""
    from .utils.version import VERSION

    parser = argparse.ArgumentParser(
        prog="attntemp",
        description="Attention temperature: apply, measure, tune and ship it. "
        "Temperature T divides the logits; the multiplier m = 1/T multiplies them.",
    )
    parser.add_argument("--version", action="version", version=f"attntemp {VERSION}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        if only is None or name in only:
            importlib.import_module(f"attntemp.commands.{name}").register(sub)
        else:
            sub.add_parser(name, help=SUMMARIES.get(name, ""), add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = [DEFAULT_COMMAND, *argv]
    parser = build_parser(only=argv[:1])
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"attntemp {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
