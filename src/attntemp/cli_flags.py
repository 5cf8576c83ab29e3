"""Every sub-command's flags as data, so ``--help``, argparse's errors and shell completion answer
without importing the command modules (which import torch and transformers: seconds on a busy machine).

``assets/cli_flags.json`` holds, per command, each argparse action as :func:`snapshot` reads it
from the real parser; :func:`light_parser` builds a parser from it that parses and prints help as
the real one does. The real parser still runs the command (``attntemp.cli.main`` parses again with
it once the light one accepted the line: its type conversions and checks apply then).
``tests/test_cli.py`` fails when the file and the real parsers differ; write it again with

    python -m attntemp.cli_flags
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .utils.options import OldSpelling  # a flag's hidden old spelling: parsed like the new one here

FLAGS_FILE = Path(__file__).resolve().parent / "assets" / "cli_flags.json"
_KINDS = {argparse._StoreAction: "store", argparse._StoreTrueAction: "store_true", OldSpelling: "store"}


def _action(a: argparse.Action) -> dict[str, Any]:
    """One flag or positional as plain data (the default kept only when it is not SUPPRESS)."""
    kind = _KINDS.get(type(a))
    if kind is None:
        raise TypeError(f"{a.dest}: argparse action {type(a).__name__} has no entry in cli_flags._KINDS")
    row: dict[str, Any] = {"kind": kind, "dest": a.dest, "flags": list(a.option_strings), "help": a.help}
    if a.default is not argparse.SUPPRESS:
        row["default"] = a.default
    if kind == "store":
        row.update(metavar=a.metavar, required=a.required, choices=list(a.choices) if a.choices else None)
    return row


def snapshot(parser: argparse.ArgumentParser) -> dict[str, dict[str, Any]]:
    """``{command: {"help": summary, "description": text, "actions": [...]}}`` of a parser built with every command."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {c.dest: c.help for c in sub._choices_actions}
    return {
        name: {
            "help": summaries.get(name, ""),
            "description": p.description,
            "actions": [_action(a) for a in p._actions if not isinstance(a, argparse._HelpAction)],
        }
        for name, p in sub.choices.items()
    }


def load_snapshot() -> dict[str, dict[str, Any]]:
    """The committed snapshot (``assets/cli_flags.json``)."""
    return json.loads(FLAGS_FILE.read_text())


def _add(p: argparse.ArgumentParser, row: dict[str, Any]) -> None:
    extra = {"default": row["default"]} if "default" in row else {"default": argparse.SUPPRESS}
    if row["kind"] == "store":
        extra.update(metavar=row["metavar"], choices=row["choices"])
        if row["flags"]:
            extra["required"] = row["required"]
    names = row["flags"] or [row["dest"]]
    dest = {"dest": row["dest"]} if row["flags"] else {}
    hidden = row["help"] == argparse.SUPPRESS  # argparse hides by identity with its constant, not equality
    p.add_argument(*names, action=row["kind"], help=argparse.SUPPRESS if hidden else row["help"], **dest, **extra)


def add_light(sub: argparse._SubParsersAction, name: str, spec: dict[str, Any]) -> argparse.ArgumentParser:
    """Add command ``name`` to ``sub`` with the flags of its snapshot ``spec``."""
    p = sub.add_parser(name, help=spec["help"], description=spec["description"])
    for row in spec["actions"]:
        _add(p, row)
    return p


def write_snapshot(parser: argparse.ArgumentParser) -> Path:
    """Write the snapshot of ``parser`` (the CLI's, built with every command) to ``assets/cli_flags.json``."""
    FLAGS_FILE.write_text(json.dumps(snapshot(parser), indent=1, sort_keys=True) + "\n")
    return FLAGS_FILE
