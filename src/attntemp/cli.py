"""The ``attntemp`` command line: one sub-command per module in ``attntemp.commands``.

Every sub-command module defines ``register(subparsers)``, which adds its parser and sets
``func(args) -> int``. A ``ValueError`` (bad input, named by field and value) becomes one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Sub-command modules under attntemp.commands, in the order `attntemp --help` lists them.
COMMANDS = ("demo", "tables", "measure", "sweep", "tune", "report", "bake", "export", "calibrate")
DEFAULT_COMMAND = "demo"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attntemp",
        description="Attention temperature: apply, measure, tune and ship it. "
        "Temperature T divides the logits; the multiplier m = 1/T multiplies them.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"attntemp.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        argv = [DEFAULT_COMMAND, *argv]
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"attntemp {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
